"""Autosave: every edit of the document written to a journal, so a crash loses nothing.

A part of :class:`~medseg.edit.document.SegmentationDocument` (which inherits it). Off unless enabled (tests,
the CLI, notebooks run without it); the GUI enables it (medseg.gui.editing.edit_session). The journal's base is
the label map at the last new start (opened, segmented, new); the document calls :meth:`_journal` with each
delta it writes and :meth:`_journal_step` where an undo step ends or the label map was saved.

A window opening a study for editing first claims it (:meth:`claim_study`, medseg.edit.study_lock): a second
window on the same study is told which process has it and goes on only as a copy, journalled on its own.
"""

from __future__ import annotations

from pathlib import Path

from medseg.edit import study_lock
from medseg.edit.delta import Delta
from medseg.edit.journal import PUSH, Journal
from medseg.io.owner_lock import OwnerLock


class AutosaveJournal:
    _study_lock: OwnerLock | None = None  # the open study's (medseg.edit.study_lock), held while it is open here
    study_copy_of: str = ""  # editing a copy: who has the study itself ("process 1234 on ws-7 (...)")

    def claim_study(self, source: str, *, copy: bool = False, take_stale: bool = False) -> None:
        """Before opening ``source`` for editing: hold its study lock, so that another window is told.

        Raises :class:`~medseg.edit.study_lock.StudyOpenElsewhere` naming the process that has it open (or had
        it, and died: ``stale``; ``take_stale`` when the user agreed to take it over). ``copy``: edit it
        anyway, as a copy whose journal is apart from the other window's; no lock is held. Without autosave
        there is no journal to protect and nothing is claimed.
        """
        self.release_study()
        if self._autosave_root is None:
            return
        if copy:
            _state, owner = study_lock.study_state(self._autosave_root, source)
            self.study_copy_of = owner.describe() if owner is not None else "another medseg window"
            return
        self._study_lock = study_lock.claim_study(self._autosave_root, source, take_stale=take_stale)

    def release_study(self) -> None:
        """The study is closed here (another opened, the window closing): another window may have it."""
        self.study_copy_of = ""
        lock, self._study_lock = self._study_lock, None
        if lock is not None:
            lock.release()

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
        self.release_study()


    def _rebase_journal(self, description: str) -> None:
        if self.label_map is None or self._autosave_root is None:
            self.close_journal()
            return
        if self.journal is None:
            if self.study_copy_of:  # the recovery offer says which edits these were
                description = f"{description} (a copy: the study was open in {self.study_copy_of})"
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
