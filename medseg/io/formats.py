"""The one table of file formats medseg opens and saves: suffix → the functions that read, write and check it.

Open, save, convert, batch, the file dialogs and the completeness check before an atomic rename all
ask this table (issue 36: "a format is added in one place"; issue 50: the table dispatches, it does
not describe); nothing else spells a format's suffixes or chooses its reader. A row says which
suffixes name the format (the first is the one medseg writes), the functions that read its header,
read it as an image or open it as a segmentation, write it, and tell whether a file of it is whole,
what it keeps of a study, and whether it holds an image, a label map, or a segmentation that must
reference its DICOM series.

A format is one row here: the dialogs' filters, ``convert``'s and ``segment``'s output checks,
``batch --format`` and the reference's format table follow.

The layers: what a file is by its name (key, suffixes, completeness check, header reader) is a row of
:mod:`medseg.io.file_types`, below the readers and writers, which ask it their suffix questions; a row
here is that row with the functions that read and write the format, so this table sits above them and
they never import it. Those functions are reached through the small functions below, which import their
module when called (SimpleITK/pydicom cost an import a DICOM load need not pay).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from medseg.io import file_types
from medseg.io.file_types import (  # noqa: F401 - re-exported: callers above medseg.io ask this table
    DICOM_SEG,
    LABEL_MAP,
    FileType,
    image_header,
    image_read_suffixes,
    image_suffix,
    image_write_suffixes,
)

if TYPE_CHECKING:
    from medseg.core.labels import Label
    from medseg.core.volume import Volume
    from medseg.io.label_files import LabelFileResult


# --- the readers and writers, imported when called ---------------------------------------------------------
def _read_image(path: Path, spacing_mm: Sequence[float] | None = None) -> Volume:
    from medseg.io.image_files import read_image

    return read_image(path, spacing_mm)


def _write_image(volume: Volume, path: Path) -> Path:
    from medseg.io.image_files import write_image

    return write_image(volume, path)


def _open_label_map(path: Path, image: Volume) -> LabelFileResult:
    from medseg.io.label_files import read_label_map

    return read_label_map(path, image)


def _write_label_map(label_map: Volume, image: Volume, path: Path, segments: list[Label] | None,
                     written_by: str) -> list[str]:
    from medseg.io.label_files import write_label_map_noted

    return write_label_map_noted(label_map, image, path, segments, written_by)


def _label_map_unchanged(path: Path) -> bool:
    from medseg.io.label_files import is_unchanged_model_label_map

    return is_unchanged_model_label_map(path)


def _is_dicom_seg(path: Path) -> bool:
    from medseg.io.dicom_seg import is_dicom_seg

    return is_dicom_seg(path)


def _open_dicom_seg(path: Path, image: Volume) -> LabelFileResult:
    from medseg.io.label_files import open_dicom_seg

    return open_dicom_seg(path, image)


def _write_dicom_seg(label_map: Volume, image: Volume, path: Path, segments: list[Label] | None,
                     written_by: str) -> list[str]:
    from medseg.io.label_files import write_dicom_seg_noted

    return write_dicom_seg_noted(label_map, image, path, segments, written_by)


def _dicom_seg_unchanged(path: Path) -> bool:
    from medseg.io.dicom_seg import is_automatic_medseg_seg

    return is_automatic_medseg_seg(path)


# --- the table ---------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class FileFormat(FileType):
    """A format's row: what a file of it is (:class:`~medseg.io.file_types.FileType`) and its functions."""

    read_image: Callable[..., Volume] | None = None  # (path, spacing_mm) -> the image
    write_image: Callable[[Volume, Path], Path] | None = None  # (volume, path) -> the file written
    # (path, image) -> LabelFileResult: the segmentation placed on the image
    open_segmentation: Callable[[Path, Volume], LabelFileResult] | None = None
    # (label_map, image, path, segments, written_by) -> notes for the user; the target was checked
    write_segmentation: Callable[..., list[str]] | None = None
    # may another model's result replace this file without --force? (a model's result nobody changed)
    unchanged_model_result: Callable[[Path], bool] | None = None
    recognise: Callable[[Path], bool] | None = None  # by content, for files whose name does not tell

    def __post_init__(self) -> None:  # the functions a row holds are the ones its file type promises
        if (self.read_image is not None, self.write_image is not None) != (self.image_file, self.image_file):
            raise ValueError(f"format {self.key}: read_image and write_image go with image_file")
        if (self.write_segmentation is not None, self.open_segmentation is not None) != (self.segmentation,) * 2:
            raise ValueError(f"format {self.key}: open_ and write_segmentation go with segmentation")

    @classmethod
    def of(cls, key: str, **functions: Callable) -> FileFormat:
        """The row of file type ``key`` (medseg.io.file_types) with ``functions``."""
        kind = file_types.BY_KEY[key]
        return cls(**{f.name: getattr(kind, f.name) for f in fields(FileType)}, **functions)


