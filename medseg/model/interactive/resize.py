"""Crops around a prompt, and the zoom-out that fits a larger crop into the network's patch.

The image is normalised only where a crop needs it: nnInteractive normalises the whole image
once (a float32 copy, 4 bytes a voxel) with the mean and standard deviation of its nonzero
region; here the statistics are computed once and each crop is normalised on the way out,
with the same float32 operations, so every voxel gets the same value.

Zooming out (nnInteractive's AutoZoom) crops a cube ``zoom`` times the patch and resizes it to
the patch: the image trilinearly, the prompt channels by area averaging (points and scribbles
first dilated so that they survive it), the previous answer by nearest neighbour for the border
test. These resizes are PyTorch's own, in the dtypes nnInteractive uses (float16 averaging is
accumulated in float16 by PyTorch: any other arithmetic would change the result); a channel
with nothing in the crop is all zeros after any of them, so it is not resized at all.
"""

from __future__ import annotations

from math import ceil, floor
from typing import Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy.ndimage import maximum_filter

from medseg.model.interactive.prompts import Box

_STATS_SLAB_VOXELS = 1 << 24  # statistics are accumulated over slabs of about this many voxels


def clip_box(box: Box, shape: Sequence[int]) -> Box | None:
    clipped = [[max(0, lo), min(hi, s)] for (lo, hi), s in zip(box, shape)]
    return None if any(hi <= lo for lo, hi in clipped) else clipped


def union_box(boxes: Sequence[Box]) -> Box:
    return [[min(b[a][0] for b in boxes), max(b[a][1] for b in boxes)] for a in range(3)]


def centred_box(centre: Sequence[int], size: Sequence[int]) -> Box:
    """nnInteractive's crop around a centre: c - s//2 to c + s//2 + s%2."""
    return [[c - s // 2, c + s // 2 + s % 2] for c, s in zip(centre, size)]


def local(box: Box, frame: Box) -> tuple[slice, ...]:
    return tuple(slice(lo - f, hi - f) for (lo, hi), (f, _) in zip(box, frame))


def round_to_odd(number: float) -> int:
    """nnInteractive's round_to_nearest_odd (the dilation width for a zoom factor)."""
    up, down = ceil(number), floor(number)
    if up % 2 == 1:
        return up
    if down % 2 == 1:
        return down
    return round(number) + 1


class NormalisedImage:
    """The image as the network sees it, cropped and normalised on demand."""

    def __init__(self, array: np.ndarray):
        if array.ndim != 3:
            raise ValueError(f"expected a 3D array, got shape {array.shape}")
        self.array = array
        self.shape = tuple(int(s) for s in array.shape)
        box = _nonzero_box(array)
        if box is None:
            from medseg.errors import ModelError

            raise ModelError("the image is all zeros: it has nothing to normalise or segment")
        self.mean, self.std = _mean_std(array, box)

    def crop(self, box: Box) -> torch.Tensor:
        """float32 (z, y, x) over ``box``; zeros where the box leaves the image (nnInteractive's padding)."""
        out = torch.zeros([hi - lo for lo, hi in box], dtype=torch.float32)
        inside = clip_box(box, self.shape)
        if inside is not None:
            values = torch.from_numpy(np.asarray(self.array[tuple(slice(lo, hi) for lo, hi in inside)],
                                                 dtype=np.float32).copy())
            values -= self.mean
            values /= self.std
            out[local(inside, box)] = values
        return out


def _nonzero_box(array: np.ndarray) -> Box | None:
    box = []
    for axis in range(3):
        others = tuple(a for a in range(3) if a != axis)
        hits = np.flatnonzero(np.any(array != 0, axis=others))
        if hits.size == 0:
            return None
        box.append([int(hits[0]), int(hits[-1]) + 1])
    return box


def _mean_std(array: np.ndarray, box: Box) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and sample standard deviation over the box, in float64 slab by slab, as float32 scalars.

    nnInteractive reduces a float32 copy of the box with PyTorch; the float64 result rounded to
    float32 is the correctly rounded value, which PyTorch's float32 reduction reaches or misses by
    an ulp (a relative 1e-7 shift of every input: below what changes an answer).
    """
    region = array[tuple(slice(lo, hi) for lo, hi in box)]
    rows = max(1, _STATS_SLAB_VOXELS // max(1, region[0].size))
    count = region.size
    total = 0.0
    for start in range(0, region.shape[0], rows):
        total += float(np.sum(region[start:start + rows], dtype=np.float64))
    mean = total / count
    squares = 0.0
    for start in range(0, region.shape[0], rows):
        slab = region[start:start + rows].astype(np.float64) - mean
        squares += float(np.einsum("ijk,ijk->", slab, slab))
    std = (squares / max(1, count - 1)) ** 0.5
    return torch.tensor(mean, dtype=torch.float32), torch.tensor(std, dtype=torch.float32)


# --- zoomed-out input -------------------------------------------------------------------------
def dilate(values: torch.Tensor, width: int) -> torch.Tensor:
    """Max over a width^3 window clipped to the array (nnInteractive's replicate-padded max pool).

    Only around the nonzero voxels: elsewhere the maximum of zeros is zero. The maximum is exact in
    any dtype, so scipy computes it on a float32 copy.
    """
    if width <= 1:
        return values.clone()
    radius = (width - 1) // 2
    out = torch.zeros_like(values)
    nonzero = _nonzero_box(values.numpy())
    if nonzero is None:
        return out
    region = [[max(0, lo - radius), min(s, hi + radius)] for (lo, hi), s in zip(nonzero, values.shape)]
    sl = tuple(slice(lo, hi) for lo, hi in region)
    filtered = maximum_filter(values[sl].numpy().astype(np.float32), size=width, mode="nearest")
    out[sl] = torch.from_numpy(filtered.astype(np.float16))
    return out


def area_resize(values: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return F.interpolate(values[None, None], list(size), mode="area")[0, 0]


def nearest_resize(values: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return F.interpolate(values[None, None], list(size), mode="nearest")[0, 0]


def trilinear_resize(values: torch.Tensor, size: Sequence[int]) -> torch.Tensor:
    return F.interpolate(values[None, None], list(size), mode="trilinear")[0, 0]
