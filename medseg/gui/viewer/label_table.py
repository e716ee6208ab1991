"""The overlay's colour arrays from the label table (the table itself lives in medseg.edit.label_map)."""

from __future__ import annotations

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Label
from medseg.edit.label_map import NAME_SETS, build_label_table

__all__ = ["NAME_SETS", "build_label_table", "color_arrays", "described_labels", "with_model_groups"]

# The catalogue entry whose structures a name set names (its groups, codes and colours come with them).
NAME_SET_MODELS = {NAME_SETS[1]: "totalsegmentator/total"}


# Publishers whose structures a SEG names as its algorithm (Segment Algorithm Name), and their catalogue entry.
ALGORITHM_MODELS = {"TotalSegmentator": "totalsegmentator/total"}


def with_model_groups(table: dict[int, Label]) -> dict[int, Label]:
    """Groups for labels a SEG says a catalogued model made (TotalSegmentator's own SEGs and medseg's of its
    results): each such label without a group takes its structure's group from the catalogue, by name."""
    from dataclasses import replace

    wanted = {e.provenance.algorithm_name for e in table.values() if not e.group} & set(ALGORITHM_MODELS)
    if not wanted:
        return table
    from medseg.catalogue import load_catalogue

    groups = {model: {s.name: s.group for s in load_catalogue().get(ALGORITHM_MODELS[model]).structures}
              for model in wanted}
    return {v: replace(e, group=groups[e.provenance.algorithm_name].get(e.name, ""))
            if not e.group and e.provenance.algorithm_name in groups else e for v, e in table.items()}


def described_labels(name_set: str) -> dict[int, Label] | None:
    """The model's own labels for a name set (from the catalogue), or None for the file's own names."""
    model_id = NAME_SET_MODELS.get(name_set)
    if model_id is None:
        return None
    from medseg.catalogue import load_catalogue

    return load_catalogue().get(model_id).labels()

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
            colors[value] = table[value].color
            visible[value] = table[value].visible
        return colors, visible, None
    slots = np.zeros(MAX_LABEL_VALUE + 1, dtype=np.uint8)
    for rank, value in enumerate(values):
        slot = 1 + rank % (ROWS - 1)
        slots[value] = slot
        if rank < ROWS - 1:
            colors[slot] = table[value].color
            visible[slot] = table[value].visible
    return colors, visible, slots
