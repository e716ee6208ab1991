"""``installed.json``: the record of one installed model, and the only thing that makes it installed.

A model folder ``<models>/<publisher>/<name>/`` holds version folders (``v-<version>-<tag>/``)
and this record, which names the active one. The record is written last, atomically, after
the new version folder is complete and hashed: a download cut short, a failed check or a
kill -9 leaves the record as it was (the old version, or nothing), never a half model.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medseg.errors import ModelError
from medseg.io.atomic import atomic_write_text
from medseg.io.digest import sha256_file

RECORD_FILE = "installed.json"
FORMAT_NAME = "medseg-installed-model"
FORMAT_VERSION = 1


@dataclass
class InstallRecord:
    id: str
    version: str
    active: str  # the version folder's name
    entry: dict[str, Any]  # the catalogue entry as it was at install time (a pack's or an import's too)
    files: dict[str, str]  # path inside the version folder -> SHA-256 of what was installed
    run: str | None  # the package medseg opens for this model (inside the version folder), or None
    parts: dict[str, str] = field(default_factory=dict)  # nnU-Net dataset id -> its package (inside the folder)
    configurations: list[str] = field(default_factory=list)  # the catalogue configurations installed
    sources: list[dict[str, Any]] = field(default_factory=list)  # what it came from: URLs, a pack, a folder
    licence: dict[str, Any] = field(default_factory=dict)  # the licence and, where needed, its acceptance
    installed_at: str = ""
    # path inside the version folder -> its size when installed: checked at every open, cheaply (hashes: verify)
    sizes: dict[str, int] = field(default_factory=dict)
    folder: Path | None = None  # the model folder (set when read)
    read_only: bool = False  # found in a system-wide folder

    @property
    def version_folder(self) -> Path:
        assert self.folder is not None
        return self.folder / self.active

    def run_path(self) -> Path | None:
        return self.version_folder / self.run if self.run else None

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "id": self.id, "version": self.version,
                "active": self.active, "run": self.run, "parts": self.parts, "configurations": self.configurations,
                "files": self.files, "sources": self.sources, "licence": self.licence,
                "installed_at": self.installed_at, "sizes": self.sizes, "entry": self.entry}


def read_record(folder: Path, read_only: bool = False) -> InstallRecord | None:
    """The record in a model folder, None when there is none (nothing is installed there)."""
    path = folder / RECORD_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"the install record cannot be read: {error}", path=path,
                         hint="`medseg models remove` and install the model again") from error
    if not isinstance(data, dict) or data.get("format") != FORMAT_NAME:
        raise ModelError(f"not a {FORMAT_NAME} record", path=path)
    if int(data.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelError("the install record is newer than this medseg understands", path=path, hint="update medseg")
    try:
        active = str(data["active"])
        if Path(active).name != active or active.startswith("."):
            raise ModelError(f"the record names {active!r} as its version folder", path=path)
        files = {str(k): str(v) for k, v in dict(data["files"]).items()}
        for name in [*files, *(data.get("parts") or {}).values(), data.get("run") or "."]:
            if Path(name).is_absolute() or ".." in Path(name).parts:
                raise ModelError(f"the record names a path outside its folder: {name!r}", path=path)
        return InstallRecord(
            id=str(data["id"]), version=str(data["version"]), active=active, entry=dict(data.get("entry") or {}),
            files=files, run=data.get("run"), parts={str(k): str(v) for k, v in (data.get("parts") or {}).items()},
            configurations=[str(c) for c in data.get("configurations") or []],
            sources=list(data.get("sources") or []), licence=dict(data.get("licence") or {}),
            installed_at=str(data.get("installed_at", "")),
            sizes={str(k): int(v) for k, v in (data.get("sizes") or {}).items()}, folder=folder, read_only=read_only)
    except (KeyError, TypeError, ValueError) as error:
        raise ModelError(f"the install record is incomplete: {error!r}", path=path) from error


def write_record(record: InstallRecord) -> Path:
    """Commit an install: the record now names ``record.active`` (atomic: the old record or the new one)."""
    assert record.folder is not None
    return atomic_write_text(record.folder / RECORD_FILE, json.dumps(record.to_json(), indent=1) + "\n")


def size_tree(root: Path, names: Iterable[str]) -> dict[str, int]:
    return {name: (root / name).stat().st_size for name in names}


def hash_tree(root: Path) -> dict[str, str]:
    """SHA-256 of every file under ``root`` (paths relative, with '/'); links are refused."""
    found = {}
    for folder, dirs, names in os.walk(root):
        dirs.sort()
        for name in sorted(names):
            path = Path(folder) / name
            if path.is_symlink():
                raise ModelError("a model folder may not hold links", path=path)
            found[path.relative_to(root).as_posix()] = sha256_file(path)
    return found
