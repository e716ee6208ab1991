"""The autosave journal: every applied delta appended to a file and fsync'd, so a crash loses nothing.

A session folder (in the user's data folder, ``sessions/<id>/``) holds:

- ``session.json`` — where the image came from, the grid, the label table and the current
  *generation* (written atomically);
- ``base-<generation>.npz`` — the label map when the session (re)started: a loaded file or a
  Segment result (written atomically; an empty map is not written, only its shape);
- ``journal-<generation>.bin`` — appended records ``MAGIC | length | crc32 | delta bytes``,
  each one fsync'd before the edit returns (a large one just after: see below). Undo appends the inverse
  delta, so replaying the
  journal from the base gives the state the user saw. A brush stroke writes a record for
  every piece painted while the mouse moves, so records are not edits: after each step the
  user can undo (a stroke, an Apply, an undo, a redo), and after a save, a step record ``STEP_MAGIC |
  length | crc32 | steps | JSON`` says how many steps the undo history holds, what the step was and how
  many steps the saved state is away: the recovery offer counts the unsaved edits with it (as the quit
  question does), and :mod:`medseg.edit.journal_history` rebuilds the undo history from it.

A new base (a label map opened, a Segment result) starts a new generation: its base and an
empty journal are written under new names first, then session.json names the generation
(the one atomic rename that switches), then the old generation's files are removed. A kill
at any point recovers either the state before the switch or the state after it, never the
old journal replayed onto the new base (tests/robustness/test_journal_switch.py kills a process at
each of these moments). Sessions written before generations (``base.npz``, ``journal.bin``) still recover.

Label table changes (a name, a colour, a lock, a group hidden) do not wait for the disk: a writer
thread (:class:`~medseg.edit.session_writer.SessionWriter`) writes session.json with the latest table,
so a burst of them (hiding a group, then another) costs the GUI no fsync and at most two writes. What a crash keeps is the table as last written; a
journal record is never written before the table it was made with (:meth:`Journal.append` lets a
pending table write finish first), so recovered voxels never carry a label the recovered table lacks.
The table is the document's: visibility and locks are part of it, as in a saved file's sidecar, and
come back after a crash as the user left them.

A large record (:data:`LARGE_RECORD_BYTES` or more: a Segment result, a big fill, their undo) is written by the
same writer thread, so the GUI thread does not serialise and fsync tens of megabytes (lung1's Segment: 47 ms of
the 357 ms the window froze). Records keep their order: the step record after it waits in the same queue, and
any later record written at once first waits for every queued one (as for the table), as do :meth:`flush`,
:meth:`Journal.rebase` and :meth:`Journal.close`. So the journal on disk is always a prefix of the edits made;
a crash between the step shown and its record on disk (the writer's time for one record, tens of
milliseconds) recovers the state just before that one step, which the app computed and the user gets back by
doing it again; every edit the user makes after it is journalled only once that record is on disk, so none of
the user's own work can be lost with it.

After a crash (even SIGKILL) the next start finds the session still marked open and can
:func:`recover` it: the base plus every complete record; a record cut short by the kill
fails its length or CRC check and is ignored (at most the last operation is lost).
A clean close (:meth:`Journal.close`) removes the folder.
"""

from __future__ import annotations

import json
import shutil
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medseg import app_dirs
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume, VolumeMeta
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.session_writer import SessionWriter
from medseg.edit.study_lock import hold_session
from medseg.errors import MedsegError
from medseg.io.atomic import append_synced, atomic_open
from medseg.io.json_files import read_json_object

MAGIC = b"MSJ1"
# a step ended: the payload is the undo history's depth (8 bytes, little-endian), then (since issue 52) a JSON
# object: {"kind": PUSH|UNDO|REDO|SAVED, "unsaved": steps from the saved state (negative: undone; null: not
# held), and for a PUSH "description" and "labels" {value: [entry before, entry after]}} (medseg.edit.journal_history)
STEP_MAGIC = b"MSJS"
PUSH, UNDO, REDO, SAVED = "push", "undo", "redo", "saved"
HEADER = 4 + 8 + 4  # magic, payload length, crc32

