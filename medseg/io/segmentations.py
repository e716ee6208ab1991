"""A segmentation opened onto an image, or saved, in any format of the one table (:mod:`medseg.io.formats`).

The one way to open a segmentation (the GUI, the command line and the training datasets all call
:func:`open_segmentation`) and to save one: the file's row in the table reads or writes it. This module sits
above the table, which sits above the readers and writers (:mod:`medseg.io.label_files`, the DICOM SEG
modules): those never ask the table, so no import runs in a circle.
"""

from __future__ import annotations

import os
from pathlib import Path

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import ImageFormatError, MedsegError
from medseg.io.formats import FileFormat, format_of, segmentation_formats
from medseg.io.label_files import LabelFileResult, label_map_of_sidecar, sidecar_path
from medseg.io.output_paths import check_not_an_input, source_paths


def open_segmentation(path: str | os.PathLike, image: Volume) -> LabelFileResult:
    """The one way to open a segmentation onto ``image``: a label map with its sidecar, or a DICOM SEG.

    ``path`` may also name the sidecar itself (``X.labels.json``): the label map beside it is opened.
    The format is told by the name (a label map), else by the content (a DICOM SEG, mostly named .dcm or
    nothing); its row in :mod:`medseg.io.formats` opens it."""
    path = label_map_of_sidecar(Path(path))
    if not path.exists():
        raise ImageFormatError("no such file", path=path)
    found = format_of(path, tuple(f for f in segmentation_formats() if f.label_map))
    if found is not None:
        return found[0].open_segmentation(path, image)
    for file_format in segmentation_formats():
        if file_format.recognise is not None and file_format.recognise(path):
            return file_format.open_segmentation(path, image)
    raise MedsegError("not a segmentation: open a DICOM SEG or a NIfTI/NRRD/MHA label map", path=path)


def saved_format(path: str | os.PathLike) -> FileFormat:
    """The format a segmentation saved as ``path`` is written in (by the name's suffix); anything else is
    refused now, not after the work."""
    if not str(path).strip():
        raise ImageFormatError("no output file given (the name is empty)", hint="name the file to write, e.g. "
                                                                                "seg.nii.gz or seg.dcm")
    found = format_of(path, segmentation_formats())
    if found is not None and found[1] in found[0].write_suffixes:
        return found[0]
    raise ImageFormatError("cannot save a segmentation in this format (by its name)", path=path,
                           hint="use " + ", ".join(f"{s}{' (' + f.name + ')' if f.dicom_seg else ''}"
                                                   for f in segmentation_formats() for s in f.write_suffixes))


def segmentation_format(path: str | os.PathLike) -> str:
    """"dicom-seg" or "label-map" by the name's suffix; anything else is refused now, not after the work."""
    return saved_format(path).segmentation_kind


def segmentation_outputs(path: str | os.PathLike) -> list[Path]:
    """The files a save to ``path`` writes: the segmentation, and a label map's sidecar."""
    return [Path(path), sidecar_path(path)] if saved_format(path).label_map else [Path(path)]


def is_saved_segmentation(path: str | os.PathLike) -> bool:
    """May another model's result replace ``path`` without ``--force``? Only a model's result that medseg
    wrote and nobody changed since: a label map whose sidecar's SHA-256 matches and whose every label is
    AUTOMATIC, or a DICOM SEG medseg wrote with AUTOMATIC segments. A map a person edited is their work
    (``segment -o`` replaced a hand-edited label map with a sidecar, issue 43)."""
    return saved_format(path).unchanged_model_result(Path(path))


def save_segmentation(label_map: Volume, image: Volume, path: str | os.PathLike,
                      segments: list[Label] | None = None, written_by: str = "medseg") -> list[str]:
    """Save as DICOM SEG (.dcm) or as a label map with its sidecar; returns notes for the user.

    Never over a file the image was read from (a source slice, the CT itself). (The application's
    save, :func:`medseg.workflows.save.save_segmentation`, checks its target once before the work and
    then calls :func:`write_segmentation`.)
    """
    for output in segmentation_outputs(path):
        check_not_an_input(output, source_paths(image), "the segmentation file")
    return write_segmentation(label_map, image, path, segments, written_by)


def write_segmentation(label_map: Volume, image: Volume, path: str | os.PathLike, segments: list[Label] | None,
                       written_by: str = "medseg") -> list[str]:
    """Write a segmentation whose target was checked, atomically, by its format's row; notes for the user."""
    return saved_format(path).write_segmentation(label_map, image, Path(path), segments, written_by)
