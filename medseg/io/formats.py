"""The one table of file formats medseg opens and saves: suffix → reader, writer, what it keeps.

Open, save, convert, batch and the file dialogs all ask this table (issue 36: "a format is added in
one place"); nothing else spells a format's suffixes. A row says which suffixes name the format
(the first is the one medseg writes), what reads and writes it, what it keeps of a study, and
whether it holds an image, a label map, or a segmentation that must reference its DICOM series.

A format is added here and in the reader/writer named: the dialogs' filters, ``convert``'s and
``segment``'s output checks and ``batch --format`` follow.
"""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class FileFormat:
    key: str  # short name (``batch --format``)
    name: str  # for people (dialogs, messages)
    suffixes: tuple[str, ...]  # lower case; the first is what medseg writes
    reader: str  # the function that reads it
    writer: str  # the function that writes it ("" when medseg does not write it)
    keeps: str  # what a file of this format keeps of a study
    image: bool = False  # opened as an image (read_image / the DICOM scan)
    label_map: bool = False  # written as a label map with a .labels.json sidecar
    dicom_seg: bool = False  # a DICOM Segmentation: written only for a study loaded from DICOM
    written_suffixes: tuple[str, ...] = ()  # suffixes medseg writes (default: the first)

    @property
    def write_suffixes(self) -> tuple[str, ...]:
        if not self.writer:
            return ()
        return self.written_suffixes or self.suffixes[:1]

    def pattern(self) -> str:
        """For a file dialog: ``*.nii.gz *.nii``."""
        return " ".join(f"*{s}" for s in self.suffixes if s)


FORMATS: tuple[FileFormat, ...] = (
    FileFormat("nii.gz", "NIfTI", (".nii.gz", ".nii"),
               "medseg.io.image_files.read_image (SimpleITK; NIfTI-2 with nibabel)",
               "medseg.io.image_files.write_image",
               "one scalar volume with its spacing, origin and orientation (stored RAS); no patient data",
               image=True, label_map=True, written_suffixes=(".nii.gz", ".nii")),
    FileFormat("nrrd", "NRRD", (".nrrd", ".nhdr"), "medseg.io.image_files.read_image (SimpleITK)",
               "medseg.io.image_files.write_image",
               "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a .nhdr's "
               "voxels are a separate file beside it", image=True, label_map=True),
    FileFormat("mha", "MetaImage", (".mha", ".mhd"), "medseg.io.image_files.read_image (SimpleITK)",
               "medseg.io.image_files.write_image",
               "one scalar volume with its spacing, origin and orientation (LPS); no patient data; a detached "
               "header's voxels are a separate file beside it", image=True, label_map=True),
    FileFormat("dcm", "DICOM SEG", (".dcm",), "medseg.io.dicom_seg.read_dicom_seg",
               "medseg.io.dicom_seg.write_dicom_seg",
               "every label as a segment with its name, colour, codes and provenance, referencing the source "
               "series' images (patient and study identifiers included)", dicom_seg=True),
    FileFormat("dicom", "DICOM series", (".dcm", ""), "medseg.io.dicom_scan.scan + medseg.io.dicom_load.load_series",
               "", "the scanner's images with every header field (read only; most files have no suffix)", image=True),
)

BY_KEY = {f.key: f for f in FORMATS}


def _longest_first() -> list[tuple[str, FileFormat]]:
    pairs = [(suffix, f) for f in FORMATS for suffix in f.suffixes if suffix]
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def image_formats() -> tuple[FileFormat, ...]:
    """The formats read as an image file (the DICOM scan reads the rest)."""
    return tuple(f for f in FORMATS if f.image and f.key != "dicom")


def image_read_suffixes() -> tuple[str, ...]:
    return tuple(s for f in image_formats() for s in f.suffixes)


def image_write_suffixes() -> tuple[str, ...]:
    return tuple(s for f in image_formats() for s in f.write_suffixes)


def segmentation_formats() -> tuple[FileFormat, ...]:
    """The formats a segmentation is saved in: label maps (with a sidecar) and the DICOM SEG."""
    return tuple(f for f in FORMATS if (f.label_map or f.dicom_seg) and f.writer)


def format_of(path: str | os.PathLike, among: tuple[FileFormat, ...] = FORMATS) -> tuple[FileFormat, str] | None:
    """(format, suffix) that ``path``'s name ends with (the longest suffix wins: ``.nii.gz``), or None."""
    name = str(path).lower()
    for suffix, found in _longest_first():
        if found in among and name.endswith(suffix):
            return found, suffix
    return None


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
