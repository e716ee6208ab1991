"""The segmentation document: the image, the label map and its table, and their history, without any Qt.

Headless and shared: the GUI, ``medseg edit`` and batch recipes all change a segmentation
through it, so a batch result is what the same clicks give and every writer sees the same
provenance. It holds the image volume, an optional label map on the same grid with its label
table, the undo history, the autosave journal (when enabled) and whether the label map is
saved, which is computed from the history position (undoing back to the saved state is
saved). How it is looked at (window/level, crosshair, overlay, comparison layer, active label
and tool) is the GUI's :class:`~medseg.gui.common.view_state.ViewState`.

Like napari's layer models, this is plain Python with change notifications: widgets
subscribe to the :class:`Event` attributes and redraw; tests drive it without a window.
The document is the only writer of its state: callers use its methods and never assign its
attributes or emit its events. Edits arrive as sparse deltas (:meth:`SegmentationDocument.apply`),
which go to the undo history and the autosave journal, keep the per-label voxel counts
current, keep each label's provenance, and are announced with the changed box and label
values (``label_map_edited(LabelEdit)``) so views redraw only what changed. What a delta should be is
the operations' business (:mod:`medseg.edit.operations`, merging a Segment result included): the
document only applies it.

Only the thread that owns the document (the GUI thread) writes it. Another thread may compute a change
from it (a Segment result's merge, in the worker that ran the model) if it reads :attr:`revision` first:
every write bumps the revision once it is done, so :meth:`apply_change` writes a change only while the
document is still at the revision it was computed against; a read that overlapped a write is never applied
(the caller computes the change again, on the owning thread).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit.autosave import AutosaveJournal
from medseg.edit.delta import Box, Delta, box_slices
from medseg.edit.describe import describe_change
from medseg.edit.events import Event
from medseg.edit.history import DEFAULT_BUDGET_BYTES, History
from medseg.edit.journal import PUSH, REDO, SAVED, UNDO, Journal
from medseg.edit.label_map import LabelMap
from medseg.edit.label_table_edits import LabelTableEdits
from medseg.edit.readout import VoxelReadout
from medseg.errors import GeometryError, MedsegError


class StaleChange(MedsegError):
    """A change computed against an earlier revision of the document (it changed meanwhile): compute it again."""


@dataclass(frozen=True)
class LabelEdit:
    """What an edit changed: the (z, y, x) box and every label value it touched."""

    box: Box
    values: frozenset[int]


def check_label_values(label_map: Volume) -> None:
    """A label map's values must be label values (0 … MAX_LABEL_VALUE)."""
    if label_map.array.size and int(label_map.array.min()) < 0:
        raise GeometryError("label maps cannot hold negative values")
    if label_map.array.size and int(label_map.array.max()) > MAX_LABEL_VALUE:
        raise GeometryError(f"label values run up to {MAX_LABEL_VALUE}, not {int(label_map.array.max())}")


