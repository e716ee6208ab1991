"""Default label colours and names for overlays (from resources/label_colors.json)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources

import numpy as np

from medseg.edit.document import LabelEntry

NAME_SETS = ("From file", "TotalSegmentator v2 (total)")


@lru_cache(maxsize=1)
def _table() -> dict:
    return json.loads((resources.files("medseg.resources") / "label_colors.json").read_text())


def default_color(value: int) -> tuple[int, int, int]:
    r, g, b = _table()["colors"].get(str(value), (200, 200, 200))
    return int(r), int(g), int(b)


def totalsegmentator_name(value: int) -> str | None:
    return _table()["totalsegmentator_v2_total_names"].get(str(value))


def build_label_table(values: list[int], names: dict[int, str], name_set: str = "From file") -> dict[int, LabelEntry]:
    """One entry per label value present (0 excluded), coloured from the default table."""
    table = {}
    for value in sorted(v for v in values if v != 0):
        name = names.get(value)
        if name_set == NAME_SETS[1]:
            name = totalsegmentator_name(value) or name
        table[value] = LabelEntry(value, name or f"label {value}", default_color(value), True)
    return table


def color_arrays(table: dict[int, LabelEntry]) -> tuple[np.ndarray, np.ndarray]:
    """(256, 3) colours and (256,) visibility for the renderer."""
    colors = np.zeros((256, 3), dtype=np.uint8)
    visible = np.zeros(256, dtype=bool)
    for value, entry in table.items():
        colors[value] = entry.color
        visible[value] = entry.visible
    return colors, visible
