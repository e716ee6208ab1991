"""Write a label map as a DICOM SEG that references its source series (see :mod:`medseg.io.dicom_seg`).

On the acquired grid each frame is a label slice referencing its source image; on a grid
medseg regularised, frames keep their regular positions and reference the series.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from medseg.core.label_arrays import label_values, remap_values
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import MedsegError, SaveError
from medseg.io.atomic import atomic_path
from medseg.io.dicom_seg import MANUFACTURER, regularization_note
from medseg.io.dicom_seg_segments import segment_descriptions
from medseg.io.seg_file import save_multiframe

__all__ = ["SegWriteResult", "write_dicom_seg", "check_can_reference", "fill_blank_uids"]

CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"


@dataclass
class SegWriteResult:
    path: Path
    mode: str  # "acquired" (frames reference their source images) or "regular_grid"
    n_frames: int
    segments: list[Label]
    notes: list[str] = field(default_factory=list)


_PER_IMAGE_TAGS = [
    "SpecificCharacterSet", "SOPClassUID", "SOPInstanceUID", "StudyInstanceUID", "SeriesInstanceUID",
    "FrameOfReferenceUID", "Modality", "InstanceNumber", "ImagePositionPatient", "ImageOrientationPatient",
    "PixelSpacing", "SliceThickness", "SpacingBetweenSlices", "Rows", "Columns", "NumberOfFrames", "ImageType",
    "SamplesPerPixel", "PhotometricInterpretation", "BitsAllocated", "PatientID", "PatientName", "StudyID",
    "AccessionNumber", "StudyDate", "StudyTime", "PatientBirthDate", "PatientSex", "ReferringPhysicianName",
    "PerFrameFunctionalGroupsSequence", "SharedFunctionalGroupsSequence",
]


def check_can_reference(image: Volume, path: str | os.PathLike | None = None) -> None:
    """A DICOM SEG needs the DICOM series it was drawn on; say so before any work is done."""
    if not image.meta.source_files or image.meta.extra.get("format"):
        raise SaveError("a DICOM SEG must reference the DICOM series it was drawn on, and this image was not "
                        "loaded from DICOM", path=path, hint="save as NIfTI or NRRD instead")


def _source_datasets(image: Volume) -> list[Any]:
    import pydicom

    from medseg.io.dicom_sources import open_ref

    refs = list(dict.fromkeys(image.meta.source_files))  # a multi-frame file is named per frame
    if not refs:
        raise SaveError("a DICOM SEG must reference the DICOM series it was drawn on, and this image was not "
                        "loaded from DICOM", hint="save as NIfTI or NRRD instead")
    datasets = []
    for index, ref in enumerate(refs):
        try:
            with open_ref(ref) as handle:
                # The first image gives the patient, study and equipment; the others only what frames and
                # references need (reading every header in full was a fifth of the time for 300 slices).
                datasets.append(pydicom.dcmread(handle, stop_before_pixels=True,
                                                specific_tags=None if index == 0 else _PER_IMAGE_TAGS))
        except MedsegError:
            raise
        except Exception as error:  # the source moved, was deleted or is unreadable
            raise SaveError(f"cannot read the source image to reference it ({error})", path=ref,
                            hint="the DICOM series must still be where it was opened from") from error
    return datasets


def fill_blank_uids(datasets: list[Any], notes: list[str]) -> None:
    """Stand-in UIDs for a series anonymised down to empty UIDs (derived from the files, so stable)."""
    from pydicom.uid import generate_uid

    names = sorted(str(getattr(ds, "filename", "") or i) for i, ds in enumerate(datasets))
    seed = "|".join(Path(n).name for n in names)
    filled = []
    for keyword, scope in (("StudyInstanceUID", "study"), ("SeriesInstanceUID", "series"),
                           ("FrameOfReferenceUID", "frame-of-reference")):
        if any(not str(ds.get(keyword, "") or "") for ds in datasets):
            uid = generate_uid(entropy_srcs=["medseg", scope, seed])
            for ds in datasets:
                if not str(ds.get(keyword, "") or ""):
                    setattr(ds, keyword, uid)
            filled.append(keyword)
    for index, ds in enumerate(datasets):
        if "SpecificCharacterSet" in ds and not ds.SpecificCharacterSet:
            del ds.SpecificCharacterSet  # an empty value means the default repertoire
        if not str(ds.get("SOPInstanceUID", "") or ""):
            ds.SOPInstanceUID = generate_uid(entropy_srcs=["medseg", "instance", seed,
                                                           Path(str(getattr(ds, "filename", index))).name])
            if "SOPInstanceUID" not in filled:
                filled.append("SOPInstanceUID")
        if not str(ds.get("SOPClassUID", "") or ""):
            ds.SOPClassUID = CT_IMAGE_STORAGE
            if "SOPClassUID" not in filled:
                filled.append("SOPClassUID")
        for keyword in ("PatientID", "StudyID", "AccessionNumber", "PatientName", "PatientBirthDate",
                        "PatientSex", "StudyDate", "StudyTime", "ReferringPhysicianName"):
            if keyword not in ds:
                setattr(ds, keyword, None)
    if filled:
        notes.append("the source series has empty " + ", ".join(filled) + "; the SEG references stand-in UIDs "
                     "derived from the file names, so a PACS will not link it to the series (medseg places it "
                     "by position)")


def _acquired_order(image: Volume, datasets: list[Any]) -> tuple[list[Any], list[int]] | None:
    """Source datasets and the label-map slice of each frame, when the grid is the acquired one."""
    if not image.meta.extra.get("raw_stack", True):
        return None  # resampled onto a regular grid: no slice is an acquired image
    n_slices = image.shape_zyx[0]
    frames = image.meta.extra.get("frames")
    if len(datasets) == 1 and frames and len(frames) == n_slices:
        # One multi-frame source: highdicom matches frame i of the SEG to source frame i.
        order = [0] * n_slices
        for z, frame in enumerate(frames):
            order[int(frame)] = z
        return datasets, order
    if len(datasets) == n_slices and len(image.meta.source_files) == n_slices:
        return datasets, list(range(n_slices))
    return None


def _regular_volume(label_array: np.ndarray, image: Volume, frame_of_reference_uid: str) -> Any:
    import highdicom as hd

    sx, sy, sz = image.spacing_mm
    d = image.direction
    affine = np.eye(4)
    # highdicom's affine maps (slice, row, column) indices; ours are (x=column, y=row, z=slice).
    affine[:3, 0] = d[:, 2] * sz
    affine[:3, 1] = d[:, 1] * sy
    affine[:3, 2] = d[:, 0] * sx
    affine[:3, 3] = image.origin_mm
    return hd.Volume(label_array, affine, "PATIENT", frame_of_reference_uid=frame_of_reference_uid)


def write_dicom_seg(
    label_map: Volume,
    image: Volume,
    path: str | os.PathLike,
    segments: list[Label] | None = None,
    series_description: str = "medseg segmentation",
    software_version: str | None = None,
    finish: Callable[[Any], Any] | None = None,
) -> SegWriteResult:
    """Write ``label_map`` (on ``image``'s grid) as a DICOM SEG referencing ``image``'s series.

    ``finish`` is called on the finished SEG dataset just before it is written (e.g.
    :meth:`medseg.io.deidentify.Deidentifier.dataset` for a research export).
    """
    import highdicom as hd

    from medseg import __version__

    path = Path(path)
    if not label_map.same_grid(image):
        raise SaveError("the segmentation is not on the image's grid", path=path)
    if not path.parent.is_dir():
        raise SaveError("the folder does not exist", path=path.parent, hint="create it or choose another folder")
    array = np.asarray(label_map.array)
    present = label_values(array)
    given = {s.value: s for s in (segments or [])}
    described = label_map.meta.labels
    infos = [given.get(v) or described.get(v) or Label(v) for v in present]
    if not infos:
        raise SaveError("the segmentation is empty: there is nothing to save as DICOM SEG", path=path,
                        hint="draw or segment something first, or save a NIfTI label map")
    notes: list[str] = []
    check_can_reference(image, path)
    datasets = _source_datasets(image)
    fill_blank_uids(datasets, notes)
    if any("SliceThickness" not in ds or not ds.SliceThickness for ds in datasets):
        for ds in datasets:
            if "SliceThickness" not in ds or not ds.SliceThickness:
                ds.SliceThickness = round(image.spacing_mm[2], 4)  # highdicom needs it for the pixel measures
        notes.append(f"the source images have no Slice Thickness; the SEG records the slice step "
                     f"({image.spacing_mm[2]:.3f} mm)")

    lut = np.zeros(int(array.max()) + 1, dtype=label_dtype(len(infos)))
    for number, info in enumerate(infos, start=1):
        lut[info.value] = number
    numbered = remap_values(array, lut)
    if any(info.value != number for number, info in enumerate(infos, start=1)):
        notes.append("segments are numbered 1..N as DICOM requires (" +
                     ", ".join(f"label {info.value} is segment {n}" for n, info in enumerate(infos, start=1)
                               if info.value != n) +
                     "); each segment's description records its label value, which medseg restores on opening")

    # The source's own Spacing Between Slices can be stale (copied headers, overlapping reconstructions)
    # and highdicom copies it over the pixel measures it is given: without it, highdicom states the step
    # the frames' positions really have, and none where the acquired steps vary.
    for dataset in datasets:
        if "SpacingBetweenSlices" in dataset:
            del dataset.SpacingBetweenSlices
    acquired = _acquired_order(image, datasets)
    regular = regularization_note(image)
    if acquired is not None:
        sources, order = acquired
        pixel_array: Any = numbered if order == list(range(len(order))) else numbered[order]
        mode = "acquired"
    else:
        sources = datasets
        pixel_array = _regular_volume(numbered, image, str(datasets[0].FrameOfReferenceUID))
        mode = "regular_grid"
        notes.append("frames are on medseg's regular grid with their own positions; they reference the source "
                     "series, not single images")
    comment = _comment(image, regular, mode)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # highdicom warns about optional attributes our sources lack
        try:
            seg = hd.seg.Segmentation(
                source_images=sources,
                pixel_array=pixel_array,
                segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
                segment_descriptions=segment_descriptions(infos),
                series_instance_uid=hd.UID(),
                series_number=int(_series_number(datasets)),
                sop_instance_uid=hd.UID(),
                instance_number=1,
                manufacturer=MANUFACTURER,
                manufacturer_model_name="medseg",
                software_versions=software_version or __version__,
                device_serial_number="0",
                series_description=series_description[:64],
                content_label="SEGMENTATION",
                content_description=(series_description or "")[:64] or None,
            )
        except MedsegError:
            raise
        except Exception as error:  # highdicom validates many things; name the file
            raise SaveError(f"cannot build the DICOM SEG ({type(error).__name__}: {error})"[:500], path=path) from error
    seg.ImageComments = comment[:10240]
    if finish is not None:
        finish(seg)
    with atomic_path(path, suffix=".dcm") as temp:
        save_multiframe(seg, temp)  # pydicom's bytes, each shared per-frame item encoded once
    return SegWriteResult(path, mode, int(seg.NumberOfFrames), infos, notes)


def _series_number(datasets: list[Any]) -> int:
    try:
        return int(datasets[0].get("SeriesNumber") or 0) + 1000
    except (TypeError, ValueError):
        return 1000


def _comment(image: Volume, regular: dict | None, mode: str) -> str:
    if regular is None:
        return "medseg: frames are on the acquired slices and reference their source images."
    # Read by people (a PACS viewer shows it): the finding's clinical sentence, not its details.
    return (f"medseg: the source series was regularised before segmentation. {regular.get('message', '')} "
            "The segmentation's frames lie on that regular grid, each with its own Image Position (Patient); "
            "place them by position, not by source image.")