LEGACY_FILES = ("base.npz", "journal.bin")  # sessions written before generations
LARGE_RECORD_BYTES = 1 << 20  # a delta this large is journalled by the writer thread (see the module's text)


def base_file(folder: Path, generation: int | None) -> Path:
    return folder / (LEGACY_FILES[0] if generation is None else f"base-{generation}.npz")


def journal_file(folder: Path, generation: int | None = None) -> Path:
    """The journal of ``generation`` (default: the one session.json names)."""
    if generation is None:
        generation = _generation_of(folder)
    return folder / (LEGACY_FILES[1] if generation is None else f"journal-{generation}.bin")


def _generation_of(folder: Path) -> int | None:
    try:
        value = json.loads((folder / "session.json").read_text()).get("generation")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, int) else None


def default_root() -> Path:
    """``sessions`` in medseg's data folder (``$MEDSEG_DATA_DIR`` or the platform's: medseg.app_dirs)."""
    return app_dirs.data_dir() / "sessions"


def _table_json(labels: dict[int, Label]) -> list[dict[str, Any]]:
    return [label.as_dict() for label in labels.values()]


def _table_from_json(rows: list[dict[str, Any]]) -> dict[int, Label]:
    return {int(row["value"]): Label.from_dict(row) for row in rows}


@dataclass
class RecoverableSession:
    folder: Path
    image_source: str
    description: str
    records: int
    modified: float
    edits: int = 0  # the edits not saved when it was last written (see :func:`_unsaved_edits`)
    steps: int = 0  # the undo history's steps then
    undoable: bool = False  # its step records say what each step was: the undo history can come back


