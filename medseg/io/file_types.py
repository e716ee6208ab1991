"""What a file is, by its name: each format's key, suffixes, what it keeps, and its completeness check.

The lower half of the one table of formats (issue 36: "a format is added in one place"). The readers and
writers of whole files (:mod:`medseg.io.image_files`, :mod:`medseg.io.label_files`, ...) and the atomic
write ask this module which format a name is and whether a file of it is whole; the dispatch table
(:mod:`medseg.io.formats`) extends each row here with the functions that read and write it. It sits above
those functions, so they never import it: this module imports no reader or writer, only the completeness
checks (:mod:`medseg.io.file_checks`) and the header readers, which import nothing above them.
"""

from __future__ import annotations

import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, TypeVar

from medseg.errors import ImageFormatError
from medseg.io.file_checks import (
    IncompleteFile,
    check_dicom,
    check_json,
    check_metaimage,
    check_nifti,
    check_nrrd,
    check_png,
    check_safetensors,
    check_zip,
    gzip_uncompressed_size,
)
from medseg.io.header_facts import ImageHeader, check_regular
from medseg.io.image_headers import nifti_header
from medseg.io.text_headers import metaimage_header, nrrd_header

LABEL_MAP, DICOM_SEG = "label-map", "dicom-seg"  # what a segmentation is saved as (workflows' SaveTarget.format)


@dataclass(frozen=True)
class FileType:
    key: str  # short name (``batch --format``)
    name: str  # for people (dialogs, messages)
    suffixes: tuple[str, ...]  # lower case; the first is what medseg writes
    keeps: str  # what a file of this format keeps of a study
    check: Callable[[Path], None]  # raises file_checks.IncompleteFile when a file is not whole
    read_header: Callable[[Path], ImageHeader] | None = None  # an image file's header, checked (no voxel read)
    image_file: bool = False  # read and written as one image file (its row in medseg.io.formats says how)
    segmentation: bool = False  # a segmentation is saved in it (its row in medseg.io.formats writes it)
    label_map: bool = False  # a segmentation is written as a label map with a .labels.json sidecar
    dicom_seg: bool = False  # a DICOM Segmentation: written only for a study loaded from DICOM
    written_suffixes: tuple[str, ...] = ()  # suffixes medseg writes (default: the first)
    compressed_suffixes: tuple[str, ...] = ()  # written compressed (the rest raw)
    dicom_series: bool = False  # read by the DICOM scan (medseg.io.load), not as one file

    @property
    def image(self) -> bool:
        """Opened as an image (one file, or the DICOM scan)."""
        return self.image_file or self.dicom_series

    @property
    def writes(self) -> bool:
        return self.image_file or self.segmentation

    @property
    def write_suffixes(self) -> tuple[str, ...]:
        if not self.writes:
            return ()
        return self.written_suffixes or self.suffixes[:1]

    @property
    def segmentation_kind(self) -> str:
        """LABEL_MAP or DICOM_SEG (what the save plan and the batch tell apart)."""
        return DICOM_SEG if self.dicom_seg else LABEL_MAP

    def pattern(self) -> str:
        """For a file dialog: ``*.nii.gz *.nii``."""
        return " ".join(f"*{s}" for s in self.suffixes if s)


_ITK_IMAGE = dict(image_file=True, segmentation=True, label_map=True)

FILE_TYPES: tuple[FileType, ...] = (
    FileType("nii.gz", "NIfTI", (".nii.gz", ".nii"),
             "one scalar volume with its spacing, origin and orientation (stored RAS); no patient data",
             check=check_nifti, read_header=nifti_header, written_suffixes=(".nii.gz", ".nii"),
             compressed_suffixes=(".nii.gz",), **_ITK_IMAGE),
    FileType("nrrd", "NRRD", (".nrrd", ".nhdr"),
             "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a .nhdr's "
             "voxels are a separate file beside it", check=check_nrrd, read_header=nrrd_header,
             compressed_suffixes=(".nrrd",), **_ITK_IMAGE),
    FileType("mha", "MetaImage", (".mha", ".mhd"),
             "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a detached "
             "header's voxels are a separate file beside it", check=check_metaimage, read_header=metaimage_header,
             compressed_suffixes=(".mha",), **_ITK_IMAGE),
    FileType("dcm", "DICOM SEG", (".dcm",),
             "every label as a segment with its name, colour, codes and provenance, referencing the source "
             "series' images (patient and study identifiers included)", check=check_dicom, segmentation=True,
             dicom_seg=True),
    FileType("dicom", "DICOM series", (".dcm", ""),
             "the scanner's images with every header field (read only; most files have no suffix)",
             check=check_dicom, dicom_series=True),
)

