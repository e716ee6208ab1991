"""When to zoom out further, and which full-resolution patches refine a zoomed-out answer.

* :func:`changed_at_border`: the answer reaches past the patch when, on any of its 6 faces, it
  differs from the previous answer in more than 1,500 voxels, or in more than 100 with a
  relative change of the face's object area above 20 % (nnInteractive 2.6.0's thresholds, faces
  in the order axis 0, 1, 2, first face before last).
* :func:`changed_region`: where a zoomed-out answer differs from the previous one, opened with
  a 5^3 cube (erosion then dilation, the window clipped to the region) so specks need no patch.
* :func:`cover_boxes`: patches that cover that region, chosen greedily (each patch counts only
  its core, 24 voxels in from every face), candidate centres on a grid over the region; what the
  grid leaves uncovered is covered from random voxels of it. nnInteractive draws those from
  NumPy's unseeded global generator; here a generator seeded per prompt (``seed``), so the same
  prompts always give the same patches.
"""

from __future__ import annotations

import itertools
from typing import Sequence

import numpy as np
import torch
from scipy.ndimage import maximum_filter, minimum_filter

from medseg.model.interactive.prompts import Box

ABSOLUTE_CHANGE = 1500
MINIMUM_CHANGE = 100
RELATIVE_CHANGE = 0.2
OPENING_WIDTH = 5
MARGIN = 24
MAX_DEPTH = 3
GRID_SAMPLES, FALLBACK_SAMPLES = 25, 10  # random candidates per patch: after too deep a recursion, after the grid


def changed_at_border(answer: torch.Tensor, previous: torch.Tensor) -> bool:
    for axis in range(3):
        for index in (0, answer.shape[axis] - 1):
            before = previous.select(axis, index)
            now = answer.select(axis, index)
            area_before = float(torch.sum(before, dtype=torch.float32))
            area_now = float(torch.sum(now, dtype=torch.float32))
            differing = float(torch.sum(before != now, dtype=torch.float32))
            relative = max(area_before, area_now) / max(min(area_before, area_now), 1e-5) - 1
            if differing > ABSOLUTE_CHANGE:
                return True
            if differing > MINIMUM_CHANGE and relative > RELATIVE_CHANGE:
                return True
    return False


def changed_region(answer: np.ndarray, previous: np.ndarray) -> np.ndarray:
    """uint8 map of where the answer changed, opened with a 5^3 cube."""
    changed = (answer != previous).astype(np.uint8)
    changed = minimum_filter(changed, size=OPENING_WIDTH, mode="nearest")
    return maximum_filter(changed, size=OPENING_WIDTH, mode="nearest")


def cover_boxes(region: np.ndarray, patch: Sequence[int], seed: int) -> list[Box]:
    """Patches (boxes in the region's frame, possibly reaching outside it) covering its nonzero voxels."""
    rng = np.random.RandomState(seed)
    return _cover(region.astype(np.uint8), list(patch), "auto", rng, 0)


def _core(centre: Sequence[int], patch: Sequence[int], shape: Sequence[int]) -> tuple[slice, ...]:
    return tuple(slice(max(0, c - p // 2 + MARGIN), min(s, c + (p - p // 2) - MARGIN))
                 for c, p, s in zip(centre, patch, shape))


def _box(centre: Sequence[int], patch: Sequence[int]) -> Box:
    return [[c - p // 2, c + (p - p // 2)] for c, p in zip(centre, patch)]


def _cover(mask: np.ndarray, patch: list[int], stride, rng: np.random.RandomState, depth: int) -> list[Box]:
    if not mask.any():
        return []
    if depth > MAX_DEPTH:
        return _random_cover(mask, patch, GRID_SAMPLES, rng)
    lo, hi = _inclusive_bounds(mask)
    if stride == "auto":
        stride = [max(1, round((h - low) / 4)) for low, h in zip(lo, hi)]
    axes = [range(max(0, low), min(s, h + 1), st) for low, h, s, st in zip(lo, hi, mask.shape, stride)]
    candidates = [c for c in itertools.product(*axes) if mask[c]]
    if not candidates:
        return _cover(mask, patch, [max(1, s // 2) for s in stride], rng, depth + 1)
    uncovered = mask.copy()
    boxes: list[Box] = []
    while candidates and uncovered.any():
        best, best_count = None, 0
        for candidate in candidates:
            count = int(uncovered[_core(candidate, patch, mask.shape)].sum(dtype=np.int64))
            if count > best_count:  # the first of equals wins
                best, best_count = candidate, count
        if best is None:
            break
        boxes.append(_box(best, patch))
        uncovered[_core(best, patch, mask.shape)] = 0
        candidates = [c for c in candidates if uncovered[c]]
    if uncovered.any():
        boxes.extend(_random_cover(uncovered, patch, FALLBACK_SAMPLES, rng))
    return boxes


def _random_cover(mask: np.ndarray, patch: list[int], samples: int, rng: np.random.RandomState) -> list[Box]:
    boxes = []
    while mask.any():
        voxels = np.argwhere(mask)
        best, best_count = None, 0
        for _ in range(samples):
            centre = tuple(int(v) for v in voxels[rng.choice(len(voxels))])
            count = int(mask[_core(centre, patch, mask.shape)].sum(dtype=np.int64))
            if count > best_count:
                best, best_count = centre, count
        assert best is not None  # a patch wider than twice the margin always covers its own centre
        boxes.append(_box(best, patch))
        mask[_core(best, patch, mask.shape)] = 0
    return boxes


def _inclusive_bounds(mask: np.ndarray) -> tuple[list[int], list[int]]:
    lo, hi = [], []
    for axis in range(3):
        others = tuple(a for a in range(3) if a != axis)
        hits = np.flatnonzero(mask.any(axis=others))
        lo.append(int(hits[0]))
        hi.append(int(hits[-1]))
    return lo, hi
