"""nnU-Net's sliding-window tiling, and what it will run for a series, known from its geometry.

One home for the tile positions (``compute_steps``, ``tile_slicers``: what ``infer`` runs) and
for the count the Segment panel shows and ``run_estimate`` checks before a run (``plan_tiles``),
so the three can never disagree.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.io.orientation import reorientation_to
from medseg.model.preprocess import compute_new_shape, network_spacing, plan_transpose

# The tile step, as a fraction of the patch: 1 tiles edge to edge, nnU-Net's 0.5 overlaps by half;
# below 0.1 the tiles (and the time) grow a hundredfold for no better result.
STEP_RANGE = (0.1, 1.0)


def check_step(step_size: float) -> float:
    """The tile step, or a ModelError saying its range (``--step 1e-6`` explained tiles before)."""
    low, high = STEP_RANGE
    if not low <= step_size <= high:  # NaN too
        raise ModelError(f"the tile step is {step_size:g}: it must be between {low:g} and {high:g} (a fraction of the "
                         "patch; 0.5, the default, overlaps the tiles by half)")
    return step_size


def step_count(size: int, patch: int, step_size: float) -> int:
    """How many tile positions nnU-Net's sliding window uses along one axis of ``size`` voxels."""
    return int(np.ceil((size - patch) / (patch * step_size))) + 1


def compute_steps(image_size: Sequence[int], patch_size: Sequence[int], step_size: float) -> list[list[int]]:
    """Tile start positions per axis (nnU-Net's compute_steps_for_sliding_window)."""
    check_step(step_size)
    steps = []
    for size, patch in zip(image_size, patch_size):
        if size < patch:
            raise ModelError(f"image axis of {size} voxels is smaller than the patch ({patch})")
        n = step_count(size, patch, step_size)
        actual = (size - patch) / (n - 1) if n > 1 else 0.0
        steps.append([int(np.round(actual * i)) for i in range(n)])  # np.round: half to even, as nnU-Net
    return steps


def tile_slicers(image_shape: Sequence[int], patch_size: Sequence[int], step_size: float) -> list[tuple[Any, ...]]:
    """Index tuples into a (C, z, y, x) array, in nnU-Net's order (first axis outermost).

    A 2D patch runs over every slice of the first axis, each slice tiled in-plane.
    """
    patch = [int(p) for p in patch_size]
    if len(patch) == 3:
        steps = compute_steps(image_shape, patch, step_size)
        return [
            (slice(None), *(slice(s, s + p) for s, p in zip(start, patch)))
            for start in itertools.product(*steps)
        ]
    if len(patch) == 2:
        steps = compute_steps(image_shape[1:], patch, step_size)
        return [
            (slice(None), d, *(slice(s, s + p) for s, p in zip(start, patch)))
            for d in range(image_shape[0])
            for start in itertools.product(*steps)
        ]
    raise ModelError(f"patch size {patch_size} is neither 2D nor 3D")


def tile_count(image_shape: Sequence[int], patch_size: Sequence[int], step_size: float) -> int:
    """``len(tile_slicers(...))`` without listing them (an absurd plan has millions)."""
    check_step(step_size)
    patch = [int(p) for p in patch_size]
    tiled = list(image_shape[len(image_shape) - len(patch):])
    count = math.prod(step_count(max(n, p), p, step_size) for n, p in zip(tiled, patch))
    return count * (int(image_shape[0]) if len(patch) == 2 else 1)


@dataclass(frozen=True)
class TilePlan:
    """What the sliding window will run for a series, known before it runs (the Segment panel shows it)."""

    network_shape: tuple[int, int, int]  # the resampled image, in the plan's axis order
    network_spacing: tuple[float, float, float]  # its spacing (a 2D plan keeps the slice spacing)
    tiles: int


def plan_tiles(volume: Volume, plan: Any, step_size: float = 0.5) -> TilePlan:
    """The network's input grid and tile count for ``volume``, from its geometry alone.

    The same steps as ``infer.segment`` (preprocess's reorientation, transpose and target
    spacing, then pad_to_patch's padding and tile_slicers), without touching a voxel. preprocess
    also crops to the non-zero voxels first; CT is rarely zero at its border, and a crop can
    only lower the count, so this is the count or an upper bound of it.
    """
    axes_zyx = [0, 1, 2]
    if getattr(plan, "orientation", None):
        axes_zyx = reorientation_to(volume, plan.orientation).zyx_axes()
    shape = [volume.shape_zyx[a] for a in axes_zyx]
    spacing = [float(volume.spacing_zyx[a]) for a in axes_zyx]
    transpose = plan_transpose(plan)
    shape, spacing = [shape[a] for a in transpose], [spacing[a] for a in transpose]
    target = network_spacing(plan, spacing)
    network_shape = compute_new_shape(shape, spacing, target)
    tiles = tile_count(network_shape, plan.patch_size, step_size)
    return TilePlan(tuple(network_shape), tuple(target), tiles)  # type: ignore[arg-type]
