"""Scissors and lasso: an outline drawn on a view cuts (or fills) through the volume.

The outline is a polygon in the view's plane, given in continuous voxel indices of the two
array axes that span it (a freehand stroke is a polygon with many points). A voxel belongs
to it when its centre lies inside (even-odd rule, as skimage.draw and most painters). The
polygon is extruded along the view's normal through the whole volume, or through a slab
of ``slab_mm`` centred on the slice it was drawn on; on a series shown as acquired
(irregular slice positions) the slab is measured with the slices' true positions. Both
work on whichever grid the label map has: the extrusion follows the index axis the view
looks along.

The lasso is the same polygon filled on one slice: the quick outline before "interpolate
between slices".
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.tool_parameters import SCISSORS_OPERATIONS as OPERATIONS  # noqa: F401 (re-exported)
from medseg.edit.tool_parameters import ScissorsParameters
from medseg.edit.tools.rules import PaintRules, erase_mask, paint_mask, require_label
from medseg.errors import MedsegError


def polygon_mask(points_ij: Sequence[Sequence[float]], shape_ij: tuple[int, int]) -> np.ndarray:
    """Pixels (i, j) of a ``shape_ij`` plane whose centre lies inside the polygon (even-odd rule).

    A scan line per row i: the edges crossing it, sorted, fill the pixels between pairs.
    """
    points = np.asarray(points_ij, dtype=np.float64)
    if points.ndim != 2 or points.shape[1] != 2 or len(points) < 3:
        raise MedsegError("an outline needs at least three points")
    if not np.isfinite(points).all():
        raise MedsegError("the outline has points that are not finite numbers")
    mask = np.zeros(shape_ij, dtype=bool)
    a, b = points, np.roll(points, -1, axis=0)
    rows = np.arange(max(0, int(math.floor(points[:, 0].min()))), min(shape_ij[0], int(math.ceil(points[:, 0].max())) + 1))
    columns = np.arange(shape_ij[1])
    for i in rows:
        # an edge counts once when the row lies in [low end, high end): vertices are not counted twice
        crosses = (a[:, 0] <= i) != (b[:, 0] <= i)
        if not crosses.any():
            continue
        a0, a1, b0, b1 = a[crosses, 0], a[crosses, 1], b[crosses, 0], b[crosses, 1]
        j_cross = np.sort(a1 + (i - a0) * (b1 - a1) / (b0 - a0))
        inside = (np.searchsorted(j_cross, columns, side="right") % 2) == 1
        mask[i] = inside
    return mask


def slab_range(volume: Volume, axis_zyx: int, centre: int, slab_mm: float | None) -> tuple[int, int]:
    """[first, last + 1) of the slices along ``axis_zyx`` whose centres lie within ``slab_mm`` / 2 of slice
    ``centre`` (every slice when ``slab_mm`` is None)."""
    count = volume.shape_zyx[axis_zyx]
    if slab_mm is None:
        return 0, count
    positions = np.arange(count) * volume.spacing_zyx[axis_zyx]
    acquired = volume.meta.extra.get("slice_positions_mm") if axis_zyx == 0 else None
    if acquired and len(acquired) == count:
        # a series shown as acquired: measure along the slice normal with the slices' true positions
        points = np.asarray(acquired, dtype=np.float64)
        normal = volume.direction[:, 2]
        positions = points @ normal
    distance = np.abs(positions - positions[int(centre)])
    inside = np.flatnonzero(distance <= slab_mm / 2.0 + 1e-6)
    return int(inside.min()), int(inside.max()) + 1


def prism(label_map: LabelMap, points_ij, axis_zyx: int, centre: int | None, slab_mm: float | None,
          outside: bool = False) -> tuple[tuple[int, int, int], np.ndarray]:
    """(corner, mask) of the polygon extruded along ``axis_zyx`` (its complement within the slab when ``outside``)."""
    if axis_zyx not in (0, 1, 2):
        raise MedsegError(f"the view's axis must be 0, 1 or 2 (z, y, x), not {axis_zyx!r}")
    plane_axes = [a for a in range(3) if a != axis_zyx]
    shape = label_map.shape_zyx
    outline = polygon_mask(points_ij, (shape[plane_axes[0]], shape[plane_axes[1]]))
    if outside:
        outline = ~outline
    if slab_mm is not None and centre is None:
        raise MedsegError("a slab needs the slice the outline was drawn on")
    if centre is not None and not 0 <= int(centre) < shape[axis_zyx]:
        raise MedsegError(f"slice {centre} is outside the image (0…{shape[axis_zyx] - 1})")
    first, last = slab_range(label_map, axis_zyx, int(centre or 0), slab_mm)
    mask = np.expand_dims(outline, axis_zyx)
    lo = [0, 0, 0]
    lo[axis_zyx] = first
    return tuple(lo), np.broadcast_to(mask, tuple(n if a != axis_zyx else last - first
                                                    for a, n in enumerate(shape)))  # type: ignore[return-value]


def scissors(label_map: LabelMap, points_ij, axis_zyx: int, parameters: ScissorsParameters = ScissorsParameters(),
             centre: int | None = None, value: int | None = None, rules: PaintRules = PaintRules(),
             image: Volume | None = None, only_value: int | None = None) -> Delta | None:
    """Erase (any unlocked label, or only ``only_value``) or fill with ``value`` inside or outside the outline."""
    erase = parameters.operation.startswith("erase")
    if not erase:
        if value is None:
            raise MedsegError("filling with the scissors needs a label")
        require_label(label_map, value, unlocked=False)
    lo, mask = prism(label_map, points_ij, axis_zyx, centre, parameters.slab_mm,
                     outside=parameters.operation.endswith("outside"))
    if erase:
        return erase_mask(label_map, lo, mask, only_value, rules, image)
    return paint_mask(label_map, lo, mask, int(value), rules, image)  # type: ignore[arg-type]


def lasso(label_map: LabelMap, points_ij, axis_zyx: int, slice_index: int, value: int,
          rules: PaintRules = PaintRules(), image: Volume | None = None) -> Delta | None:
    """Fill the outline with ``value`` on one slice."""
    require_label(label_map, value, unlocked=False)
    shape = label_map.shape_zyx
    if not 0 <= int(slice_index) < shape[axis_zyx]:
        raise MedsegError(f"slice {slice_index} is outside the image (0…{shape[axis_zyx] - 1})")
    plane_axes = [a for a in range(3) if a != axis_zyx]
    outline = polygon_mask(points_ij, (shape[plane_axes[0]], shape[plane_axes[1]]))
    lo = tuple(int(slice_index) if a == axis_zyx else 0 for a in range(3))
    return paint_mask(label_map, lo, np.expand_dims(outline, axis_zyx), value, rules, image)  # type: ignore[arg-type]
