"""Click-to-region: level tracing on a slice, and a confidence-connected region in 3D.

* Level tracing (2D, as 3D Slicer's effect): the region face-connected to the voxel under
  the mouse, on the view's slice, whose intensities lie within ``tolerance_hu`` of that
  voxel's. The view shows its outline while hovering; a click fills it.
* Confidence connected (3D, ITK's ConfidenceConnected): start from the mean ± k·SD of the
  clicked voxel's neighbourhood, grow the connected region inside that range, recompute
  mean and SD over the region, and grow again (``iterations`` times). ``k`` widens it.

Both are found by ITK (SimpleITK), inside a box around the click (``reach_mm``) so a click
on a large CT stays quick, and painted through the usual rules (locks, HU range).
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.tool_parameters import ConfidenceParameters, LevelTraceParameters  # re-exported
from medseg.edit.tools.fill import connected_region
from medseg.edit.tools.rules import PaintRules, paint_mask, require_label
from medseg.errors import MedsegError


def _seed(label_map: LabelMap, seed_zyx: Sequence[int]) -> tuple[int, int, int]:
    seed = tuple(int(v) for v in seed_zyx)
    if len(seed) != 3 or any(not 0 <= s < n for s, n in zip(seed, label_map.shape_zyx)):
        raise MedsegError(f"the clicked point {seed[::-1]} (x, y, z) is outside the image")
    return seed


def level_trace_region(image: Volume, seed_zyx: Sequence[int], axis_zyx: int,
                       parameters: LevelTraceParameters = LevelTraceParameters()) -> np.ndarray:
    """The traced region on the seed's slice: a 2D mask of the plane (the two other array axes, in order)."""
    seed = tuple(int(v) for v in seed_zyx)
    index: list = [slice(None)] * 3
    index[axis_zyx] = seed[axis_zyx]
    plane = image.array[tuple(index)]
    local = [s for a, s in enumerate(seed) if a != axis_zyx]
    level = float(plane[tuple(local)])
    criterion = (plane >= level - parameters.tolerance_hu) & (plane <= level + parameters.tolerance_hu)
    return connected_region(np.ascontiguousarray(criterion), local)


def level_trace(label_map: LabelMap, image: Volume, seed_zyx: Sequence[int], axis_zyx: int, value: int,
                parameters: LevelTraceParameters = LevelTraceParameters(), rules: PaintRules = PaintRules()) -> Delta | None:
    """Fill the traced region with ``value``."""
    require_label(label_map, value, unlocked=False)
    label_map.check_fits(image)
    seed = _seed(label_map, seed_zyx)
    region = level_trace_region(image, seed, axis_zyx, parameters)
    lo = tuple(seed[a] if a == axis_zyx else 0 for a in range(3))
    return paint_mask(label_map, lo, np.expand_dims(region, axis_zyx), value, rules, image)  # type: ignore[arg-type]


def confidence_region(image: Volume, seed_zyx: Sequence[int],
                      parameters: ConfidenceParameters = ConfidenceParameters()) -> tuple[tuple[int, int, int], np.ndarray]:
    """(corner, mask) of ITK's confidence-connected region around the seed, within ``reach_mm``."""
    import SimpleITK as sitk

    seed = tuple(int(v) for v in seed_zyx)
    reach = [int(math.ceil(parameters.reach_mm / s)) for s in image.spacing_zyx]
    lo = tuple(max(0, s - r) for s, r in zip(seed, reach))
    hi = tuple(min(n, s + r + 1) for s, r, n in zip(seed, reach, image.shape_zyx))
    block = image.array[tuple(slice(a, b) for a, b in zip(lo, hi))]
    itk = sitk.GetImageFromArray(np.ascontiguousarray(block))
    itk.SetSpacing(tuple(float(s) for s in image.spacing_mm))
    local = [s - o for s, o in zip(seed, lo)]
    region = sitk.ConfidenceConnected(itk, seedList=[[local[2], local[1], local[0]]],
                                      numberOfIterations=int(parameters.iterations), multiplier=float(parameters.k),
                                      initialNeighborhoodRadius=int(parameters.neighbourhood_voxels), replaceValue=1)
    return lo, sitk.GetArrayFromImage(region).astype(bool)  # type: ignore[return-value]


def confidence_connected(label_map: LabelMap, image: Volume, seed_zyx: Sequence[int], value: int,
                         parameters: ConfidenceParameters = ConfidenceParameters(),
                         rules: PaintRules = PaintRules()) -> Delta | None:
    """Fill the confidence-connected region around the clicked voxel with ``value``."""
    require_label(label_map, value, unlocked=False)
    label_map.check_fits(image)
    seed = _seed(label_map, seed_zyx)
    lo, region = confidence_region(image, seed, parameters)
    return paint_mask(label_map, lo, region, value, rules, image)
