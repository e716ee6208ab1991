"""Where DICOM files come from: a folder (recursive), files, a .zip, or a DICOMDIR.

A *source reference* is a plain string: a file path, or ``"<archive.zip>::<member>"`` for
a member of a zip archive. Plain strings keep ``SeriesInfo.files`` easy to print, store
and pass between threads.

A zip member is streamed, never read whole into memory: the scan reads only its header
(a 2 MB zip holding a 2 GB member of zeros drove ``info`` past 4 GB when every member was
read whole, eight threads at once). A member whose declared size exceeds
:data:`MAX_MEMBER_BYTES` (no DICOM file of a CT study is that large: 1000 frames of
512 x 512 x 16 bit are 0.5 GB) is refused by name, and a member never yields more than its
declared size (``zipfile`` stops there and checks the CRC).
"""

from __future__ import annotations

import os
import struct
import threading
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePath
from typing import BinaryIO

from medseg.errors import DicomError

ZIP_SEPARATOR = "::"
MAX_MEMBER_BYTES = 1 << 30

# One ZipFile per (archive, thread): ZipFile reads share a file handle, so threads get their own.
_zip_local = threading.local()


def _is_zip(path: Path) -> bool:
    return path.suffix.lower() == ".zip" and zipfile.is_zipfile(path)


def _is_dicomdir(path: Path) -> bool:
    return path.name.upper() == "DICOMDIR"


def files_from_dicomdir(dicomdir: Path) -> list[str]:
    """The image files a DICOMDIR refers to (paths relative to the DICOMDIR's folder).

    A reference that would leave the folder (``..``, an absolute path or drive, a link out of
    it) is refused with the DICOMDIR named: media never points outside itself, and a hostile
    one must not make medseg read files elsewhere on the machine.
    """
    import pydicom

    try:
        ds = pydicom.dcmread(dicomdir)
        records = ds.DirectoryRecordSequence
    except Exception as error:  # pydicom raises many types on malformed input
        raise DicomError(f"cannot read this DICOMDIR ({error})", path=dicomdir,
                         hint="open the folder that contains it instead") from error
    if records is None:  # an empty value (found by fuzzing): not iterable
        records = []
    if not isinstance(records, Sequence) or isinstance(records, (str, bytes)):
        # The element's VR damaged into a number or text (found by fuzzing: 'int' is not iterable)
        raise DicomError("its directory record sequence is not a sequence of records", path=dicomdir,
                         hint="open the folder that contains it instead")
    files = []
    root = dicomdir.parent.resolve()
    for record in records:
        try:
            file_id = record.get("ReferencedFileID")
        except Exception:  # noqa: BLE001 - a damaged record: pydicom raises many types
            continue
        if not file_id:
            continue
        try:
            raw = [file_id] if isinstance(file_id, str) else [str(part) for part in file_id]
        except TypeError:  # not text: a damaged record
            continue
        # Components are separated by "\\" in the DICOM value; split on both separators so that
        # "..\\..\\outside" cannot pass as one odd file name here and climb out on Windows.
        parts = [piece for part in raw for piece in part.replace("\\", "/").split("/")]
        target = dicomdir.parent.joinpath(*parts)
        if (any(piece in ("..", "") for piece in parts) or any(PurePath(piece).is_absolute() or ":" in piece
                                                                or not piece.isprintable() for piece in parts)
                or not _resolves_inside(target, root)):
            raise DicomError(f"the DICOMDIR refers to {'/'.join(parts)!r}, outside its own folder; it is not read",
                             path=dicomdir, hint="open the folder of images instead")
        files.append(str(target))
    return files


def _resolves_inside(target: Path, root: Path) -> bool:
    try:
        return target.resolve().is_relative_to(root)
    except (OSError, ValueError, RuntimeError):  # a null byte, a link loop
        return False


# zipfile raises these besides BadZipFile on a damaged archive: a name that is not UTF-8 though
# flagged so, an empty name, an unknown compression or encryption, a negative size (found by fuzzing).
_ZIP_ERRORS = (zipfile.BadZipFile, zipfile.LargeZipFile, OSError, EOFError, KeyError, ValueError, RuntimeError,
               NotImplementedError, OverflowError, IndexError, TypeError, struct.error)


def _walk(folder: Path, refused_links: list[str] | None = None) -> list[str]:
    from medseg.io.folder_walk import walk_files

    walked = walk_files(folder)  # follows links to folders inside ``folder``; refuses the others
    if refused_links is not None:
        refused_links.extend(walked.refused_links)
    # a DICOMDIR in a folder scan is an index, not an image
    return [path for path in walked.files if Path(path).name.upper() != "DICOMDIR"]


def _zip_members(archive: Path) -> list[str]:
    try:
        with zipfile.ZipFile(archive) as zf:
            names = [info.filename for info in zf.infolist() if not info.is_dir()]
    except _ZIP_ERRORS as error:
        raise DicomError(f"cannot open the zip archive ({type(error).__name__}: {error})"[:300], path=archive) from error
    return [f"{archive}{ZIP_SEPARATOR}{name}" for name in sorted(names)
            if not Path(name).name.startswith(".") and "__MACOSX" not in name]


def expand_sources(paths: str | os.PathLike | Sequence[str | os.PathLike],
                   refused_links: list[str] | None = None) -> list[str]:
    """Every candidate file reference under ``paths`` (folders are searched recursively, into links to
    folders inside them; ``refused_links`` collects the links to folders outside, which are not followed)."""
    if isinstance(paths, (str, os.PathLike)):
        items: Iterable[str | os.PathLike] = [paths]
    else:
        items = paths
    refs: list[str] = []
    for item in items:
        if not os.fspath(item).strip():  # Path("") is ".", the working folder: never what an empty argument meant
            raise DicomError("the input path is empty: no file or folder was named",
                             hint="give the DICOM folder, zip, DICOMDIR or NIfTI/NRRD/MHA file to open")
        path = Path(item)
        if path.is_dir():
            refs.extend(_walk(path, refused_links))
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


def _member_info(archive: str, member: str) -> zipfile.ZipInfo:
    try:
        info = _zip_handle(archive).getinfo(member)
    except _ZIP_ERRORS as error:
        raise DicomError(f"cannot read {member!r} from the zip archive ({error})", path=archive) from error
    if info.file_size > MAX_MEMBER_BYTES:
        raise DicomError(f"the zip member {member!r} declares {info.file_size / 2**30:.1f} GiB uncompressed "
                         f"({info.compress_size / 2**20:.1f} MiB compressed), more than any DICOM file of a CT study "
                         f"({MAX_MEMBER_BYTES / 2**30:.0f} GiB at most): not read, it may be a zip bomb", path=archive,
                         hint="unpack the study with a trusted tool instead")
    return info


def open_ref(ref: str) -> BinaryIO:
    """A binary file object for a reference; a zip member is a stream (seekable, never read whole)."""
    archive, member = split_ref(ref)
    if member is None:
        return open(archive, "rb")
    info = _member_info(archive, member)
    try:
        return _zip_handle(archive).open(info)  # type: ignore[return-value]
    except _ZIP_ERRORS as error:
        raise DicomError(f"cannot read {member!r} from the zip archive ({error})", path=archive) from error


def ref_size(ref: str) -> int:
    archive, member = split_ref(ref)
    if member is None:
        return os.path.getsize(archive)
    return _member_info(archive, member).file_size
