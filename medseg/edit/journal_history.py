"""The undo history of a crashed session, rebuilt from its autosave journal (issue 52: recovered edits can be
undone).

The journal holds every delta the document wrote and, after each step, a step record saying what the step
was (:data:`~medseg.edit.journal.PUSH` a new step with its description and table changes, UNDO, REDO, or
SAVED) and how far the saved state was. Replaying them on an empty :class:`~medseg.edit.history.History`
gives the history the user had: a new step is the deltas written since the last step record (a brush
stroke's pieces merged into one, as :meth:`SegmentationDocument.end_stroke` made it), an undo moves the
newest step to the redo list, a redo moves it back. The history holds what the journal holds: only the
steps since the journal's base (the label map as opened, or as recovered before: undoing past it is not
possible), and none when the journal was written before step records said what a step was.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from medseg.core.labels import Label
from medseg.edit.delta import Delta
from medseg.edit.history import History
from medseg.edit.journal import PUSH, REDO, UNDO, StepRecord, _generation_of, journal_file, read_entries
from medseg.io.json_files import read_json_object

# a step the journal has no record for: deltas written after the last step record (a stroke the crash cut)
UNFINISHED = "edit cut short by the crash"


@dataclass
class RecoveredHistory:
    history: History
    saved_position: int | None  # the history position the label map was saved at (None: not saved, or unknown)


def _entry(row: object) -> Label | None:
    return Label.from_dict(row) if isinstance(row, dict) else None


def _step(pending: list[Delta], shape_zyx: tuple[int, int, int]) -> Delta:
    merged = pending[0]
    for later in pending[1:]:
        merged = Delta.merge(merged, later, shape_zyx, np.promote_types(merged.new.dtype, later.new.dtype))
    return merged


def recover_history(folder: Path) -> RecoveredHistory | None:
    """The undo history of the crashed session in ``folder``, ending at the state :func:`recover` gives;
    None when its journal does not say what its steps were (written before step records did)."""
    info = read_json_object(folder / "session.json", "autosaved session record")
    shape = tuple(int(n) for n in info["shape_zyx"])
    entries = read_entries(journal_file(folder, _generation_of(folder)))
    marks = [entry for entry in entries if isinstance(entry, StepRecord)]
    if any(not mark.info.get("kind") for mark in marks):
        return None
    history = History()
    pending: list[Delta] = []
    saved: int | None = history.position  # the journal's base is the label map as opened (or segmented)
    for entry in entries:
        if isinstance(entry, Delta):
            pending.append(entry)
            continue
        kind = entry.info["kind"]
        if kind == PUSH and pending:
            labels = {int(value): (_entry(pair[0]), _entry(pair[1]))
                      for value, pair in (entry.info.get("labels") or {}).items()}
            history.push(str(entry.info.get("description") or "edit"), _step(pending, shape), labels)
        elif kind == UNDO:
            if history.pop_undo() is None:  # a step from before the journal's base: the history starts here
                history.clear()
        elif kind == REDO:
            if history.pop_redo() is None:
                history.clear()
        if kind in (PUSH, UNDO, REDO):  # a SAVED record ends no step
            pending = []
        unsaved = entry.info.get("unsaved")
        # trusted only while the rebuilt history is the one the user had (its depth as the record counts it):
        # a history that reaches back before this journal's base cannot say where it was saved
        same = entry.steps == history.depth
        saved = history.position_back(unsaved) if isinstance(unsaved, int) and same else None
    if pending:  # written, not yet a step: one more step, so that undo takes it back too
        history.push(UNFINISHED, _step(pending, shape))
    return RecoveredHistory(history, saved)


__all__ = ["RecoveredHistory", "UNFINISHED", "recover_history"]