_ITK_IMAGE = dict(read_image=_read_image, write_image=_write_image, open_segmentation=_open_label_map,
                  write_segmentation=_write_label_map, unchanged_model_result=_label_map_unchanged)

FORMATS: tuple[FileFormat, ...] = (
    FileFormat.of("nii.gz", **_ITK_IMAGE),
    FileFormat.of("nrrd", **_ITK_IMAGE),
    FileFormat.of("mha", **_ITK_IMAGE),
    FileFormat.of("dcm", open_segmentation=_open_dicom_seg, write_segmentation=_write_dicom_seg,
                  unchanged_model_result=_dicom_seg_unchanged, recognise=_is_dicom_seg),
    FileFormat.of("dicom"),
)
assert tuple(f.key for f in FORMATS) == tuple(t.key for t in file_types.FILE_TYPES)  # a row for every file type

BY_KEY = {f.key: f for f in FORMATS}



# --- surface meshes (``medseg mesh --format``, the Save dialog's mesh entries): one file per label ------------
def _encode_stl(mesh: object, name: str, value: int) -> bytes:
    from medseg.io.mesh import encode_stl

    return encode_stl(mesh, name, value)


def _encode_obj(mesh: object, name: str, value: int) -> bytes:
    from medseg.io.mesh import encode_obj

    return encode_obj(mesh, name, value)


@dataclass(frozen=True)
class MeshFormat:
    key: str  # ``mesh --format``
    name: str  # for people (the Save dialog)
    suffix: str  # of each label's file
    encode: Callable[[object, str, int], bytes]  # (trimesh mesh, label name, label value) -> the file's bytes


MESH_FORMATS: tuple[MeshFormat, ...] = (
    MeshFormat("stl", "STL", ".stl", _encode_stl),
    MeshFormat("obj", "OBJ", ".obj", _encode_obj),
)


def mesh_format(key: str) -> MeshFormat | None:
    """The mesh format named ``key`` ("stl", ".OBJ"), or None."""
    key = key.lower().lstrip(".")
    return next((f for f in MESH_FORMATS if f.key == key), None)


def mesh_format_of(path: str | os.PathLike) -> MeshFormat | None:
    """The mesh format ``path``'s name ends with, or None."""
    name = str(path).lower()
    return next((f for f in MESH_FORMATS if name.endswith(f.suffix)), None)

def image_formats() -> tuple[FileFormat, ...]:
    """The formats read as one image file (the DICOM scan reads the rest)."""
    return tuple(f for f in FORMATS if f.image_file)


def segmentation_formats() -> tuple[FileFormat, ...]:
    """The formats a segmentation is saved in: label maps (with a sidecar) and the DICOM SEG."""
    return tuple(f for f in FORMATS if f.segmentation)


def format_of(path: str | os.PathLike, among: tuple[FileFormat, ...] = FORMATS) -> tuple[FileFormat, str] | None:
    """(format, suffix) that ``path``'s name ends with (the longest suffix wins: ``.nii.gz``), or None."""
    return file_types.format_of(path, among)


def segmentation_choices(from_dicom: bool) -> tuple[list[FileFormat], str]:
    """The segmentation formats a study can be saved in, and why any is left out (empty when none is)."""
    offered = [f for f in segmentation_formats() if from_dicom or not f.dicom_seg]
    left_out = [f for f in segmentation_formats() if f not in offered]
    why = ""
    if left_out:
        why = (f"{', '.join(f.name for f in left_out)} is not offered: this image was not opened from DICOM, and a "
               "DICOM SEG must reference the DICOM series it was drawn on")
    return offered, why


def open_filters() -> list[str]:
    """The Open files dialog's filters: every file first (DICOM files mostly have no suffix, and a
    ``*.dcm`` filter hid them), then each image format."""
    images = " ".join(f.pattern() for f in image_formats())
    return ["DICOM files and images (*)", f"Images ({images})", "DICOM files named .dcm (*.dcm)"]


def segmentation_open_filter() -> str:
    patterns = " ".join(f.pattern() for f in segmentation_formats() if f.label_map)
    return f"Segmentations ({patterns} *.dcm);;All files (*)"
