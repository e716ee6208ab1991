"""Interpolate a label between the slices where it was drawn.

ITK's morphological contour interpolation (Zukić et al.) is used when the installed
SimpleITK has it (it is a remote module that PyPI's SimpleITK wheels leave out). Otherwise,
and documented here, shape-based interpolation (Raya & Udupa 1990; Herman et al. 1992):
for two drawn slices with only empty slices between them, take each one's signed
distance map in mm (negative inside), blend them linearly along the axis, and keep
where the blend is ≤ 0. A contour thus morphs from one drawn slice to the next.

Only empty slices between drawn ones change, and only where the rules allow (by
default: background only).
"""

from __future__ import annotations

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, label_box, paint_mask, require_label


def signed_distance_mm(mask: np.ndarray, spacing: tuple[float, float]) -> np.ndarray:
    """Distance to the contour in mm: negative inside, positive outside (pixel centres, half-pixel shifted)."""
    from scipy import ndimage

    outside = ndimage.distance_transform_edt(~mask, sampling=spacing)
    inside = ndimage.distance_transform_edt(mask, sampling=spacing)
    return np.where(mask, -inside + 0.5 * min(spacing), outside - 0.5 * min(spacing))


def shape_based(inside: np.ndarray, spacing_zyx: tuple[float, float, float], axis: int) -> np.ndarray:
    """``inside`` with every empty slice between two drawn slices (along ``axis``) filled by distance blending."""
    moved = np.moveaxis(inside, axis, 0)
    result = moved.copy()
    plane_spacing = tuple(s for a, s in enumerate(spacing_zyx) if a != axis)
    drawn = np.flatnonzero(moved.any(axis=(1, 2)))
    for low, high in zip(drawn[:-1], drawn[1:]):
        if high - low < 2:
            continue
        d_low = signed_distance_mm(moved[low], plane_spacing)  # type: ignore[arg-type]
        d_high = signed_distance_mm(moved[high], plane_spacing)  # type: ignore[arg-type]
        for k in range(low + 1, high):
            t = (k - low) / (high - low)
            result[k] = (1 - t) * d_low + t * d_high <= 0
    return np.moveaxis(result, 0, axis)


def _itk_interpolate(inside: np.ndarray, spacing_zyx, axis: int) -> np.ndarray | None:
    import SimpleITK as sitk

    interpolator = getattr(sitk, "MorphologicalContourInterpolator", None)
    if interpolator is None:
        return None
    source = sitk.GetImageFromArray(inside.astype(np.uint8))
    source.SetSpacing(tuple(float(s) for s in reversed(spacing_zyx)))
    result = interpolator(source, label=1, axis=2 - axis, useDistanceTransform=True)  # ITK axes are x, y, z
    return sitk.GetArrayFromImage(result).astype(bool)


def interpolate_slices(label_map: LabelMap, value: int, axis: int = 0,
                       rules: PaintRules = PaintRules(overwrite="background"),
                       image: Volume | None = None, method: str = "auto") -> Delta | None:
    """``axis`` is the (z, y, x) array axis the slices are taken along (0: axial).
    ``method``: "auto" (ITK's when available), "itk" or "distance"."""
    require_label(label_map, value, unlocked=False)
    box = label_box(label_map, value)
    if box is None:
        return None
    inside = label_map.array[box_slices(box)] == value
    filled = _itk_interpolate(inside, label_map.spacing_zyx, axis) if method in ("auto", "itk") else None
    if filled is None:
        filled = shape_based(inside, label_map.spacing_zyx, axis)
    drawn = np.moveaxis(inside, axis, 0).any(axis=(1, 2))
    keep_drawn = np.moveaxis(np.broadcast_to(~drawn[:, None, None], np.moveaxis(inside, axis, 0).shape), 0, axis)
    return paint_mask(label_map, box[0], filled & ~inside & keep_drawn, value, rules, image)