class Journal:
    """One editing session's journal. ``start`` a new one for each image + label map base."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._handle = None
        self.records = 0
        self.generation = 0
        self.session_writer = SessionWriter(folder / "session.json")
        self.owner_lock = None  # this process writes the journal (medseg.edit.study_lock)

    @classmethod
    def start(cls, label_map: LabelMap, image_source: str, root: Path | None = None,
              description: str = "") -> "Journal":
        folder = (root or default_root()) / uuid.uuid4().hex
        try:
            folder.mkdir(parents=True, exist_ok=False)
        except OSError as error:
            raise MedsegError(f"cannot create the autosave folder ({error.strerror})", path=folder) from error
        journal = cls(folder)
        journal.owner_lock = hold_session(folder)  # alive, not crashed: no other window recovers or discards it
        journal.rebase(label_map, image_source, description)
        return journal

    def rebase(self, label_map: LabelMap, image_source: str, description: str = "") -> None:
        """A new starting point (a label map opened, a Segment result as the base): a new generation."""
        if self.session_writer.records_pending:  # the old generation's records first: a crash now recovers them
            self.session_writer.flush()
        self._close_handle()
        previous, generation = self.generation, self.generation + 1
        if label_map.counts[1:].any():  # an empty map is not written, only its shape
            with atomic_open(base_file(self.folder, generation)) as handle:
                np.savez_compressed(handle, labels=label_map.array)
        with atomic_open(journal_file(self.folder, generation)):
            pass
        self._write_session(label_map, image_source, description, generation)  # the switch
        self.generation = generation
        self._handle = open(journal_file(self.folder, generation), "ab", buffering=0)
        self.records = 0
        for stale in (base_file(self.folder, previous), journal_file(self.folder, previous), *LEGACY_FILES):
            (self.folder / stale).unlink(missing_ok=True)

    def _write_session(self, label_map: LabelMap, image_source: str, description: str, generation: int) -> None:
        info = {
            "image_source": image_source, "description": description,
            "shape_zyx": list(label_map.shape_zyx), "dtype": str(label_map.array.dtype),
            "spacing_mm": list(label_map.spacing_mm), "origin_mm": list(label_map.origin_mm),
            "direction": label_map.direction.reshape(-1).tolist(),
            "labels": _table_json(label_map.labels), "open": True, "generation": generation,
        }
        self.session_writer.write_now(info)
        self._info = info

    def update_table(self, label_map: LabelMap) -> None:
        """Names, colours, locks, visibility changed: session.json is rewritten soon, off this thread
        (:meth:`flush` waits for it)."""
        self._info = {**self._info, "labels": _table_json(label_map.labels)}  # a new record: the writer owns the last
        self.session_writer.request(self._info)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until the label table as last given is on disk (True), or ``timeout`` seconds (False)."""
        return self.session_writer.flush(timeout)

    def append(self, delta: Delta) -> None:
        """Journal ``delta``: on disk when this returns, or, for a large one, soon after (see the module's text)."""
        self.records += 1
        if delta.nbytes >= LARGE_RECORD_BYTES:
            self.session_writer.queue(lambda: self._write_record(MAGIC, delta.to_bytes()))
            return
        if self.session_writer.pending:  # the table this delta was made with, and the records before it, first
            self.session_writer.flush()
        self._write_record(MAGIC, delta.to_bytes())

    def mark_step(self, steps: int, kind: str = PUSH, unsaved: int | None = None, step: Any = None) -> None:
        """A step the user can undo ended (``kind``), or the label map was saved (SAVED); ``steps``: how many
        the undo history holds now; ``unsaved``: how many steps from the saved state (None: not held);
        ``step``: a new step (a :class:`medseg.edit.history.Step`), whose description and table changes are kept."""
        def payload() -> bytes:  # the table changes of a Segment are 117 labels: encoded off the GUI thread then
            info: dict[str, Any] = {"kind": kind, "unsaved": unsaved}
            if step is not None:
                info["description"] = step.description
                info["labels"] = {str(value): [entry.as_dict() if entry is not None else None for entry in pair]
                                  for value, pair in step.labels.items()}
            return int(steps).to_bytes(8, "little") + json.dumps(info).encode()

        if self.session_writer.records_pending:  # after the record it closes, which is still queued
            self.session_writer.queue(lambda: self._write_record(STEP_MAGIC, payload()))
            return
        self._write_record(STEP_MAGIC, payload())

    def _write_record(self, magic: bytes, *payload: bytes | memoryview) -> None:
        """One record of the ``payload`` pieces (written one after the other: a large delta is never copied
        whole, which would hold the GIL; a record cut short by a crash fails its length or CRC check)."""
        length, crc = 0, 0
        for piece in payload:
            length += len(piece)
            crc = zlib.crc32(piece, crc)
        head = magic + length.to_bytes(8, "little") + crc.to_bytes(4, "little")
        pieces = [head + b"".join(payload)] if length <= LARGE_RECORD_BYTES else [head, *payload]
        if self._handle is None:
            raise MedsegError("the autosave journal is closed", path=self.folder)
        try:
            append_synced(self._handle, *pieces)  # appended, not replaced: see medseg.io.atomic
        except OSError as error:
            raise MedsegError(f"cannot write the autosave journal ({error.strerror})", path=self.folder,
                              hint="free some disk space; your edits are still in memory") from error

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self, discard: bool = True) -> None:
        """A clean end: the session needs no recovery (``discard=False``: its files stay, the table and every
        record written)."""
        self.session_writer.stop(flush=not discard)  # before the handle closes: queued records write to it
        self._close_handle()
        if discard:
            shutil.rmtree(self.folder, ignore_errors=True)
        if self.owner_lock is not None:  # last: never seen unlocked while its files are still going
            self.owner_lock.release()
            self.owner_lock = None


def read_records(path: Path) -> list[Delta]:
    """Every complete, intact delta record; stops at the first torn or corrupt record."""
    return read_journal(path)[0]


def read_journal(path: Path) -> tuple[list[Delta], int | None]:
    """(every intact delta, the undo history's depth at the last step record, None when there is none)."""
    deltas = []
    steps = None
    for entry in read_entries(path):
        if isinstance(entry, Delta):
            deltas.append(entry)
        else:
            steps = entry.steps
    return deltas, steps


@dataclass(frozen=True)
class StepRecord:
    """A step record: the undo history's depth, and what the step was (``info``: {} in a journal written before
    issue 52, which kept only the depth)."""

    steps: int
    info: dict[str, Any]


