"""Where DICOM files come from: a folder (recursive), files, a .zip, or a DICOMDIR.

A *source reference* is a plain string: a file path, or ``"<archive.zip>::<member>"`` for
a member of a zip archive. Plain strings keep ``SeriesInfo.files`` easy to print, store
and pass between threads.
"""

from __future__ import annotations

import io
import os
import threading
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import BinaryIO

from medseg.errors import DicomError

ZIP_SEPARATOR = "::"

# One ZipFile per (archive, thread): ZipFile reads share a file handle, so threads get their own.
_zip_local = threading.local()


def _is_zip(path: Path) -> bool:
    return path.suffix.lower() == ".zip" and zipfile.is_zipfile(path)


def _is_dicomdir(path: Path) -> bool:
    return path.name.upper() == "DICOMDIR"


def files_from_dicomdir(dicomdir: Path) -> list[str]:
    """The image files a DICOMDIR refers to (paths relative to the DICOMDIR's folder)."""
    import pydicom

    try:
        ds = pydicom.dcmread(dicomdir)
        records = ds.DirectoryRecordSequence
    except Exception as error:  # pydicom raises many types on malformed input
        raise DicomError(f"cannot read this DICOMDIR ({error})", path=dicomdir,
                         hint="open the folder that contains it instead") from error
    files = []
    for record in records:
        file_id = record.get("ReferencedFileID")
        if not file_id:
            continue
        parts = [file_id] if isinstance(file_id, str) else list(file_id)
        files.append(str(dicomdir.parent.joinpath(*parts)))
    return files


def _walk(folder: Path) -> list[str]:
    found = []
    for root, dirs, names in os.walk(folder):
        dirs.sort()
        for name in sorted(names):
            if name.startswith(".") or name.upper() == "DICOMDIR":
                continue  # hidden files; a DICOMDIR in a folder scan is an index, not an image
            found.append(os.path.join(root, name))
    return found


def _zip_members(archive: Path) -> list[str]:
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [info.filename for info in zf.infolist() if not info.is_dir()]
    except (zipfile.BadZipFile, OSError) as error:
        raise DicomError(f"cannot open the zip archive ({error})", path=archive) from error
    return [f"{archive}{ZIP_SEPARATOR}{name}" for name in sorted(names)
            if not Path(name).name.startswith(".") and "__MACOSX" not in name]


def expand_sources(paths: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """Every candidate file reference under ``paths`` (folders are searched recursively)."""
    if isinstance(paths, (str, os.PathLike)):
        items: Iterable[str | os.PathLike] = [paths]
    else:
        items = paths
    refs: list[str] = []
    for item in items:
        path = Path(item)
        if path.is_dir():
            refs.extend(_walk(path))
        elif not path.exists():
            raise DicomError("no such file or folder", path=path)
        elif _is_dicomdir(path):
            refs.extend(files_from_dicomdir(path))
        elif _is_zip(path):
            refs.extend(_zip_members(path))
        else:
            refs.append(str(path))
    # The same file named twice (e.g. a folder and a file in it) is read once.
    return list(dict.fromkeys(refs))


def split_ref(ref: str) -> tuple[str, str | None]:
    """(file path, zip member or None)."""
    if ZIP_SEPARATOR in ref:
        archive, member = ref.split(ZIP_SEPARATOR, 1)
        return archive, member
    return ref, None


def _zip_handle(archive: str) -> zipfile.ZipFile:
    cache = getattr(_zip_local, "handles", None)
    if cache is None:
        cache = _zip_local.handles = {}
    handle = cache.get(archive)
    if handle is None:
        handle = cache[archive] = zipfile.ZipFile(archive)
    return handle


def open_ref(ref: str) -> BinaryIO:
    """A binary file object for a reference (zip members are read into memory)."""
    archive, member = split_ref(ref)
    if member is None:
        return open(archive, "rb")
    try:
        return io.BytesIO(_zip_handle(archive).read(member))
    except (KeyError, zipfile.BadZipFile, OSError, EOFError) as error:
        raise DicomError(f"cannot read {member!r} from the zip archive ({error})", path=archive) from error


def ref_size(ref: str) -> int:
    archive, member = split_ref(ref)
    if member is None:
        return os.path.getsize(archive)
    return _zip_handle(archive).getinfo(member).file_size
