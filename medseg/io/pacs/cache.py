"""The local cache of retrieved series: one folder per series, a completion marker beside it.

Layout: ``<root>/<StudyInstanceUID>/<SeriesInstanceUID>/<SOPInstanceUID>.dcm`` and
``<root>/<StudyInstanceUID>/<SeriesInstanceUID>.complete.json``. Each instance is written
with the one atomic write, so a file that exists is whole; a series is complete only when
its marker exists, and the marker is written last, after every instance the query listed
has arrived. The marker (written durably) records every instance's size, and a series
counts as complete only while each file still has that size: instances are renamed into
place whole but not fsynced one by one (16 ms per file here, three times the network time
of a CT slice on loopback), so a power cut can leave an empty file, which this check
catches and the next retrieval fetches again. An interrupted retrieval leaves a folder without a marker, which the next
retrieval resumes (it fetches only the missing instances) and which is never loaded as if
it were whole. Patient data in the cache is the user's: :meth:`SeriesCache.clear` deletes it.
"""

from __future__ import annotations

import datetime
import json
import os
import re
import shutil
from pathlib import Path

from medseg.io.atomic import atomic_write_bytes, atomic_write_text
from medseg.io.pacs.errors import PacsError

MARKER_SUFFIX = ".complete.json"
_UID = re.compile(r"^[0-9]+(\.[0-9]+)*$")


def check_uid(uid: str, what: str) -> str:
    """A UID we may use as a file name (a server could send anything)."""
    uid = str(uid).strip().rstrip("\0")
    if not uid or len(uid) > 64 or not _UID.match(uid):
        raise PacsError(f"{what} '{uid[:80]}' is not a valid DICOM UID")
    return uid


class SeriesCache:
    def __init__(self, root: str | os.PathLike, limit_mb: int | None = None):
        self.root = Path(root)
        self.limit_mb = limit_mb

    def folder(self, study_uid: str, series_uid: str) -> Path:
        return self.root / check_uid(study_uid, "Study Instance UID") / check_uid(series_uid, "Series Instance UID")

    def marker(self, study_uid: str, series_uid: str) -> Path:
        folder = self.folder(study_uid, series_uid)
        return folder.parent / f"{folder.name}{MARKER_SUFFIX}"

    def present(self, study_uid: str, series_uid: str) -> set[str]:
        """SOP Instance UIDs whose files are in the cache (whole, thanks to the atomic write)."""
        folder = self.folder(study_uid, series_uid)
        if not folder.is_dir():
            return set()
        return {p.stem for p in folder.glob("*.dcm") if _UID.match(p.stem)}

    def is_complete(self, study_uid: str, series_uid: str) -> bool:
        try:
            facts = json.loads(self.marker(study_uid, series_uid).read_text(encoding="utf-8"))
            sizes = {str(uid): int(size) for uid, size in facts["instances"].items()}
            if len(sizes) != int(facts["count"]) or not sizes:
                return False
            folder = self.folder(study_uid, series_uid)
            return all((folder / f"{uid}.dcm").stat().st_size == size for uid, size in sizes.items())
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return False

    def prepare(self, study_uid: str, series_uid: str) -> Path:
        folder = self.folder(study_uid, series_uid)
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise PacsError(f"cannot create the cache folder ({error.strerror})", path=folder,
                            hint="choose another cache folder in the PACS settings") from error
        return folder

    def write_instance(self, study_uid: str, series_uid: str, sop_uid: str, data: bytes) -> Path:
        """Write one instance durably (for single writes; a retrieval uses :meth:`writer`)."""
        path = self.folder(study_uid, series_uid) / f"{check_uid(sop_uid, 'SOP Instance UID')}.dcm"
        return atomic_write_bytes(path, data)

    def writer(self, study_uid: str, series_uid: str) -> "SeriesWriter":
        return SeriesWriter(self.prepare(study_uid, series_uid))

    def usable_instance(self, study_uid: str, series_uid: str, sop_uid: str) -> bool:
        """Whether a file left by an interrupted retrieval is a readable instance of that UID
        (a power cut can leave a renamed but never flushed file empty); if not, it is deleted."""
        from pydicom import dcmread

        path = self.folder(study_uid, series_uid) / f"{sop_uid}.dcm"
        try:
            ok = path.stat().st_size > 0 and str(dcmread(path, stop_before_pixels=True).SOPInstanceUID) == sop_uid
        except Exception:  # noqa: BLE001 - any unreadable file is simply fetched again
            ok = False
        if not ok:
            path.unlink(missing_ok=True)
        return ok

    def mark_complete(self, study_uid: str, series_uid: str, instances: list[str], server: str) -> Path:
        """Write the marker; refuses unless every listed instance is in the folder."""
        present = self.present(study_uid, series_uid)
        missing = sorted(set(instances) - present)
        if missing:
            raise PacsError(f"{len(missing)} of {len(set(instances))} instances are missing; the series is not "
                            "marked complete", path=self.folder(study_uid, series_uid))
        folder = self.folder(study_uid, series_uid)
        sizes = {uid: (folder / f"{uid}.dcm").stat().st_size for uid in sorted(set(instances))}
        facts = {"count": len(sizes), "instances": sizes, "server": server,
                 "completed": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")}
        return atomic_write_text(self.marker(study_uid, series_uid), json.dumps(facts, indent=0))

    def size_bytes(self) -> int:
        if not self.root.is_dir():
            return 0
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file())

    def entries(self) -> list[tuple[Path, Path]]:
        """(series folder, marker) of every complete series, least recently completed first."""
        if not self.root.is_dir():
            return []
        markers = sorted(self.root.glob(f"*/*{MARKER_SUFFIX}"), key=lambda p: p.stat().st_mtime)
        return [(m.parent / m.name[: -len(MARKER_SUFFIX)], m) for m in markers]

    def enforce_limit(self, keep: Path | None = None) -> list[Path]:
        """Delete the oldest complete series until the cache fits its limit; never ``keep``."""
        if not self.limit_mb:
            return []
        removed: list[Path] = []
        size = self.size_bytes()
        for folder, marker in self.entries():
            if size <= self.limit_mb * 1024 * 1024:
                break
            if keep is not None and folder == keep:
                continue
            freed = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
            marker.unlink(missing_ok=True)  # first: a half-deleted series must not look complete
            shutil.rmtree(folder, ignore_errors=True)
            size -= freed
            removed.append(folder)
        return removed

    def clear(self) -> int:
        """Delete every cached series (complete or partial). Returns the bytes freed."""
        freed = self.size_bytes()
        if self.root.is_dir():
            for study in self.root.iterdir():
                if study.is_dir() and _UID.match(study.name):
                    for marker in study.glob(f"*{MARKER_SUFFIX}"):
                        marker.unlink(missing_ok=True)
                    shutil.rmtree(study, ignore_errors=True)
        return freed



class SeriesWriter:
    """Writes a retrieval's instances into their series folder, each renamed into place whole."""

    def __init__(self, folder: Path):
        self.folder = folder

    def write(self, sop_uid: str, data: bytes) -> Path:
        path = self.folder / f"{check_uid(sop_uid, 'SOP Instance UID')}.dcm"
        return atomic_write_bytes(path, data, sync=False)
