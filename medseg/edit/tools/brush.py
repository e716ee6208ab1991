"""Brush and eraser: a sphere (3D) or a disc in the view's plane (2D), radius in millimetres.

The ball holds every voxel whose centre lies within the radius of the (continuous) point
that was clicked, measured in mm with the voxel spacing, so a 10 mm brush on
0.98 × 0.98 × 2 mm voxels spans 21 columns but only 11 slices. A radius below half a
voxel still paints the voxel under the point. A stroke interpolates dabs between mouse
positions (at most half a radius apart) so a fast drag leaves no gaps.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, erase_mask, paint_mask
from medseg.errors import MedsegError


def _box_for(points: np.ndarray, radius_mm: float, spacing_zyx: np.ndarray, shape, plane_axis: int | None):
    reach = radius_mm / spacing_zyx
    lo = np.floor(points.min(axis=0) - reach).astype(int)
    hi = np.floor(points.max(axis=0) + reach).astype(int) + 1
    nearest = np.rint(points).astype(int)
    lo = np.minimum(lo, nearest.min(axis=0))
    hi = np.maximum(hi, nearest.max(axis=0) + 1)
    if plane_axis is not None:
        lo[plane_axis] = int(nearest[:, plane_axis].min())
        hi[plane_axis] = int(nearest[:, plane_axis].max()) + 1
    lo = np.clip(lo, 0, shape)
    hi = np.clip(hi, 0, shape)
    return lo, hi


def ball_mask(points_zyx: Sequence[Sequence[float]], radius_mm: float, spacing_zyx, shape_zyx,
              plane_axis: int | None = None) -> tuple[tuple[int, int, int], np.ndarray] | None:
    """(corner, mask) of the union of balls (or discs) around ``points_zyx`` (continuous voxel indices)."""
    if not radius_mm > 0:
        raise MedsegError(f"the brush radius must be positive, got {radius_mm} mm")
    points = np.atleast_2d(np.asarray(points_zyx, dtype=np.float64))
    spacing = np.asarray(spacing_zyx, dtype=np.float64)
    if plane_axis is not None:
        points = points.copy()
        points[:, plane_axis] = np.rint(points[:, plane_axis])
    lo, hi = _box_for(points, radius_mm, spacing, np.asarray(shape_zyx), plane_axis)
    if np.any(hi <= lo):
        return None
    mask = np.zeros(tuple(hi - lo), dtype=bool)
    reach = radius_mm / spacing
    r2 = radius_mm * radius_mm
    for point in points:
        # each ball only over its own small box inside the stroke's box (a long stroke stays linear in its length)
        b_lo = np.maximum(np.floor(point - reach).astype(int), lo)
        b_hi = np.minimum(np.floor(point + reach).astype(int) + 1, hi)
        if plane_axis is not None:
            b_lo[plane_axis] = int(point[plane_axis])
            b_hi[plane_axis] = int(point[plane_axis]) + 1
        if np.all(b_hi > b_lo):
            d = [((np.arange(a, b) - p) * s) ** 2 for a, b, p, s in zip(b_lo, b_hi, point, spacing)]
            if plane_axis is not None:
                d[plane_axis][...] = 0.0
            ball = (d[0][:, None, None] + d[1][None, :, None]) + d[2][None, None, :] <= r2
            mask[tuple(slice(a - o, b - o) for a, b, o in zip(b_lo, b_hi, lo))] |= ball
        nearest = np.rint(point).astype(int) - lo
        if np.all(nearest >= 0) and np.all(nearest < mask.shape):
            mask[tuple(nearest)] = True  # a brush smaller than a voxel still paints the voxel under it
    return tuple(int(v) for v in lo), mask  # type: ignore[return-value]


def path_points(points_zyx: Sequence[Sequence[float]], radius_mm: float, spacing_zyx) -> np.ndarray:
    """The mouse positions plus interpolated ones so that dabs are at most half a radius apart (in mm)."""
    points = np.atleast_2d(np.asarray(points_zyx, dtype=np.float64))
    spacing = np.asarray(spacing_zyx, dtype=np.float64)
    step_mm = max(radius_mm / 2.0, float(spacing.min()) / 2.0)
    out = [points[0]]
    for a, b in zip(points[:-1], points[1:]):
        length = float(np.linalg.norm((b - a) * spacing))
        n = max(1, int(math.ceil(length / step_mm)))
        for t in np.arange(1, n + 1) / n:
            out.append(a + (b - a) * t)
    return np.asarray(out)


def stroke(label_map: LabelMap, points_zyx: Sequence[Sequence[float]], radius_mm: float, value: int,
           rules: PaintRules = PaintRules(), image: Volume | None = None, plane_axis: int | None = None,
           erase: bool = False, only_value: int | None = None) -> Delta | None:
    """Paint ``value`` (or erase, when ``erase``) along the path through ``points_zyx``: one delta."""
    path = path_points(points_zyx, radius_mm, label_map.spacing_zyx)
    found = ball_mask(path, radius_mm, label_map.spacing_zyx, label_map.shape_zyx, plane_axis)
    if found is None:
        return None
    lo, mask = found
    if erase:
        return erase_mask(label_map, lo, mask, only_value, rules, image)
    return paint_mask(label_map, lo, mask, value, rules, image)


def dab(label_map: LabelMap, point_zyx: Sequence[float], radius_mm: float, value: int,
        rules: PaintRules = PaintRules(), image: Volume | None = None, plane_axis: int | None = None,
        erase: bool = False, only_value: int | None = None) -> Delta | None:
    """One brush (or eraser) dab at a continuous voxel position (z, y, x)."""
    return stroke(label_map, [point_zyx], radius_mm, value, rules, image, plane_axis, erase, only_value)
