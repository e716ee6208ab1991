"""The autosave journal: every applied delta appended to a file and fsync'd, so a crash loses nothing.

A session folder (in the user's data folder, ``sessions/<id>/``) holds:

- ``session.json`` — where the image came from, the grid, the label table (written atomically);
- ``base.npz`` — the label map when the session (re)started: a loaded file or a Segment
  result (written atomically; an empty map is not written, only its shape);
- ``journal.bin`` — appended records ``MAGIC | length | crc32 | delta bytes``, each one
  fsync'd before the edit returns. Undo appends the inverse delta, so replaying the
  journal from the base gives the state the user saw.

After a crash (even SIGKILL) the next start finds the session still marked open and can
:func:`recover` it: the base plus every complete record; a record cut short by the kill
fails its length or CRC check and is ignored (at most the last operation is lost).
A clean close (:meth:`Journal.close`) removes the folder.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from medseg import app_dirs
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.errors import MedsegError
from medseg.io.atomic import atomic_open, atomic_write_text
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume, VolumeMeta

MAGIC = b"MSJ1"
HEADER = 4 + 8 + 4  # magic, payload length, crc32


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


class Journal:
    """One editing session's journal. ``start`` a new one for each image + label map base."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._handle = None
        self.records = 0

    @classmethod
    def start(cls, label_map: LabelMap, image_source: str, root: Path | None = None,
              description: str = "") -> "Journal":
        folder = (root or default_root()) / uuid.uuid4().hex
        try:
            folder.mkdir(parents=True, exist_ok=False)
        except OSError as error:
            raise MedsegError(f"cannot create the autosave folder ({error.strerror})", path=folder) from error
        journal = cls(folder)
        journal.rebase(label_map, image_source, description)
        return journal

    def rebase(self, label_map: LabelMap, image_source: str, description: str = "") -> None:
        """A new starting point (a label map opened, a Segment result as the base): truncates the journal."""
        self._close_handle()
        empty = not label_map.counts[1:].any()
        if not empty:
            with atomic_open(self.folder / "base.npz") as handle:
                np.savez_compressed(handle, labels=label_map.array)
        else:
            (self.folder / "base.npz").unlink(missing_ok=True)
        self._write_session(label_map, image_source, description)
        with atomic_open(self.folder / "journal.bin"):
            pass
        self._handle = open(self.folder / "journal.bin", "ab", buffering=0)
        self.records = 0

    def _write_session(self, label_map: LabelMap, image_source: str, description: str) -> None:
        info = {
            "image_source": image_source, "description": description,
            "shape_zyx": list(label_map.shape_zyx), "dtype": str(label_map.array.dtype),
            "spacing_mm": list(label_map.spacing_mm), "origin_mm": list(label_map.origin_mm),
            "direction": label_map.direction.reshape(-1).tolist(),
            "labels": _table_json(label_map.labels), "open": True,
        }
        atomic_write_text(self.folder / "session.json", json.dumps(info, indent=1))
        self._info = info

    def update_table(self, label_map: LabelMap) -> None:
        """Names, colours, locks changed: rewrite session.json (small, atomic)."""
        self._info["labels"] = _table_json(label_map.labels)
        atomic_write_text(self.folder / "session.json", json.dumps(self._info, indent=1))

    def append(self, delta: Delta) -> None:
        payload = delta.to_bytes()
        record = MAGIC + len(payload).to_bytes(8, "little") + zlib.crc32(payload).to_bytes(4, "little") + payload
        if self._handle is None:
            raise MedsegError("the autosave journal is closed", path=self.folder)
        try:
            self._handle.write(record)
            os.fsync(self._handle.fileno())
        except OSError as error:
            raise MedsegError(f"cannot write the autosave journal ({error.strerror})", path=self.folder,
                              hint="free some disk space; your edits are still in memory") from error
        self.records += 1

    def _close_handle(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def close(self, discard: bool = True) -> None:
        """A clean end: the session needs no recovery."""
        self._close_handle()
        if discard:
            shutil.rmtree(self.folder, ignore_errors=True)


def read_records(path: Path) -> list[Delta]:
    """Every complete, intact record; stops at the first torn or corrupt one."""
    deltas = []
    data = path.read_bytes() if path.is_file() else b""
    pos = 0
    while pos + HEADER <= len(data):
        if data[pos:pos + 4] != MAGIC:
            break
        length = int.from_bytes(data[pos + 4:pos + 12], "little")
        crc = int.from_bytes(data[pos + 12:pos + 16], "little")
        payload = data[pos + HEADER:pos + HEADER + length]
        if len(payload) != length or zlib.crc32(payload) != crc:
            break
        deltas.append(Delta.from_bytes(payload))
        pos += HEADER + length
    return deltas


def find_sessions(root: Path | None = None) -> list[RecoverableSession]:
    """Sessions left open by a crash, newest first."""
    root = root or default_root()
    found = []
    for folder in sorted(root.glob("*/session.json")) if root.is_dir() else []:
        try:
            info = json.loads(folder.read_text())
        except (OSError, ValueError):
            continue
        if not info.get("open"):
            continue
        journal = folder.parent / "journal.bin"
        found.append(RecoverableSession(folder.parent, info.get("image_source", ""), info.get("description", ""),
                                        len(read_records(journal)), journal.stat().st_mtime if journal.exists() else 0))
    return sorted(found, key=lambda s: -s.modified)


def recover(folder: Path) -> tuple[str, LabelMap]:
    """(image source, label map) of a crashed session: the base with every intact record replayed."""
    try:
        info = json.loads((folder / "session.json").read_text())
    except (OSError, ValueError) as error:
        raise MedsegError("the autosaved session cannot be read", path=folder) from error
    shape = tuple(info["shape_zyx"])
    base = folder / "base.npz"
    if base.is_file():
        with np.load(base, allow_pickle=False) as data:
            array = data["labels"]
    else:
        array = np.zeros(shape, dtype=np.dtype(info["dtype"]))
    deltas = read_records(folder / "journal.bin")
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