def read_entries(path: Path) -> list[Delta | StepRecord]:
    """Every intact record, in order: deltas and step records; stops at the first torn or corrupt record."""
    entries: list[Delta | StepRecord] = []
    data = path.read_bytes() if path.is_file() else b""
    pos = 0
    while pos + HEADER <= len(data):
        magic = data[pos:pos + 4]
        if magic not in (MAGIC, STEP_MAGIC):
            break
        length = int.from_bytes(data[pos + 4:pos + 12], "little")
        crc = int.from_bytes(data[pos + 12:pos + 16], "little")
        payload = data[pos + HEADER:pos + HEADER + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            break
        if magic == MAGIC:
            entries.append(Delta.from_bytes(payload))
        else:
            try:  # what the step was only rebuilds the undo history: never a reason to lose the voxels
                info = json.loads(payload[8:].decode()) if length > 8 else {}
            except (ValueError, UnicodeDecodeError):
                info = {}
            entries.append(StepRecord(int.from_bytes(payload[:8], "little"), info if isinstance(info, dict) else {}))
        pos += HEADER + length
    return entries


def find_sessions(root: Path | None = None) -> list[RecoverableSession]:
    """Sessions left open by a crash, newest first."""
    root = root or default_root()
    found = []
    for folder in sorted(root.glob("*/session.json")) if root.is_dir() else []:
        try:
            info = json.loads(folder.read_text())
        except (OSError, ValueError, RecursionError):
            continue
        if not isinstance(info, dict) or not info.get("open"):
            continue
        journal = journal_file(folder.parent, info.get("generation") if isinstance(info.get("generation"), int) else None)
        try:
            entries = read_entries(journal)
        except (ValueError, UnicodeDecodeError):  # a damaged record: recover() names it
            entries = []
        deltas = [entry for entry in entries if isinstance(entry, Delta)]
        marks = [entry for entry in entries if isinstance(entry, StepRecord)]
        steps = marks[-1].steps if marks else len(deltas)
        found.append(RecoverableSession(folder.parent, info.get("image_source", ""), info.get("description", ""),
                                        len(deltas), journal.stat().st_mtime if journal.exists() else 0,
                                        _unsaved_edits(marks, steps), steps,
                                        bool(marks) and all(mark.info.get("kind") for mark in marks)))
    return sorted(found, key=lambda s: -s.modified)


def _unsaved_edits(marks: list[StepRecord], steps: int) -> int:
    """The edits since the saved state as the last step record counted them (undone ones too); a journal
    that does not say (written before issue 52, or saved state no longer held) counts every step."""
    unsaved = marks[-1].info.get("unsaved") if marks else None
    return abs(unsaved) if isinstance(unsaved, int) else steps


def recover(folder: Path) -> tuple[str, LabelMap]:
    """(image source, label map) of a crashed session: the base with every intact record replayed.

    A session damaged beyond that (a disk error, an edited file) is a MedsegError naming it.
    """
    try:
        return _recover(folder)
    except MedsegError:
        raise
    except Exception as error:  # any damage: say which session, never a traceback
        raise MedsegError(f"the autosaved session cannot be recovered ({type(error).__name__}: {error})"[:300],
                          path=folder, hint="discard it; the image itself is untouched") from error


def _recover(folder: Path) -> tuple[str, LabelMap]:
    info = read_json_object(folder / "session.json", "autosaved session record")
    shape = tuple(info["shape_zyx"])
    generation = info.get("generation") if isinstance(info.get("generation"), int) else None
    base = base_file(folder, generation)
    if base.is_file():
        with np.load(base, allow_pickle=False) as data:
            array = data["labels"]
    else:
        array = np.zeros(shape, dtype=np.dtype(info["dtype"]))
    deltas = read_records(journal_file(folder, generation))
    top = max([int(array.max(initial=0))] + [int(d.new.max(initial=0)) for d in deltas])
    if label_dtype(top).itemsize > array.dtype.itemsize:
        array = array.astype(label_dtype(top))
    for delta in deltas:
        delta.write(array, delta.new)
    grid = Volume(array, info["spacing_mm"], info["origin_mm"],
                  np.asarray(info["direction"]).reshape(3, 3), VolumeMeta(modality="SEG"))
    label_map = LabelMap.from_volume(grid, _table_from_json(info["labels"]))
    return info["image_source"], label_map


def discard(folder: Path) -> None:
    shutil.rmtree(folder, ignore_errors=True)