class SegmentationDocument(LabelTableEdits, AutosaveJournal, VoxelReadout):
    """Image, label map, label table, undo history, autosave journal, provenance and saved state.

    Here: the state, its events, the image, the label map and the edits (apply, strokes, undo, redo). The
    label table's edits are :class:`~medseg.edit.label_table_edits.LabelTableEdits`, the journal's wiring
    :class:`~medseg.edit.autosave.AutosaveJournal`, reading at a voxel :class:`~medseg.edit.readout.VoxelReadout`.
    """

    def __init__(self) -> None:
        self.volume: Volume | None = None
        self.label_map: LabelMap | None = None
        self.is_synthetic = False  # the demo study: the UI must say so
        self.image_source = ""  # what the image was opened from (for the journal's recovery offer)
        self.image_generation = 0  # bumped on every new image: a job's result can tell it is stale
        self.history = History()
        self.journal: Journal | None = None
        self._autosave_root: Path | None = None  # None: no autosave (tests, the CLI, notebooks)
        self._saved_position = self.history.position  # the history position the label map was saved at
        self._stroke: Delta | None = None
        self._revision = 0  # bumped after every change of the image, the label map or its table

        self.volume_changed = Event()  # a new image (geometry may differ), or none
        self.pixels_changed = Event()  # same image, new voxels (progressive loading)
        self.label_map_changed = Event()  # a whole new label map (or none)
        self.label_map_edited = Event()  # (LabelEdit): voxels in a box changed
        self.labels_changed = Event()  # names, colours, visibility, locks, entries added/removed
        self.history_changed = Event()  # undo depth / memory / saved state
        self.notice = Event()  # (text, level "info"/"warning"): what an operation did, for the user to read

    @property
    def revision(self) -> int:
        """Changes whenever the image, the label map's voxels or its table change (a write, an undo, a new
        label map, a lock): equal revisions mean the same state. Read it before computing a change from the
        document in another thread (see the module's text and :meth:`apply_change`)."""
        return self._revision

    def _changed(self) -> None:
        self._revision += 1

    @property
    def labels(self) -> dict[int, Label]:
        """The label table (read it; change it through the document's methods)."""
        return self.label_map.labels if self.label_map is not None else {}

    def new_label(self, value: int) -> Label:
        """The entry label ``value`` gets at its first voxel (its colour apart from the table's), for drawing
        its seeds and preview before it exists."""
        if self.label_map is not None:
            return self.labels.get(value) or Label(value, "", self.label_map.new_label_color(value))
        return Label(value)

    @property
    def unsaved(self) -> bool:
        """Edits since the label map was opened, segmented or saved: undoing back to that state is saved."""
        return self._stroke is not None or self.history.position != self._saved_position

    @property
    def unsaved_edits(self) -> int:
        """How many edits the label map is away from its saved state (undone ones count too: undoing a saved
        edit is a change); the whole undo history when the saved state is no longer held (e.g. recovered)."""
        if not self.unsaved:
            return 0
        offset = self.history.offset_from(self._saved_position)
        steps = abs(offset) if offset is not None else self.history.depth
        return steps + (self._stroke is not None)

    def announce(self, text: str, level: str = "info") -> None:
        """Tell the user what an operation did or why it did nothing (``level``: "info" or "warning")."""
        self.notice.emit(text, level)

    # --- image --------------------------------------------------------------------------
    def set_volume(self, volume: Volume, *, synthetic: bool = False, source: str | None = None) -> None:
        """Open a new image; drops a label map that no longer fits it."""
        self.volume = volume
        self.is_synthetic = synthetic
        self.image_generation += 1
        if source is not None:
            self.image_source = source
        if self.label_map is not None and not self.label_map.same_grid(volume):
            self._drop_label_map()
        self._changed()
        self.volume_changed.emit()

    def close_image(self) -> None:
        """No image and no label map (e.g. a failed first load put back)."""
        had_labels = self.label_map is not None
        self.volume = None
        self.is_synthetic = False
        self.image_source = ""
        self.image_generation += 1
        if had_labels:
            self._drop_label_map()
        self._changed()
        self.volume_changed.emit()

    def notify_pixels_changed(self) -> None:
        self.pixels_changed.emit()

    # --- label map ----------------------------------------------------------------------
    def set_label_map(self, label_map: Volume, label_table: Mapping[int, Label] | None = None,
                      description: str = "") -> LabelMap:
        """Overlay ``label_map`` (no copy); it must already be on the image grid (see fit_to_grid).

        A new starting point: the undo history is cleared and the journal rebased.
        """
        if self.volume is None:
            raise GeometryError("open an image before opening a label map onto it")
        if not label_map.same_grid(self.volume):
            raise GeometryError(
                f"the label map's grid {label_map.size_xyz} does not match the image's {self.volume.size_xyz}"
            )
        check_label_values(label_map)
        if label_table is None and isinstance(label_map, LabelMap):
            label_table = label_map.labels
        wrapped = LabelMap.from_volume(label_map, label_table)
        self._replace_label_map(wrapped, description or "label map")
        return wrapped

    def new_label_map(self) -> LabelMap:
        """An empty label map on the image to draw into (keeps the current one if there is one)."""
        if self.volume is None:
            raise GeometryError("open an image before drawing on it")
        if self.label_map is None:
            self._replace_label_map(LabelMap.empty_like(self.volume), "new segmentation")
        return self.label_map  # type: ignore[return-value]

    def _replace_label_map(self, label_map: LabelMap | None, description: str) -> None:
        self.label_map = label_map
        self._changed()
        self.history.clear()
        self._saved_position = self.history.position
        self._rebase_journal(description)
        self.label_map_changed.emit()
        self.labels_changed.emit()
        self.history_changed.emit()

    def _drop_label_map(self) -> None:
        self._replace_label_map(None, "")

    def clear_label_map(self) -> None:
        if self.label_map is not None:
            self._drop_label_map()

    @property
    def history_position(self) -> int:
        """Where the undo history stands (see :attr:`History.position`); pass it to :meth:`mark_saved`."""
        return self.history.position

    def mark_saved(self, position: int | None = None) -> None:
        """The label map as it was at ``position`` (default: now) was written out. Undoing or redoing
        back to that position is saved again; any other position is unsaved."""
        self._saved_position = self.history.position if position is None else int(position)
        self._journal_step(SAVED)  # a crash after this counts only the edits since
        self.history_changed.emit()

    def mark_recovered(self, history: History | None = None, saved_position: int | None = None) -> None:
        """The label map came back from the autosave journal, with the undo ``history`` rebuilt from it (see
        :mod:`medseg.edit.journal_history`; None: the recovered state starts a new history), saved at
        ``saved_position`` of it (None: the user has not saved it)."""
        if history is not None:
            history.set_budget(self.history.budget_bytes)
            self.history = history
        self._saved_position = -1 if saved_position is None else saved_position
        self.history_changed.emit()

    # --- edits: the only way voxels change ------------------------------------------------
    def apply(self, delta: Delta | None, description: str, labels: Mapping[int, Label | None] | None = None,
              announce: str = "") -> bool:
        """Write ``delta`` to the label map as one undoable, journaled step. False if nothing changed.

        ``labels``: label table entries this step sets (None removes one); undo puts them back.
        A model's label whose voxels the step changes, unless ``labels`` sets it, becomes
        SEMIAUTOMATIC: provenance is the document's to keep, so every writer gets it right.
        ``announce``: the operation in the user's words ("Grow 2 mm"); the document then says what it
        changed (:attr:`notice`: "Grow 2 mm: bones +23.0 ml (from body)"), or that nothing changed.
        """
        return self._apply(delta, description, labels, announce)

    def _apply(self, delta: Delta | None, description: str, labels: Mapping[int, Label | None] | None = None,
               announce: str = "", block: np.ndarray | None = None) -> bool:
        if delta is None or delta.count == 0:
            if announce:
                self.announce(f"{announce}: nothing changed.")
            return False
        label_map = self.label_map if self.label_map is not None else self.new_label_map()
        before = {int(v): label_map.labels.get(int(v)) for v in labels or {}}  # undo puts these back
        if announce:  # before the write: the names of labels it empties are still in the table
            text = describe_change(delta, self.labels, self.voxel_ml(), announce)
        self._write(delta, delta.new, block, labels)
        changes = self._change_table(delta.values(), labels or {}, before)
        self.history.push(description, delta, changes)
        self._journal(delta)
        self._journal_step(PUSH)
        self.history_changed.emit()
        if announce:
            self.announce(text)
        return True

    def apply_change(self, change: Any, description: str) -> bool:
        """Apply ``change`` (a :class:`medseg.edit.operation.Change`; not imported here: operations import the
        document) as :meth:`apply` does. One computed in another thread carries the :attr:`revision` it
        was computed against: when the document has changed since, nothing is written and :class:`StaleChange`
        is raised (compute it again here)."""
        if change.revision is None:
            return self.apply(change.delta, description, change.labels)
        if change.revision != self._revision:
            raise StaleChange(f"the document changed while {description!r} was computed")
        # the box still holds what the change was computed from: its block after the change is one copy
        return self._apply(change.delta, description, change.labels, block=change.block)

    def _change_table(self, touched: Any, explicit: Mapping[int, Label | None],
                      before: Mapping[int, Label | None] | None = None) -> dict[int, tuple[Any, Any]]:
        """Set the ``explicit`` entries (``before``: what they were before the step's voxels were written)
        and mark touched model labels as edited; (before, after) per changed value."""
        label_map = self.label_map
        assert label_map is not None
        changes: dict[int, tuple[Any, Any]] = {}
        for value, entry in explicit.items():
            changes[int(value)] = ((before or {}).get(int(value), label_map.labels.get(int(value))), entry)
        for value in touched:
            entry = label_map.labels.get(int(value))
            if value and int(value) not in changes and entry is not None and entry.edited() is not entry:
                changes[int(value)] = (entry, entry.edited())
        if changes:
            self._put_entries({value: after for value, (_, after) in changes.items()})
        return changes

    def _write(self, delta: Delta, values: np.ndarray, block: np.ndarray | None = None,
               entries: Mapping[int, Label | None] | None = None) -> None:
        """``block``: the delta's box after it, known to be written onto the state it was computed from;
        ``entries``: the step's own label entries (a new value among them is not given a placeholder)."""
        label_map = self.label_map if self.label_map is not None else self.new_label_map()
        forward = values is delta.new
        old_counts, new_counts = delta.histograms()
        removed, added = (old_counts, new_counts) if forward else (new_counts, old_counts)
        widened = label_map.widen_for(added.size - 1)
        if block is not None and forward:
            label_map.array[box_slices(delta.box)] = block  # a copy: 5x faster than the scatter at 512^2 x 300
        else:
            delta.write(label_map.array, values)
        label_map.update_counts(removed, added)
        new_values = [int(v) for v in np.flatnonzero(added) if v and int(v) not in label_map.labels]
        # A model's result brings its entries (colours picked in the worker): a placeholder's distinct colour
        # for each of 117 new values, thrown away a moment later, took 2 s of the GUI thread (issue 52).
        given = {v: entries[v] for v in new_values if entries is not None and entries.get(v) is not None}
        if given:
            label_map.labels = dict(sorted({**label_map.labels, **given}.items()))  # type: ignore[dict-item]
        for value in new_values:
            label_map.ensure_entry(value)
        self._changed()  # after the write: a change computed from a read that overlapped it is stale
        added = new_values
        if widened:
            self.label_map_changed.emit()
        else:
            self.label_map_edited.emit(LabelEdit(delta.box, delta.values()))
        if added:
            self.labels_changed.emit()

    # --- a stroke: many small writes while the mouse moves, one undo step at the end -----------
    def stroke_apply(self, delta: Delta | None) -> None:
        """Write part of a running stroke now (the user sees it); :meth:`end_stroke` makes it one step."""
        if delta is None or delta.count == 0:
            return
        self._write(delta, delta.new)
        self._journal(delta)
        label_map = self.label_map
        assert label_map is not None
        if self._stroke is None:
            self._stroke = delta
        else:
            dtype = np.promote_types(self._stroke.new.dtype, delta.new.dtype)
            self._stroke = Delta.merge(self._stroke, delta, label_map.shape_zyx, dtype)

    def end_stroke(self, description: str) -> bool:
        stroke, self._stroke = self._stroke, None
        if stroke is None or stroke.count == 0:
            return False
        self.history.push(description, stroke, self._change_table(stroke.values(), {}))
        self._journal_step(PUSH)
        self.history_changed.emit()
        return True

    def undo(self) -> bool:
        if self._stroke is not None:
            self.end_stroke("stroke")
        step = self.history.pop_undo()
        if step is None:
            return False
        self._write(step.delta, step.delta.old)
        self._journal(step.delta.inverse())
        self._journal_step(UNDO)
        if step.labels:
            self._put_entries({value: before for value, (before, _) in step.labels.items()})
        self.history_changed.emit()
        return True

    def redo(self) -> bool:
        step = self.history.pop_redo()
        if step is None:
            return False
        self._write(step.delta, step.delta.new)
        self._journal(step.delta)
        self._journal_step(REDO)
        if step.labels:
            self._put_entries({value: after for value, (_, after) in step.labels.items()})
        self.history_changed.emit()
        return True

    def set_undo_budget(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.history.set_budget(budget_bytes)
        self.history_changed.emit()
