"""Grow or shrink a label by a margin in millimetres (anisotropy-aware).

Grow: a voxel joins the label when its centre lies within ``mm`` of a label voxel's
centre. Shrink: a label voxel leaves when its centre lies within ``mm`` of a voxel
outside the label (the image border does not count as outside). Distances are exact
Euclidean distances in mm on the voxel grid (scipy's EDT with the spacing).
"""

from __future__ import annotations

import math

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, erase_mask, label_box, paint_mask, require_label
from medseg.errors import MedsegError


def _check(mm: float) -> None:
    if not mm >= 0 or not math.isfinite(mm):
        raise MedsegError(f"the margin must be a non-negative number of millimetres, got {mm}")


def grow(label_map: LabelMap, value: int, mm: float, rules: PaintRules = PaintRules(),
         image: Volume | None = None) -> Delta | None:
    from scipy import ndimage

    require_label(label_map, value, unlocked=False)
    _check(mm)
    pad = tuple(int(math.ceil(mm / s)) + 1 for s in label_map.spacing_zyx)
    box = label_box(label_map, value, pad)
    if box is None or mm == 0:
        return None
    inside = label_map.array[box_slices(box)] == value
    distance = ndimage.distance_transform_edt(~inside, sampling=label_map.spacing_zyx)
    return paint_mask(label_map, box[0], (distance <= mm) & ~inside, value, rules, image)


def shrink(label_map: LabelMap, value: int, mm: float) -> Delta | None:
    from scipy import ndimage

    require_label(label_map, value)
    _check(mm)
    box = label_box(label_map, value, (1, 1, 1))
    if box is None or mm == 0:
        return None
    inside = label_map.array[box_slices(box)] == value
    outside = ~inside
    # the image border is not "outside": pad the box with label where it touches the border
    pads = [(0 if lo > 0 else 1, 0 if hi < n else 1) for lo, hi, n in zip(*box, label_map.shape_zyx)]
    padded = np.pad(outside, pads, constant_values=False)
    distance = ndimage.distance_transform_edt(~padded, sampling=label_map.spacing_zyx)
    distance = distance[tuple(slice(a, a + n) for (a, _), n in zip(pads, inside.shape))]
    return erase_mask(label_map, box[0], inside & (distance <= mm), only_value=value)
