"""The overlay's colour arrays from the label table (the table itself lives in medseg.edit.label_map)."""

from __future__ import annotations

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Label
from medseg.edit.label_map import NAME_SETS, build_label_table
from medseg.gui.common.colors import label_rgb
from medseg.workflows.name_sets import described_labels, with_model_groups  # the name sets' one home

__all__ = ["NAME_SETS", "build_label_table", "color_arrays", "described_labels", "with_model_groups"]

ROWS = 256  # the renderer blends one row of colour per 8-bit slot


def color_arrays(table: dict[int, Label]) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """(256, 3) colours and (256,) visibility per slot, and the slot of each label value.

    Label values up to 255 are their own slot (``slots`` is None: the array is drawn as it is).
    A table with larger values (uint16 label maps, up to MAX_LABEL_VALUE) gets a (65536,) uint8
    lookup from value to slot: its labels take slots 1, 2, ... in value order; past 255 labels,
    slots are shared (two labels then show in one colour). Values not in the table get slot 0
    and are not drawn, as a value without a row is below 256.
    """
    colors = np.zeros((ROWS, 3), dtype=np.uint8)
    visible = np.zeros(ROWS, dtype=bool)
    values = sorted(v for v in table if 0 < v <= MAX_LABEL_VALUE)
    if not values or values[-1] < ROWS:
        for value in values:
            colors[value] = label_rgb(table[value])
            visible[value] = table[value].visible
        return colors, visible, None
    slots = np.zeros(MAX_LABEL_VALUE + 1, dtype=np.uint8)
    for rank, value in enumerate(values):
        slot = 1 + rank % (ROWS - 1)
        slots[value] = slot
        if rank < ROWS - 1:
            colors[slot] = label_rgb(table[value])
            visible[slot] = table[value].visible
    return colors, visible, slots
