"""Logical operations between two labels of one label map.

Each voxel carries one label, so A and B never overlap. ``union`` moves B's voxels into A.
``intersect``/``subtract`` use B's *region*: B together with everything B encloses
(its holes filled, e.g. a lesion labelled apart inside the liver outline): intersect keeps
A only inside that region, subtract removes A from it.
"""

from __future__ import annotations

import numpy as np

from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, erase_mask, label_box, paint_mask, require_label


def _region(label_map: LabelMap, value: int):
    from scipy import ndimage

    box = label_box(label_map, value, (1, 1, 1))
    if box is None:
        return None, None
    return box, ndimage.binary_fill_holes(label_map.array[box_slices(box)] == value)


def union(label_map: LabelMap, a: int, b: int, rules: PaintRules = PaintRules()) -> Delta | None:
    """A := A ∪ B (B's voxels become A; B is emptied). Refused when B is locked."""
    require_label(label_map, a, unlocked=False)
    require_label(label_map, b)
    box = label_box(label_map, b)
    if box is None:
        return None
    return paint_mask(label_map, box[0], label_map.array[box_slices(box)] == b, a, rules)


def intersect(label_map: LabelMap, a: int, b: int) -> Delta | None:
    """A := A ∩ region(B): A's voxels outside B's filled region become background."""
    require_label(label_map, a)
    require_label(label_map, b, unlocked=False)
    box_a = label_box(label_map, a)
    if box_a is None:
        return None
    box_b, region = _region(label_map, b)
    block_a = label_map.array[box_slices(box_a)] == a
    keep = np.zeros_like(block_a)
    if box_b is not None:
        lo = [max(x, y) for x, y in zip(box_a[0], box_b[0])]
        hi = [min(x, y) for x, y in zip(box_a[1], box_b[1])]
        if all(h > l for l, h in zip(lo, hi)):
            in_a = tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, box_a[0]))
            in_b = tuple(slice(l - o, h - o) for l, h, o in zip(lo, hi, box_b[0]))
            keep[in_a] = region[in_b]
    return erase_mask(label_map, box_a[0], block_a & ~keep, only_value=a)


def subtract(label_map: LabelMap, a: int, b: int) -> Delta | None:
    """A := A − region(B): A's voxels inside B's filled region become background."""
    require_label(label_map, a)
    require_label(label_map, b, unlocked=False)
    box_b, region = _region(label_map, b)
    if box_b is None:
        return None
    return erase_mask(label_map, box_b[0], region, only_value=a)