BY_KEY = {t.key: t for t in FILE_TYPES}
_RANK = {t.key: index for index, t in enumerate(FILE_TYPES)}

Row = TypeVar("Row", bound=FileType)  # a FileType, or the dispatch table's FileFormat built on it


def format_of(path: str | os.PathLike, among: tuple[Row, ...] = FILE_TYPES) -> tuple[Row, str] | None:  # type: ignore[assignment]
    """(row, suffix) that ``path``'s name ends with (the longest suffix wins: ``.nii.gz``; equal lengths go
    by the table's order), among ``among`` (rows of this table or of medseg.io.formats), or None."""
    name = str(path).lower()
    rows = sorted(among, key=lambda row: _RANK[row.key])
    pairs = sorted(((suffix, row) for row in rows for suffix in row.suffixes if suffix), key=lambda p: -len(p[0]))
    for suffix, found in pairs:
        if name.endswith(suffix):
            return found, suffix
    return None


def image_types() -> tuple[FileType, ...]:
    """The formats read as one image file (the DICOM scan reads the rest)."""
    return tuple(t for t in FILE_TYPES if t.image_file)


def image_read_suffixes() -> tuple[str, ...]:
    return tuple(s for t in image_types() for s in t.suffixes)


def image_write_suffixes() -> tuple[str, ...]:
    return tuple(s for t in image_types() for s in t.write_suffixes)


def segmentation_types() -> tuple[FileType, ...]:
    """The formats a segmentation is saved in: label maps (with a sidecar) and the DICOM SEG."""
    return tuple(t for t in FILE_TYPES if t.segmentation)


def image_suffix(path: str | os.PathLike) -> str | None:
    """The recognised image-file suffix of ``path`` (".nii.gz", ".nrrd", ...), or None."""
    found = format_of(path, image_types())
    return found[1] if found else None


def image_header(path: str | os.PathLike) -> ImageHeader:
    """Read and check the header of an image file (NIfTI, NRRD, MetaImage: by its name) before a voxel is read."""
    path = Path(path)
    found = format_of(path, image_types())
    if found is None or found[0].read_header is None:
        raise ImageFormatError("not a NIfTI, NRRD or MHA/MHD file (by its name)", path=path)
    check_regular(path, path)
    return found[0].read_header(path)


# --- is a file whole? (the atomic write asks before its rename) ---------------------------------------------
# The files medseg writes that are not studies (models, settings, screenshots, archives); a study format's check
# is its row's above, which is asked first.
_OTHER_CHECKS: tuple[tuple[str, Callable[[Path], None]], ...] = (
    (".safetensors", check_safetensors), (".json", check_json), (".png", check_png),
    (".zip", check_zip), (".medseg", check_zip), (".npz", check_zip), (".pt", check_zip), (".pth", check_zip),
)


def check_complete(path: str | os.PathLike, name: str | None = None) -> None:
    """Raise IncompleteFile when ``path`` (a format told by ``name``'s suffix, default its own) is not whole."""
    path = Path(path)
    lower = (name or path.name).lower()
    try:
        size = path.stat().st_size
        found = format_of(lower)
        if found is not None:
            found[0].check(path)
            return
        for suffix, check in _OTHER_CHECKS:
            if lower.endswith(suffix):
                check(path)
                return
        if lower.endswith(".gz"):
            gzip_uncompressed_size(path)
        elif size == 0:
            raise IncompleteFile("the file is empty")
    except (OSError, struct.error, ValueError, KeyError, TypeError, IndexError) as error:
        raise IncompleteFile(f"the file cannot be checked ({type(error).__name__}: {error})"[:300]) from error
