"""Who has a study open for editing, and who writes an autosave journal: one process each.

Two locks, both :class:`medseg.io.owner_lock.OwnerLock` (the OS's lock, released when the holder dies, with
the holder's pid, host and start time written inside for the message):

- **The study's** (``<sessions>/locks/<digest of the study's path>.lock``): a window holds it while the study
  is open for editing (:func:`claim_study`). A second window (a second double-click on the icon, the same
  study on a second screen) is told which process has it (:class:`StudyOpenElsewhere`) and opens it as a copy
  (whose journal is its own, apart from the first window's) or not at all. A lock whose holder died (kill -9,
  a power cut) is *stale*: it is taken over only when the caller says the user agreed (``take_stale``).
- **The journal's** (``<session folder>/owner.lock``): the process writing a journal holds it from
  :meth:`Journal.start <medseg.edit.journal.Journal.start>` to its close (:func:`hold_session`). A session
  whose lock is held is alive, not crashed: another window never offers it for recovery nor discards it
  (:func:`session_owner`), and a window about to offer one takes it first (:func:`claim_session`), so two
  windows started after a crash never both recover (and then both journal) the same edits.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from medseg.io.owner_lock import LockHeld, Owner, OwnerLock, state

LOCKS_FOLDER = "locks"
SESSION_LOCK = "owner.lock"


class StudyOpenElsewhere(LockHeld):
    """The study is open in another medseg process (``stale``: in one that ended without closing it)."""

    def __init__(self, message: str, owner: Owner | None, path: str | Path | None = None, hint: str | None = None,
                 stale: bool = False):
        self.stale = stale
        super().__init__(message, owner, path=path, hint=hint)


def study_key(source: str | os.PathLike) -> str:
    """One key per study, however its path was written (relative, with ``..``, a symlinked folder)."""
    text = os.path.normcase(os.path.realpath(os.path.expanduser(os.fspath(source))))
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()[:32]


def study_lock_path(root: Path, source: str | os.PathLike) -> Path:
    return Path(root) / LOCKS_FOLDER / f"{study_key(source)}.lock"


def study_state(root: Path, source: str | os.PathLike) -> tuple[str, Owner | None]:
    """("free" | "held" | "stale", the holder's record) of ``source``'s study lock, without taking it."""
    return state(study_lock_path(root, source))


def claim_study(root: Path, source: str | os.PathLike, take_stale: bool = False) -> OwnerLock:
    """Hold ``source``'s study lock, or raise :class:`StudyOpenElsewhere` naming the process that has it
    (also for a stale lock unless ``take_stale``: the user agreed to take over from a process that died)."""
    path = study_lock_path(root, source)
    name = Path(os.fspath(source)).name or os.fspath(source)
    found, owner = state(path)
    if found == "stale" and not take_stale:
        raise StudyOpenElsewhere(
            f"{name} was open for editing in {owner.describe() if owner else 'another medseg'}, which ended "
            "without closing it", owner, path=source, stale=True,
            hint="take it over (edits it autosaved are offered for recovery when medseg starts)")
    try:
        return OwnerLock.acquire(path, "editing")
    except LockHeld as held:
        raise StudyOpenElsewhere(
            f"{name} is open for editing in another medseg window: "
            f"{held.owner.describe() if held.owner else 'a process that is starting'}", held.owner, path=source,
            hint="open it as a copy (autosaved apart, saved under its own name), or close it there first") from None


def hold_session(folder: Path) -> OwnerLock:
    """The journal's writer holds its session folder's lock (a new folder: nobody else can have it)."""
    return OwnerLock.acquire(Path(folder) / SESSION_LOCK, "autosave journal")


def session_owner(folder: Path) -> Owner | None:
    """The live process writing the journal in ``folder`` (None: nobody; crashed or closed)."""
    found, owner = state(Path(folder) / SESSION_LOCK)
    if found != "held":
        return None
    return owner or Owner(0, "?", 0.0)


def claim_session(folder: Path) -> OwnerLock | None:
    """Take a crashed session's lock before offering, recovering or discarding it; None when a live
    process has it (another window's journal, or one offering it now), or the session is gone."""
    if not Path(folder).is_dir():  # discarded meanwhile: the lock must not make its folder again
        return None
    try:
        return OwnerLock.acquire(Path(folder) / SESSION_LOCK, "recovering")
    except LockHeld:
        return None
