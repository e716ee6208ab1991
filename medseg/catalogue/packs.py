"""One-file packs for machines without a network.

``medseg models pack ID -o FILE`` on a connected machine writes a zip (stored, not compressed:
weights do not compress) holding

    medseg-pack.json   the catalogue entry, the SHA-256 of every file, the licence
    LICENCE.txt        the licence terms, for whoever carries the file
    model/...          the installed version folder, as installed (safetensors, JSON)

``medseg models install FILE`` on the workstation checks every member (medseg.catalogue.unpack),
asks for the licence where it needs acceptance, and compares each file with its SHA-256 while
unpacking; anything missing, extra or different refuses the whole pack.
"""

from __future__ import annotations

import hashlib
import json
import zipfile
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath
from typing import Any

from medseg.catalogue.entries import parse_entry
from medseg.catalogue.folders import find_installed
from medseg.catalogue.install import Acceptance, _Transaction, licence_record
from medseg.catalogue.record import InstallRecord
from medseg.catalogue.unpack import check_archive
from medseg.errors import ChecksumMismatch, ModelError
from medseg.io.atomic import atomic_open
from medseg.io.digest import sha256_file
from medseg.progress import CancelToken, ProgressCallback, report

PACK_MANIFEST = "medseg-pack.json"
FORMAT_NAME = "medseg-model-pack"
FORMAT_VERSION = 1
MEMBER_ROOT = "model"
MAX_MANIFEST_BYTES = 4 << 20


def pack(model_id: str, output: str | Path, progress: ProgressCallback | None = None) -> Path:
    """Write the installed ``model_id`` into one file."""
    record = find_installed(model_id)
    if record is None:
        raise ModelError(f"{model_id} is not installed here; install it first, then pack it")
    folder = record.version_folder
    for name, expected in record.files.items():  # a pack carries what was installed, not what changed since
        got = sha256_file(folder / name) if (folder / name).is_file() else "missing"
        if got != expected:
            raise ChecksumMismatch(folder / name, expected, got, what=f"installed file {name}")
    manifest = {"format": FORMAT_NAME, "format_version": FORMAT_VERSION, "id": record.id, "version": record.version,
                "created": datetime.now(timezone.utc).isoformat(timespec="seconds"), "entry": record.entry,
                "run": record.run, "parts": record.parts, "configurations": record.configurations,
                "files": record.files, "licence": {k: v for k, v in record.licence.items() if not k.startswith("accepted")},
                "sources": record.sources}
    terms = (record.entry.get("licence") or {}).get("terms", "")
    output = Path(output)
    with atomic_open(output) as raw, zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
        archive.writestr(PACK_MANIFEST, json.dumps(manifest, indent=1))
        archive.writestr("LICENCE.txt", f"{record.id} {record.version}\n{terms}\n")
        for index, name in enumerate(sorted(record.files)):
            report(progress, index / max(len(record.files), 1), f"packing {name}", "pack")
            archive.write(folder / name, f"{MEMBER_ROOT}/{name}")
    report(progress, 1.0, f"packed {model_id}", "pack")
    return output


def is_pack(path: Path) -> bool:
    try:
        with zipfile.ZipFile(path) as archive:
            return PACK_MANIFEST in archive.namelist()
    except (zipfile.BadZipFile, OSError):
        return False


def install_pack(path: str | Path, *, accept_licence: Acceptance = False, progress: ProgressCallback | None = None,
                 cancel: CancelToken | None = None) -> InstallRecord:
    """Install a pack without any network: every file checked against the pack's SHA-256."""
    path = Path(path)
    checked = check_archive(path)
    with zipfile.ZipFile(path) as archive:
        manifest = _manifest(archive, path)
        entry = parse_entry(manifest["entry"])
        if entry.id != manifest["id"]:
            raise ModelError(f"the pack names {manifest['id']} but describes {entry.id}", path=path)
        licence = licence_record(entry, accept_licence)
        expected: dict[str, str] = {str(k): str(v) for k, v in manifest["files"].items()}
        members = {}
        for info, relative in checked:
            if info.is_dir() or relative.parts[0] != MEMBER_ROOT:
                continue
            members[PurePosixPath(*relative.parts[1:]).as_posix()] = info
        missing = sorted(set(expected) - set(members))
        extra = sorted(set(members) - set(expected))
        if missing or extra:
            raise ModelError(f"the pack is incomplete or altered (missing {missing[:3]}, not listed {extra[:3]})",
                             path=path, hint="nothing was installed; make the pack again")
        with _Transaction(entry.id) as transaction:
            for index, (name, info) in enumerate(sorted(members.items())):
                if cancel is not None:
                    cancel.raise_if_cancelled()
                report(progress, index / max(len(members), 1), f"unpacking {name}", "unpack")
                destination = transaction.staging.joinpath(*PurePosixPath(name).parts)
                destination.parent.mkdir(parents=True, exist_ok=True)
                digest = hashlib.sha256()
                with archive.open(info) as source, open(destination, "xb") as out:
                    for block in iter(lambda: source.read(1 << 20), b""):
                        digest.update(block)
                        out.write(block)
                if digest.hexdigest() != expected[name]:
                    raise ChecksumMismatch(path, expected[name], digest.hexdigest(), what=f"{name} in the pack")
            sources = [{"pack": path.name, "sha256": sha256_file(path), "created": manifest.get("created"),
                        "from": manifest.get("sources", [])}]
            record = transaction.commit(entry, str(manifest["version"]), manifest.get("run"),
                                        dict(manifest.get("parts") or {}), list(manifest.get("configurations") or []),
                                        sources, licence)
    from medseg.catalogue.install_measure import measure_installed

    measure_installed([record], progress)  # its first Segment runs the chosen engine at once
    report(progress, 1.0, f"{entry.id} installed from the pack", "done")
    return record


def _manifest(archive: zipfile.ZipFile, path: Path) -> dict[str, Any]:
    info = archive.getinfo(PACK_MANIFEST)
    if info.file_size > MAX_MANIFEST_BYTES:
        raise ModelError(f"{PACK_MANIFEST} is too large to be a pack description", path=path)
    try:
        manifest = json.loads(archive.read(info).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"{PACK_MANIFEST} is not valid JSON: {error}", path=path) from error
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ModelError(f"not a {FORMAT_NAME}", path=path)
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelError("the pack is newer than this medseg understands", path=path, hint="update medseg")
    for key in ("id", "version", "entry", "files"):
        if key not in manifest:
            raise ModelError(f"{PACK_MANIFEST} lacks {key!r}", path=path)
    run = manifest.get("run")
    if run is not None and (PurePosixPath(run).is_absolute() or ".." in PurePosixPath(run).parts):
        raise ModelError(f"the pack names {run!r} as its model", path=path)
    return manifest
