"""The overlay's colour arrays from the label table (the table itself lives in medseg.edit.label_map)."""

from __future__ import annotations

import numpy as np

from medseg.core.labels import Label
from medseg.edit.label_map import NAME_SETS, build_label_table

__all__ = ["NAME_SETS", "build_label_table", "color_arrays"]


def color_arrays(table: dict[int, Label]) -> tuple[np.ndarray, np.ndarray]:
    """(256, 3) colours and (256,) visibility for the renderer."""
    colors = np.zeros((256, 3), dtype=np.uint8)
    visible = np.zeros(256, dtype=bool)
    for value, entry in table.items():
        if value < 256:
            colors[value] = entry.color
            visible[value] = entry.visible
    return colors, visible
