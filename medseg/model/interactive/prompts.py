"""The prompt channels, kept as the stamps that made them rather than as full-size volumes.

nnInteractive keeps 7 float16 volumes of the image's size (14 bytes a voxel) and writes each
prompt into them by element-wise maximum. The maximum does not depend on the order of writes,
so the same channels are the maximum of the stamps that were written: here each prompt keeps
its own small float16 block, and :meth:`PromptStore.render` builds any region of the channels
on demand. The values are nnInteractive's to the bit:

* each prompt is stamped at the current *intensity* I, which grows by 1/decay per prompt; the
  network sees the channels divided by I, so the newest prompt is 1 and a prompt k prompts old
  is decay^k;
* a point is a ball of radius r weighted by its Euclidean distance transform (peak 1 at the
  centre), times I, rounded to float16; a box is float16(I) over the box; a scribble or lasso
  mask is 1 -> float16(I);
* when I passes float16's maximum, every stamp is scaled by target/I (in float16) and I
  becomes the target (a tenth of float16's maximum), as nnInteractive rescales its volumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Sequence

import numpy as np
import torch
from scipy.ndimage import distance_transform_edt

Box = list[list[int]]  # [[lo, hi), ...] per axis, half-open
FP16_MAX = float(torch.finfo(torch.float16).max)
RENORMALIZED_INTENSITY = FP16_MAX / 10


@lru_cache(maxsize=8)
def point_stamp(radius: int) -> torch.Tensor:
    """The ball drawn for a point: a (2r+1)^3 block, distance to the ball's outside over its maximum."""
    grid = np.mgrid[-radius:radius:(2 * radius + 1) * 1j, -radius:radius:(2 * radius + 1) * 1j,
                    -radius:radius:(2 * radius + 1) * 1j]
    ball = (grid ** 2).sum(axis=0) <= radius * radius
    distance = distance_transform_edt(ball)
    distance /= distance.max()
    return torch.from_numpy(distance)  # float64, as its product with the intensity must be


@dataclass
class Stamp:
    channel: int
    origin: tuple[int, int, int]  # voxel of values[0, 0, 0] in the image
    values: torch.Tensor  # float16, (z, y, x)

    @property
    def box(self) -> Box:
        return [[o, o + s] for o, s in zip(self.origin, self.values.shape)]


class PromptStore:
    """The prompt channels of one object as a list of stamps, with nnInteractive's intensity bookkeeping."""

    def __init__(self, shape: Sequence[int], channels: int, decay: float):
        self.shape = tuple(int(s) for s in shape)
        self.channels = channels
        self.decay = decay
        self.intensity = 1.0
        self.stamps: list[Stamp] = []

    # -- intensity --------------------------------------------------------------------------
    def next_intensity(self) -> list[Stamp] | None:
        """Raise the intensity for a new prompt; returns the stamps' previous values when it rescaled them."""
        if self.decay < 1:
            self.intensity *= 1 / self.decay
        if self.intensity <= FP16_MAX:
            return None
        before = [Stamp(s.channel, s.origin, s.values.clone()) for s in self.stamps]
        scale = RENORMALIZED_INTENSITY / self.intensity
        for stamp in self.stamps:
            stamp.values *= scale
        self.intensity = RENORMALIZED_INTENSITY
        return before

    # -- drawing ----------------------------------------------------------------------------
    def add_point(self, channel: int, centre: Sequence[int], radius: int) -> None:
        ball = point_stamp(radius)
        if self.intensity != 1.0:
            ball = ball * self.intensity
        origin = [c - n // 2 for c, n in zip(centre, ball.shape)]
        self._add_clipped(channel, origin, ball.to(torch.float16))

    def add_box(self, channel: int, box: Box) -> None:
        shape = [hi - lo for lo, hi in box]
        values = torch.full(shape, self.intensity, dtype=torch.float16)
        self._add_clipped(channel, [lo for lo, _ in box], values)

    def add_mask(self, channel: int, mask: np.ndarray, origin: Sequence[int]) -> None:
        """A scribble or lasso: the mask's nonzero voxels at the current intensity."""
        values = torch.from_numpy(np.asarray(mask, dtype=np.float16))
        if self.intensity != 1:
            # as nnInteractive: float16 mask times the intensity, which float16 arithmetic first rounds
            values *= torch.tensor(self.intensity, dtype=torch.float16)
        bounds = _nonzero_box(values)
        if bounds is None:
            return
        values = values[tuple(slice(lo, hi) for lo, hi in bounds)].contiguous()
        self._add_clipped(channel, [o + lo for o, (lo, _) in zip(origin, bounds)], values)

    def _add_clipped(self, channel: int, origin: Sequence[int], values: torch.Tensor) -> None:
        lo = [max(0, o) for o in origin]
        hi = [min(s, o + n) for s, o, n in zip(self.shape, origin, values.shape)]
        if any(h <= low for low, h in zip(lo, hi)):
            return
        part = values[tuple(slice(a - o, b - o) for a, b, o in zip(lo, hi, origin))]
        self.stamps.append(Stamp(channel, tuple(lo), part.contiguous()))  # type: ignore[arg-type]

    # -- reading ----------------------------------------------------------------------------
    def channel_box(self, channel: int) -> Box | None:
        """Where a channel can be nonzero (the union of its stamps), or None."""
        boxes = [s.box for s in self.stamps if s.channel == channel]
        if not boxes:
            return None
        return [[min(b[a][0] for b in boxes), max(b[a][1] for b in boxes)] for a in range(3)]

    def render(self, channel: int, box: Box, out: torch.Tensor | None = None) -> torch.Tensor:
        """Channel values over ``box`` (which may reach outside the image: zeros there), float16."""
        shape = [hi - lo for lo, hi in box]
        if out is None:
            out = torch.zeros(shape, dtype=torch.float16)
        for stamp in self.stamps:
            if stamp.channel != channel:
                continue
            lo = [max(a, s) for (a, _), (s, _) in zip(box, stamp.box)]
            hi = [min(b, e) for (_, b), (_, e) in zip(box, stamp.box)]
            if any(h <= low for low, h in zip(lo, hi)):
                continue
            target = out[tuple(slice(a - b[0], c - b[0]) for a, c, b in zip(lo, hi, box))]
            source = stamp.values[tuple(slice(a - o, c - o) for a, c, o in zip(lo, hi, stamp.origin))]
            torch.maximum(target, source, out=target)
        return out

    def is_empty_in(self, channel: int, box: Box) -> bool:
        for stamp in self.stamps:
            if stamp.channel == channel and all(min(b, e) > max(a, s) for (a, b), (s, e) in zip(box, stamp.box)):
                return False
        return True


def _nonzero_box(values: torch.Tensor) -> Box | None:
    nonzero = values != 0
    box = []
    for axis in range(nonzero.ndim):
        others = tuple(a for a in range(nonzero.ndim) if a != axis)
        hits = torch.nonzero(nonzero.any(dim=others) if others else nonzero).flatten()
        if hits.numel() == 0:
            return None
        box.append([int(hits[0]), int(hits[-1]) + 1])
    return box
