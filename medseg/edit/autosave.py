"""Autosave: every edit of the document written to a journal, so a crash loses nothing.

A part of :class:`~medseg.edit.document.SegmentationDocument` (which inherits it). Off unless enabled (tests,
the CLI, notebooks run without it); the GUI enables it (medseg.gui.editing.edit_session). The journal's base is
the label map at the last new start (opened, segmented, new); the document calls :meth:`_journal` with each
delta it writes and :meth:`_journal_step` where an undo step ends or the label map was saved.
"""

from __future__ import annotations

from pathlib import Path

from medseg.edit.delta import Delta
from medseg.edit.journal import PUSH, Journal


class AutosaveJournal:
    @property
    def autosave_root(self) -> Path | None:
        """Where the journal of this session is written (None: no autosave)."""
        return self._autosave_root

    def enable_autosave(self, root: Path | str) -> None:
        """Journal every edit under ``root`` from now on (the label map open now becomes its base)."""
        root = Path(root)
        if self.journal is not None and root != self._autosave_root:
            self.close_journal(discard=True)
        self._autosave_root = root
        if self.journal is None:
            self._rebase_journal("autosave enabled")

    def disable_autosave(self) -> None:
        """Stop journalling; the journal written so far is discarded."""
        self._autosave_root = None
        self.close_journal(discard=True)


    def _rebase_journal(self, description: str) -> None:
        if self.label_map is None or self._autosave_root is None:
            self.close_journal()
            return
        if self.journal is None:
            self.journal = Journal.start(self.label_map, self.image_source, self._autosave_root, description)
        else:
            self.journal.rebase(self.label_map, self.image_source, description)

    def close_journal(self, discard: bool = True) -> None:
        if self.journal is not None:
            self.journal.close(discard=discard)
            self.journal = None

    def _journal(self, delta: Delta) -> None:
        if self.journal is not None:
            self.journal.append(delta)

    def _journal_step(self, kind: str) -> None:
        """A step the user can undo ended (``kind``: PUSH, UNDO or REDO), or the label map was saved (SAVED): the
        journal counts edits as the undo counter does, how far the saved state is, and what a new step was (its
        description and table changes), so a recovery brings the undo history back."""
        if self.journal is not None:
            offset = self.history.offset_from(self._saved_position)
            self.journal.mark_step(self.history.depth, kind, offset, self.history.last_step() if kind == PUSH else None)
