"""The patch arithmetic of the interactive session: the small first patch, a cube's faces, a patch's edges in
words, a box as slices."""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from medseg.model.interactive.prompts import Box
from medseg.model.interactive.resize import clip_box, local

SMALL_SHARE = 0.5  # the small first patch's edge, as a share of the patch's (before rounding to the stride)


def small_patch_for(patch: Sequence[int], divisor: Sequence[int]) -> tuple[int, ...] | None:
    """The small first patch: :data:`SMALL_SHARE` of each edge rounded up to the network's total stride on that
    axis (the network is fully convolutional, but every pooling must divide evenly); None when that is no
    smaller than the patch."""
    small = tuple(max(d, math.ceil(p * SMALL_SHARE / d) * d) for p, d in zip(patch, divisor))
    return small if all(s <= p for s, p in zip(small, patch)) and small != tuple(patch) else None


def on_faces(cube: np.ndarray) -> np.ndarray:
    """The values on a cube's 6 faces, one flat array (axis 0's faces first, the first face before the last)."""
    return np.concatenate([np.take(cube, index, axis=axis).ravel()
                           for axis in range(3) for index in (0, cube.shape[axis] - 1)])


def edges(patch: Sequence[int]) -> str:
    return f"{patch[0]}^3" if len(set(patch)) == 1 else " x ".join(map(str, patch))


def box_slices(box: Box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in box)


def crop_of(mask: np.ndarray, box: Box) -> np.ndarray:
    """``mask`` over ``box`` (which may reach outside it: zeros there)."""
    out = np.zeros([hi - lo for lo, hi in box], np.uint8)
    inside = clip_box(box, mask.shape)
    if inside is not None:
        out[local(inside, box)] = mask[box_slices(inside)]
    return out
