"""Fill the holes of a label: background voxels the label encloses completely (3D, or per slice on one axis)."""

from __future__ import annotations

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, label_box, paint_mask, require_label


def fill_holes(label_map: LabelMap, value: int, rules: PaintRules = PaintRules(overwrite="background"),
               image: Volume | None = None, plane_axis: int | None = None) -> Delta | None:
    """Holes are filled only where the rules allow; by default only background (a lesion labelled
    apart inside an organ is an enclosed region too, and stays)."""
    from scipy import ndimage

    require_label(label_map, value, unlocked=False)
    box = label_box(label_map, value, (1, 1, 1))
    if box is None:
        return None
    inside = label_map.array[box_slices(box)] == value
    if plane_axis is None:
        filled = ndimage.binary_fill_holes(inside)
    else:
        filled = np.zeros_like(inside)
        for i in range(inside.shape[plane_axis]):
            index = [slice(None)] * 3
            index[plane_axis] = i
            filled[tuple(index)] = ndimage.binary_fill_holes(inside[tuple(index)])
    return paint_mask(label_map, box[0], filled & ~inside, value, rules, image)
