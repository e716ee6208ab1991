"""Name sets: the names a segmentation's labels are shown and written under (the file's own, or a model's).

A label map without names (or a TotalSegmentator result) can be read by TotalSegmentator v2's
class map: each value then takes that model's label whole (name, group, codes, colour) from the
catalogue. ``medseg edit --totalsegmentator-names`` and the app's Labels ▸ Name set ask here.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from medseg.core.labels import Label
from medseg.edit.label_map import NAME_SETS, build_label_table

FROM_FILE, TOTALSEGMENTATOR = NAME_SETS[0], NAME_SETS[1]

# The catalogue entry whose structures a name set names (its groups, codes and colours come with them).
NAME_SET_MODELS = {NAME_SETS[1]: "totalsegmentator/total"}

# Publishers whose structures a SEG names as its algorithm (Segment Algorithm Name), and their catalogue entry.
ALGORITHM_MODELS = {"TotalSegmentator": "totalsegmentator/total"}


def described_labels(name_set: str) -> dict[int, Label] | None:
    """The model's own labels for a name set (from the catalogue), or None for the file's own names."""
    model_id = NAME_SET_MODELS.get(name_set)
    if model_id is None:
        return None
    from medseg.catalogue import load_catalogue

    return load_catalogue().get(model_id).labels()


def with_model_groups(table: dict[int, Label]) -> dict[int, Label]:
    """Groups for labels a SEG says a catalogued model made (TotalSegmentator's own SEGs and medseg's of its
    results): each such label without a group takes its structure's group from the catalogue, by name."""
    wanted = {e.provenance.algorithm_name for e in table.values() if not e.group} & set(ALGORITHM_MODELS)
    if not wanted:
        return table
    from medseg.catalogue import load_catalogue

    groups = {model: {s.name: s.group for s in load_catalogue().get(ALGORITHM_MODELS[model]).structures}
              for model in wanted}
    return {v: replace(e, group=groups[e.provenance.algorithm_name].get(e.name, ""))
            if not e.group and e.provenance.algorithm_name in groups else e for v, e in table.items()}


def opened_label_table(opened: Any, name_set: str = FROM_FILE) -> dict[int, Label]:
    """The labels of an opened segmentation (medseg.io's LabelFileResult) under ``name_set``: the file's own,
    or, where the file's names allow it, the name set's model's; groups from the model that made them."""
    table = opened.labels
    if opened.name_set_applies and name_set != FROM_FILE:
        table = build_label_table(table, opened.label_map.meta.labels, name_set, described_labels(name_set))
    return with_model_groups(table)


def opened_label_map(opened: Any, name_set: str = FROM_FILE) -> Any:
    """An opened segmentation as an editable LabelMap (medseg.edit.label_map) under ``name_set`` (the values
    present named by the set's model, where the file's names allow it)."""
    from medseg.edit.label_map import LabelMap

    renamed = name_set != FROM_FILE and opened.name_set_applies
    return LabelMap.from_volume(opened.label_map, None if renamed else opened.labels,
                                name_set if renamed else FROM_FILE, described_labels(name_set) if renamed else None)


__all__ = ["NAME_SETS", "FROM_FILE", "TOTALSEGMENTATOR", "NAME_SET_MODELS", "ALGORITHM_MODELS", "described_labels",
           "with_model_groups", "opened_label_table", "opened_label_map"]
