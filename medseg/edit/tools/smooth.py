"""Smooth one label: Gaussian blur of its mask (sigma in mm, per-axis from the spacing), kept where ≥ 0.5.

Voxels the smoothing removes become background; voxels it adds are painted through the
rules (locks, HU range, background-only), so no other label is harmed unless allowed.
"""

from __future__ import annotations

import math

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, erase_mask, label_box, paint_mask, require_label
from medseg.errors import MedsegError


def smoothed_mask(inside: np.ndarray, sigma_mm: float, spacing_zyx) -> np.ndarray:
    from scipy import ndimage

    sigma = [sigma_mm / s for s in spacing_zyx]
    return ndimage.gaussian_filter(inside.astype(np.float32), sigma, mode="nearest", truncate=3.0) >= 0.5


def smooth(label_map: LabelMap, value: int, sigma_mm: float, rules: PaintRules = PaintRules(),
           image: Volume | None = None) -> Delta | None:
    require_label(label_map, value)
    if not sigma_mm > 0 or not math.isfinite(sigma_mm):
        raise MedsegError(f"the smoothing width must be a positive number of millimetres, got {sigma_mm}")
    pad = tuple(int(math.ceil(3 * sigma_mm / s)) + 1 for s in label_map.spacing_zyx)
    box = label_box(label_map, value, pad)
    if box is None:
        return None
    inside = label_map.array[box_slices(box)] == value
    smooth_inside = smoothed_mask(inside, sigma_mm, label_map.spacing_zyx)
    removed = erase_mask(label_map, box[0], inside & ~smooth_inside, only_value=value)
    added = paint_mask(label_map, box[0], smooth_inside & ~inside, value, rules, image)
    return combine(label_map, removed, added)


def combine(label_map: LabelMap, *deltas: Delta | None) -> Delta | None:
    """Deltas over disjoint voxels as one delta."""
    result = None
    for delta in deltas:
        if delta is None:
            continue
        result = delta if result is None else Delta.merge(result, delta, label_map.shape_zyx,
                                                           np.promote_types(result.new.dtype, delta.new.dtype))
    return result
