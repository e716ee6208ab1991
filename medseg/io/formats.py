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

The header readers and completeness checks are imported here; the readers and writers of whole files
are reached through the small functions below, which import their module when called: those modules
ask this table for their suffixes (and SimpleITK/pydicom cost an import a DICOM load need not pay).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

from medseg.errors import ImageFormatError
from medseg.io.file_checks import check_dicom, check_metaimage, check_nifti, check_nrrd
from medseg.io.header_facts import ImageHeader, check_regular
from medseg.io.image_headers import nifti_header
from medseg.io.text_headers import metaimage_header, nrrd_header

if TYPE_CHECKING:
    from medseg.core.labels import Label
    from medseg.core.volume import Volume
    from medseg.io.label_files import LabelFileResult

LABEL_MAP, DICOM_SEG = "label-map", "dicom-seg"  # what a segmentation is saved as (workflows' SaveTarget.format)


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
class FileFormat:
    key: str  # short name (``batch --format``)
    name: str  # for people (dialogs, messages)
    suffixes: tuple[str, ...]  # lower case; the first is what medseg writes
    keeps: str  # what a file of this format keeps of a study
    check: Callable[[Path], None]  # raises file_checks.IncompleteFile when a file is not whole
    read_header: Callable[[Path], ImageHeader] | None = None  # an image file's header, checked (no voxel read)
    read_image: Callable[..., Volume] | None = None  # (path, spacing_mm) -> the image
    write_image: Callable[[Volume, Path], Path] | None = None  # (volume, path) -> the file written
    # (path, image) -> LabelFileResult: the segmentation placed on the image
    open_segmentation: Callable[[Path, Volume], LabelFileResult] | None = None
    # (label_map, image, path, segments, written_by) -> notes for the user; the target was checked
    write_segmentation: Callable[..., list[str]] | None = None
    # may another model's result replace this file without --force? (a model's result nobody changed)
    unchanged_model_result: Callable[[Path], bool] | None = None
    recognise: Callable[[Path], bool] | None = None  # by content, for files whose name does not tell
    label_map: bool = False  # a segmentation is written as a label map with a .labels.json sidecar
    dicom_seg: bool = False  # a DICOM Segmentation: written only for a study loaded from DICOM
    written_suffixes: tuple[str, ...] = ()  # suffixes medseg writes (default: the first)
    compressed_suffixes: tuple[str, ...] = ()  # written compressed (the rest raw)
    dicom_series: bool = False  # read by the DICOM scan (medseg.io.load), not as one file

    @property
    def image(self) -> bool:
        """Opened as an image (one file, or the DICOM scan)."""
        return self.read_image is not None or self.dicom_series

    @property
    def writes(self) -> bool:
        return self.write_image is not None or self.write_segmentation is not None

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


_ITK_IMAGE = dict(read_image=_read_image, write_image=_write_image, open_segmentation=_open_label_map,
                  write_segmentation=_write_label_map, unchanged_model_result=_label_map_unchanged, label_map=True)

FORMATS: tuple[FileFormat, ...] = (
    FileFormat("nii.gz", "NIfTI", (".nii.gz", ".nii"),
               "one scalar volume with its spacing, origin and orientation (stored RAS); no patient data",
               check=check_nifti, read_header=nifti_header, written_suffixes=(".nii.gz", ".nii"),
               compressed_suffixes=(".nii.gz",), **_ITK_IMAGE),
    FileFormat("nrrd", "NRRD", (".nrrd", ".nhdr"),
               "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a .nhdr's "
               "voxels are a separate file beside it", check=check_nrrd, read_header=nrrd_header,
               compressed_suffixes=(".nrrd",), **_ITK_IMAGE),
    FileFormat("mha", "MetaImage", (".mha", ".mhd"),
               "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a detached "
               "header's voxels are a separate file beside it", check=check_metaimage, read_header=metaimage_header,
               compressed_suffixes=(".mha",), **_ITK_IMAGE),
    FileFormat("dcm", "DICOM SEG", (".dcm",),
               "every label as a segment with its name, colour, codes and provenance, referencing the source "
               "series' images (patient and study identifiers included)", check=check_dicom,
               open_segmentation=_open_dicom_seg, write_segmentation=_write_dicom_seg,
               unchanged_model_result=_dicom_seg_unchanged, recognise=_is_dicom_seg, dicom_seg=True),
    FileFormat("dicom", "DICOM series", (".dcm", ""),
               "the scanner's images with every header field (read only; most files have no suffix)",
               check=check_dicom, dicom_series=True),
)

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

def _longest_first() -> list[tuple[str, FileFormat]]:
    pairs = [(suffix, f) for f in FORMATS for suffix in f.suffixes if suffix]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def image_formats() -> tuple[FileFormat, ...]:
    """The formats read as one image file (the DICOM scan reads the rest)."""
    return tuple(f for f in FORMATS if f.read_image is not None)


def image_read_suffixes() -> tuple[str, ...]:
    return tuple(s for f in image_formats() for s in f.suffixes)


def image_write_suffixes() -> tuple[str, ...]:
    return tuple(s for f in image_formats() for s in f.write_suffixes)


def segmentation_formats() -> tuple[FileFormat, ...]:
    """The formats a segmentation is saved in: label maps (with a sidecar) and the DICOM SEG."""
    return tuple(f for f in FORMATS if f.write_segmentation is not None)


def format_of(path: str | os.PathLike, among: tuple[FileFormat, ...] = FORMATS) -> tuple[FileFormat, str] | None:
    """(format, suffix) that ``path``'s name ends with (the longest suffix wins: ``.nii.gz``), or None."""
    name = str(path).lower()
    for suffix, found in _longest_first():
        if found in among and name.endswith(suffix):
            return found, suffix
    return None


def image_header(path: str | os.PathLike) -> ImageHeader:
    """Read and check the header of an image file (NIfTI, NRRD, MetaImage: by its name) before a voxel is read."""
    path = Path(path)
    found = format_of(path, image_formats())
    if found is None or found[0].read_header is None:
        raise ImageFormatError("not a NIfTI, NRRD or MHA/MHD file (by its name)", path=path)
    check_regular(path, path)
    return found[0].read_header(path)


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


def image_suffix(path: str | os.PathLike) -> str | None:
    """The recognised image-file suffix of ``path`` (".nii.gz", ".nrrd", ...), or None."""
    found = format_of(path, image_formats())
    return found[1] if found else None
