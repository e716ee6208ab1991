"""Default label colours and names for overlays (from resources/label_colors.json)."""

from __future__ import annotations


import numpy as np

from medseg.edit.document import LabelEntry
from medseg.io.label_colors import color_for, totalsegmentator_name

NAME_SETS = ("From file", "TotalSegmentator v2 (total)")


def build_label_table(values: list[int], names: dict[int, str], name_set: str = "From file") -> dict[int, LabelEntry]:
    """One entry per label value present (0 excluded), coloured from the default table."""
    table = {}
    for value in sorted(v for v in values if v != 0):
        name = names.get(value)
        if name_set == NAME_SETS[1]:
            name = totalsegmentator_name(value) or name
        table[value] = LabelEntry(value, name or f"label {value}", color_for(value, name), True)
    return table


def color_arrays(table: dict[int, LabelEntry]) -> tuple[np.ndarray, np.ndarray]:
    """(256, 3) colours and (256,) visibility for the renderer."""
    colors = np.zeros((256, 3), dtype=np.uint8)
    visible = np.zeros(256, dtype=bool)
    for value, entry in table.items():
        colors[value] = entry.color
        visible[value] = entry.visible
    return colors, visible
