"""The label table's edits: add, rename, recolour, show, hide, lock, delete and merge labels.

A part of :class:`~medseg.edit.document.SegmentationDocument` (which inherits it): the document stays the one
writer of its state, and this is the part of it that writes the table. It uses the document's ``label_map``,
``journal``, ``labels_changed``, :meth:`new_label_map` and :meth:`apply` (a delete or merge that moves
voxels is one undoable step).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Label
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import NAME_SETS, LabelMap, build_label_table
from medseg.errors import MedsegError


class LabelTableEdits:
    def _table(self) -> LabelMap:
        if self.label_map is None:
            raise MedsegError("there is no segmentation yet; draw or segment first")
        return self.label_map

    def _table_changed(self) -> None:
        if self.journal is not None and self.label_map is not None:
            self.journal.update_table(self.label_map)
        self.labels_changed.emit()

    def add_label(self, name: str | None = None, color: tuple[int, int, int] | None = None,
                  value: int | None = None) -> Label:
        label_map = self.new_label_map()
        value = label_map.next_free_value() if value is None else int(value)
        if value in label_map.labels:
            raise MedsegError(f"label {value} already exists ({label_map.labels[value].name})")
        if not 1 <= value <= MAX_LABEL_VALUE:
            raise MedsegError(f"label values run from 1 to {MAX_LABEL_VALUE}, not {value}")
        entry = Label(value, name or "", tuple(color) if color else label_map.new_label_color(value, name))  # type: ignore[arg-type]
        self._put_entries({value: entry})
        return entry

    def _change_entry(self, value: int, **changes: Any) -> None:
        self._put_entries({value: replace(self._table().entry(value), **changes)})

    def set_label_visible(self, value: int, visible: bool) -> None:
        self._change_entry(value, visible=bool(visible))

    def set_label_opacity(self, value: int, opacity: float) -> None:
        """How opaque the label's surface is in the 3D view (0…1)."""
        self._change_entry(value, opacity=min(1.0, max(0.0, float(opacity))))

    def set_all_labels_visible(self, visible: bool) -> None:
        if self.label_map is not None:
            self._put_entries({v: replace(e, visible=bool(visible)) for v, e in self.labels.items()})

    def set_labels_visible(self, values: Any, visible: bool) -> None:
        """Show or hide several labels (a group) in one change."""
        self._change_entries(values, visible=bool(visible))

    def set_labels_locked(self, values: Any, locked: bool) -> None:
        """Lock or unlock several labels (a group) in one change: no tool changes a locked label's voxels."""
        self._change_entries(values, locked=bool(locked))

    def show_only(self, values: Any) -> None:
        """Solo: these labels shown, every other one hidden (one change)."""
        shown = {int(v) for v in values}
        if self.label_map is not None:
            self._put_entries({v: replace(e, visible=v in shown) for v, e in self.labels.items()
                               if e.visible != (v in shown)})

    def _change_entries(self, values: Any, **changes: Any) -> None:
        label_map = self._table()
        entries = {int(v): label_map.entry(int(v)) for v in values}
        changed = {v: replace(e, **changes) for v, e in entries.items()}
        changed = {v: e for v, e in changed.items() if e != entries[v]}
        if changed:
            self._put_entries(changed)

    def set_label_color(self, value: int, color: tuple[int, int, int]) -> None:
        self._change_entry(value, color=tuple(int(c) for c in color))

    def rename_label(self, value: int, name: str) -> None:
        name = name.strip()
        if not name:
            raise MedsegError("a label needs a name")
        self._change_entry(value, name=name)

    def set_label_locked(self, value: int, locked: bool) -> None:
        self._change_entry(value, locked=bool(locked))

    def lock_labels(self, values: Any) -> None:
        """Lock several labels at once (e.g. the user's, before a Segment)."""
        label_map = self._table()
        self._put_entries({int(v): replace(label_map.entry(int(v)), locked=True) for v in values})

    def rename_labels_from(self, name_set: str, described: Mapping[int, Label] | None = None) -> None:
        """Re-name every entry from a name set (file names or TotalSegmentator's); visibility, locks and
        provenance stay. ``described``: the model's own labels for the set (their names, groups, codes and
        colours are taken); without it (and back to the file's names) only the names change."""
        label_map = self._table()
        fresh = build_label_table(list(label_map.labels), label_map.meta.labels, name_set, described)
        kept = ("visible", "locked", "provenance", "opacity")
        self._put_entries({v: replace(e, **{k: getattr(label_map.labels[v], k) for k in kept})
                           if described and v in described and name_set != NAME_SETS[0]
                           else replace(label_map.labels[v], name=e.name) for v, e in fresh.items()})

    def delete_label(self, value: int) -> bool:
        """Its voxels become background and its entry goes (one undoable step when it has voxels)."""
        label_map = self._table()
        entry = label_map.entry(value)
        if entry.locked:
            raise MedsegError(f"label {value} ({entry.name}) is locked; unlock it to delete it")
        changed = self._replace_value(value, 0, f"delete {entry.name}", {value: None}, f"Delete {entry.name}")
        if not changed:
            self._put_entries({value: None})
        return changed

    def merge_labels(self, source: int, target: int) -> bool:
        """``source``'s voxels join ``target`` (one undoable step when it has voxels); ``source``'s entry goes."""
        label_map = self._table()
        src, dst = label_map.entry(source), label_map.entry(target)
        if src.locked:
            raise MedsegError(f"label {source} ({src.name}) is locked; unlock it to merge it")
        changed = self._replace_value(source, target, f"merge {src.name} into {dst.name}", {source: None},
                                      f"Merge {src.name} into {dst.name}")
        if not changed:
            self._put_entries({source: None})
        return changed

    def _replace_value(self, old_value: int, new_value: int, description: str,
                       labels: Mapping[int, Label | None], announce: str = "") -> bool:
        from medseg.edit.tools.rules import label_box

        label_map = self._table()
        box = label_box(label_map, old_value)
        if box is None:
            return False
        block = label_map.array[box_slices(box)]
        delta = Delta.from_blocks(box[0], block, np.where(block == old_value, new_value, block).astype(block.dtype))
        return self.apply(delta, description, labels, announce=announce)


    def _put_entries(self, entries: Mapping[int, Label | None]) -> None:
        label_map = self.label_map
        assert label_map is not None
        for value, entry in entries.items():
            if entry is None:
                label_map.labels.pop(value, None)
            else:
                label_map.labels[value] = entry
        label_map.labels = dict(sorted(label_map.labels.items()))
        self._changed()
        self._table_changed()

    def labels_not_made_by(self, model_name: str, model_version: str = "") -> list[Label]:
        """Unlocked labels with voxels that are not this model's untouched output (loaded, drawn or edited):
        what a Segment could destroy, so the user is asked first (a locked label is never overwritten)."""
        label_map = self.label_map
        if label_map is None:
            return []
        return [entry for value, entry in label_map.labels.items() if label_map.voxel_count(value)
                and not entry.locked and not entry.provenance.made_by(model_name, model_version)]
