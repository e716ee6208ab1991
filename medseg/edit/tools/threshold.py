"""Threshold to label: paint a label wherever low ≤ HU ≤ high (optionally only inside a box)."""

from __future__ import annotations

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Box, Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, paint_mask, require_label
from medseg.errors import MedsegError


def threshold(label_map: LabelMap, image: Volume, low: float, high: float, value: int,
              rules: PaintRules = PaintRules(), box: Box | None = None) -> Delta | None:
    require_label(label_map, value, unlocked=False)
    if low > high:
        raise MedsegError(f"the threshold range {low:g}…{high:g} is empty (low > high)")
    label_map.check_fits(image)
    box = box or ((0, 0, 0), label_map.shape_zyx)
    hu = image.array[box_slices(box)]
    mask = (hu >= low) & (hu <= high)
    return paint_mask(label_map, box[0], np.asarray(mask), value, rules, image)
