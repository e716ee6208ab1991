"""DICOM Segmentation (SEG) objects, written and read with highdicom, exact in patient space.

Writing (:func:`write_dicom_seg`): a BINARY SEG that references the source series, with
one segment per label (label, CIELab colour, the label's coded category/type with its modifier
and anatomic region — DCM "Unspecified" for a label nobody coded —, algorithm type and
identification). Which frames reference what depends on the grid the label map lives on:

- **acquired grid** (the usual case, and a raw stack kept as acquired): frame *k* is label
  slice *k*; it carries its source image's own Image Position/Orientation and references
  that image (Derivation Image Sequence). Exact by construction.
- **regularised grid** (medseg resampled a tilted / gapped / variably spaced series onto a
  regular grid, see :mod:`medseg.io.regularize`): the mask is *not* resampled back onto
  the acquired slices (that would be a second interpolation and lose voxels drawn
  between acquired planes). Frames are written on the regular grid, each with its own
  Plane Position, and reference the source series (Referenced Series Sequence) but no
  single source image. Image Comments record what was regularised and how. Any reader
  that places frames by their positions (highdicom, 3D Slicer, medseg) puts every voxel
  exactly where it was drawn.

Segment numbers must run 1..N in DICOM, so segment *n* holds the *n*-th label value in
ascending order; each segment's Segment Description (0062,0006, a standard attribute)
records its label value as ``medseg label value V``, and the reader gives the segments
those values back. Names, colours, codes and provenance travel as segment attributes.

Reading (:func:`read_dicom_seg`): every frame is placed by its own Image Position and
Orientation into the loaded image (never by array index). Frames that lie on an image
slice with the same pixel grid are pasted exactly; parallel frames elsewhere are
placed by nearest plane and nearest pixel; oblique SEGs are resampled (nearest). Label
values are the recorded ones when every segment records one (medseg's SEGs), else the
segment numbers, and a note says that the SEG was numbered by its segments.
"""

from __future__ import annotations

import os
import re
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

import numpy as np

from medseg.errors import GeometryError, MedsegError, SaveError
from medseg.io.atomic import atomic_path
from medseg.io.seg_file import save_multiframe
from medseg.core.label_arrays import label_values, remap_values
from medseg.core.label_values import MAX_LABEL_VALUE, label_dtype
from medseg.core.labels import Code, Label, Provenance, uncoded
from medseg.core.volume import Volume, VolumeMeta

__all__ = ["SegWriteResult", "SegReadResult", "write_dicom_seg", "read_dicom_seg", "is_dicom_seg",
           "regularization_note", "check_can_reference", "LABEL_VALUE_PREFIX"]

# A segment's Segment Description names its label value, so a round trip keeps the value scheme.
LABEL_VALUE_PREFIX = "medseg label value "
_LABEL_VALUE = re.compile(r"^\s*medseg label value (\d+)\s*$")

MANUFACTURER = "medseg"
CT_IMAGE_STORAGE = "1.2.840.10008.5.1.4.1.1.2"
POSITION_TOLERANCE_VOXEL = 0.05  # of a voxel: rounding in DS strings is far below this


@dataclass
class SegWriteResult:
    path: Path
    mode: str  # "acquired" (frames reference their source images) or "regular_grid"
    n_frames: int
    segments: list[Label]
    notes: list[str] = field(default_factory=list)


@dataclass
class SegReadResult:
    label_map: Volume  # on the image's grid
    segments: list[Label]  # value = the label value in label_map
    notes: list[str] = field(default_factory=list)
    placement: str = "exact"  # "exact", "nearest_plane" or "resampled"
    values_restored: bool = True  # False: the SEG recorded no label values; they are its segment numbers


def is_dicom_seg(path: str | os.PathLike) -> bool:
    path = Path(path)
    if not path.is_file():
        return False
    import pydicom

    try:
        dataset = pydicom.dcmread(str(path), stop_before_pixels=True, specific_tags=["Modality", "SOPClassUID"])
    except Exception:  # noqa: BLE001 - not DICOM at all
        return False
    return str(dataset.get("Modality", "")) == "SEG"


def is_automatic_medseg_seg(path: str | os.PathLike) -> bool:
    """A DICOM SEG medseg wrote whose every segment is a model's, untouched (SegmentAlgorithmType AUTOMATIC)."""
    path = Path(path)
    if not path.is_file():
        return False
    import pydicom

    try:
        dataset = pydicom.dcmread(str(path), stop_before_pixels=True)
        segments = list(dataset.get("SegmentSequence") or [])
        return (str(dataset.get("Modality", "")) == "SEG" and str(dataset.get("Manufacturer", "")) == MANUFACTURER
                and bool(segments) and all(str(s.get("SegmentAlgorithmType", "")) == "AUTOMATIC" for s in segments))
    except Exception:  # noqa: BLE001 - not a readable SEG: not one medseg may replace
        return False


def regularization_note(image: Volume) -> dict | None:
    """What medseg did to the acquired geometry (None when the grid is the acquired one)."""
    for finding in image.meta.findings:
        if finding.kind == "regularized":
            return {"message": finding.message, **{k: v for k, v in finding.details.items()}}
    return None


# --------------------------------------------------------------------------------------------
# Writing


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
        except Exception as error:  # noqa: BLE001 - the source moved, was deleted or is unreadable
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


def _segment_descriptions(segments: list[Label]) -> list[Any]:
    import highdicom as hd
    from pydicom.sr.codedict import codes
    from pydicom.sr.coding import Code as DicomCode

    descriptions = []
    for number, label in enumerate(segments, start=1):
        made_by = label.provenance
        algorithm = None
        if made_by.algorithm_type != "MANUAL":
            algorithm = hd.AlgorithmIdentificationSequence(
                name=made_by.algorithm_name[:64], family=codes.cid7162.ArtificialIntelligence,
                version=(made_by.algorithm_version or "unknown")[:64])
        r, g, b = label.color or (128, 128, 128)
        category, type_ = label.concept()
        description = hd.seg.SegmentDescription(
            segment_number=number,
            segment_label=label.name[:64],
            segmented_property_category=DicomCode(category.value, category.scheme, category.meaning),
            segmented_property_type=DicomCode(type_.value, type_.scheme, type_.meaning),
            algorithm_type=made_by.algorithm_type,
            algorithm_identification=algorithm,
            display_color=hd.color.CIELabColor.from_rgb(r, g, b),
        )
        description.SegmentDescription = f"{LABEL_VALUE_PREFIX}{label.value}"
        _add_modifiers(description, label, type_)
        descriptions.append(description)
    return descriptions


# SNOMED CT laterality qualifiers (CID 244 "Laterality"): a type modifier from this set is also written as
# the anatomic region's modifier, so readers that look there (rather than at the type) see the side too.
LATERALITY = {"7771000": "Left", "24028007": "Right", "51440002": "Bilateral"}


def _concept(code: Code) -> Any:
    from highdicom.sr.coding import CodedConcept

    return CodedConcept(code.value, code.scheme, code.meaning)


def _add_modifiers(description: Any, label: Label, type_: Code) -> None:
    """The label's type modifier, anatomic region and region modifier, nested as PS3.3 C.8.20.4 nests them.

    A laterality that modifies the type (TotalSegmentator's "Kidney" + "Right") is also stated as the
    modifier of an anatomic region that is the type itself; :func:`_read_segments` folds that back.
    """
    modifier, region, region_modifier = label.modifier, label.region, label.region_modifier
    if modifier is not None:
        description.SegmentedPropertyTypeCodeSequence[0].SegmentedPropertyTypeModifierCodeSequence = \
            [_concept(modifier)]
        if region is None and modifier.scheme == "SCT" and modifier.value in LATERALITY:
            region, region_modifier = type_, modifier
    if region is not None:
        item = _concept(region)
        if region_modifier is not None:
            item.AnatomicRegionModifierSequence = [_concept(region_modifier)]
        description.AnatomicRegionSequence = [item]


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
                segment_descriptions=_segment_descriptions(infos),
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
        except Exception as error:  # noqa: BLE001 - highdicom validates many things; name the file
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


# --------------------------------------------------------------------------------------------
# Reading


@dataclass
class _Frame:
    index: int  # 0-based frame index in the SEG
    segment: int
    position: np.ndarray
    row_dir: np.ndarray  # direction of increasing column index
    col_dir: np.ndarray  # direction of increasing row index
    spacing_rc: tuple[float, float]  # (between rows, between columns) in mm


def _item(sequence_holder: Any, keyword: str) -> Any:
    if sequence_holder is None or keyword not in sequence_holder:
        return None
    sequence = sequence_holder[keyword].value
    return sequence[0] if sequence else None


def _frames(seg: Any) -> list[_Frame]:
    shared = _item(seg, "SharedFunctionalGroupsSequence")
    per_frame = seg.get("PerFrameFunctionalGroupsSequence") or [None] * int(seg.get("NumberOfFrames", 1))
    labelmap = str(seg.get("SegmentationType", "")) == "LABELMAP"
    frames = []
    for index, groups in enumerate(per_frame):
        def pick(keyword: str) -> Any:
            return _item(groups, keyword) or _item(shared, keyword)
        position = pick("PlanePositionSequence")
        orientation = pick("PlaneOrientationSequence")
        measures = pick("PixelMeasuresSequence")
        identification = pick("SegmentIdentificationSequence")
        if position is None or orientation is None or measures is None:
            raise GeometryError(f"frame {index + 1} of the SEG has no position, orientation or pixel spacing; it "
                                "cannot be placed in patient space")
        iop = np.asarray([float(v) for v in orientation.ImageOrientationPatient], dtype=np.float64)
        row_dir = iop[:3] / np.linalg.norm(iop[:3])
        col_dir = iop[3:] / np.linalg.norm(iop[3:])
        spacing = [float(v) for v in measures.PixelSpacing]
        segment = 0 if labelmap else int(identification.ReferencedSegmentNumber) if identification else 1
        frames.append(_Frame(index, segment, np.asarray([float(v) for v in position.ImagePositionPatient]),
                             row_dir, col_dir, (spacing[0], spacing[1])))
    return frames


def _slice_planes(image: Volume) -> np.ndarray:
    """The true position of each image slice's first voxel (acquired positions for a raw stack)."""
    positions = image.meta.extra.get("slice_positions_mm")
    if positions is not None and len(positions) == image.shape_zyx[0]:
        return np.asarray(positions, dtype=np.float64)
    k = np.arange(image.shape_zyx[0], dtype=np.float64)
    return np.asarray(image.origin_mm) + np.outer(k * image.spacing_mm[2], image.direction[:, 2])


def read_dicom_seg(path: str | os.PathLike, image: Volume) -> SegReadResult:
    """A DICOM SEG placed onto ``image``'s grid by every frame's own position and orientation.

    A malformed SEG (a code item without its value, a frame group missing, a wrong type found
    by fuzzing) is a GeometryError naming the file, never another exception.
    """
    from medseg.io.pydicom_decoders import use_permissive_decoders

    use_permissive_decoders()  # highdicom decodes the frames through pydicom: never with a plugin that aborts
    try:
        return _read_dicom_seg(path, image)
    except MedsegError:
        raise
    except MemoryError as error:
        raise GeometryError("the DICOM SEG declares more frames or pixels than fit in memory", path=path) from error
    except Exception as error:  # noqa: BLE001 - pydicom datasets raise many types on malformed content
        raise GeometryError(f"the DICOM SEG is malformed ({type(error).__name__}: {error})"[:400], path=path,
                            hint="export it again from the program that made it") from error


def _read_dicom_seg(path: str | os.PathLike, image: Volume) -> SegReadResult:
    import pydicom

    path = Path(path)
    if not path.is_file():
        raise GeometryError("no such file", path=path)
    try:
        seg = pydicom.dcmread(str(path))
    except Exception as error:  # noqa: BLE001 - pydicom raises many types for a broken file
        raise GeometryError(f"cannot read the DICOM file ({type(error).__name__}: {error})"[:400], path=path) from error
    if str(seg.get("Modality", "")) != "SEG" or "SegmentSequence" not in seg or "PixelData" not in seg:
        raise GeometryError("not a DICOM Segmentation object (no segments or no pixel data)", path=path,
                            hint="open a DICOM SEG or a NIfTI/NRRD/MHA label map")
    _check_frame_count(seg, path)
    kind = str(seg.get("SegmentationType", "") or "")
    if kind not in ("BINARY", "FRACTIONAL", "LABELMAP"):
        raise GeometryError(f"its Segmentation Type is {kind[:40]!r}, not BINARY, FRACTIONAL or LABELMAP", path=path)
    source = _FrameSource(seg, path)
    if str(seg.get("SegmentationType", "")) == "FRACTIONAL":
        threshold = 0.5 * float(seg.get("MaximumFractionalValue", 255))
    else:
        threshold = 0.5
    segments = _read_segments(seg)
    numbers_given = [s.value for s in segments]
    if not segments or min(numbers_given) < 1 or len(set(numbers_given)) != len(numbers_given):
        raise GeometryError("its segments are not numbered 1, 2, ... once each" if segments else "it has no segments",
                            path=path, hint="export the SEG again from the program that made it")
    notes: list[str] = []
    seg_for = str(seg.get("FrameOfReferenceUID", "") or "")
    image_for = image.meta.frame_of_reference_uid
    if seg_for and image_for and seg_for != image_for:
        raise GeometryError("the SEG belongs to another frame of reference (another scan or patient position) "
                            "than the open image", path=path, hint="open the series it was drawn on")
    notes.extend(_reference_notes(seg, image))
    try:
        frames = _frames(seg)
    except GeometryError as error:
        raise GeometryError(error.message, path=path) from error
    numbers = [s.value for s in segments]  # the segment numbers, until the recorded values replace them
    unknown = sorted({f.segment for f in frames} - set(numbers) - {0})
    if unknown:
        raise GeometryError(f"frames refer to segment {unknown[0]}, which the SEG does not describe", path=path,
                            hint="export the SEG again from the program that made it")
    label = np.zeros(image.shape_zyx, dtype=label_dtype(max(numbers, default=0)))
    planes = _slice_planes(image)
    normal = image.direction[:, 2]
    row_dir, col_dir = image.direction[:, 0], image.direction[:, 1]
    sx, sy, _ = image.spacing_mm
    parallel = all(abs(float(np.dot(f.row_dir, row_dir))) > 0.9999 and abs(float(np.dot(f.col_dir, col_dir))) > 0.9999
                   for f in frames)
    placement = "exact"
    if not parallel:
        label, placement = _resampled(source.highdicom(), image, label.dtype, path), "resampled"
        notes.append("the SEG's planes are oblique to the image's: resampled onto the image (nearest neighbour)")
    else:
        along_planes = planes @ normal
        step = _typical_step(along_planes, image.spacing_mm[2])
        frame_planes = _frame_planes(frames, normal)
        outside = 0
        inexact = 0
        overlaps: dict[tuple[int, int], int] = {}  # (earlier segment, later segment) -> voxels the later one took
        for frame in frames:
            pixels = source.frame(frame.index, threshold)
            if not pixels.any():
                continue
            along = float(frame.position @ normal)
            k_near = int(np.argmin(np.abs(along_planes - along)))
            # A frame covers the image slices nearer to it than to any other frame (one slice when the SEG
            # has the image's planes; several when its planes are sparser, e.g. drawn on acquired slices).
            targets = _nearest_slices(along_planes, along, frame_planes)
            if abs(along_planes[k_near] - along) > POSITION_TOLERANCE_VOXEL * step or len(targets) > 1:
                inexact += 1
            if not targets:
                outside += 1
                continue
            for k in targets:
                if not _paste(label[k], pixels, frame, planes[k], row_dir, col_dir, sx, sy, frame.segment, overlaps):
                    outside += 1
        if inexact:
            placement = "nearest_plane"
            notes.append(f"{inexact} SEG frames do not coincide with the image's slices: each was placed on the "
                         "image slices nearest to it")
        if outside:
            notes.append(f"{outside} SEG frames lie (partly) outside the open image and were cut")
        if overlaps:
            named = {s.value: s.name for s in segments}
            notes.append("overlapping segments (one label per voxel: the later segment kept): " + ", ".join(
                f"{named.get(a, a)}/{named.get(b, b)} {n} voxels" for (a, b), n in sorted(overlaps.items())))
    if not label.any():
        raise GeometryError("no voxel of the SEG falls inside the open image", path=path,
                            hint="open the series it was drawn on")
    values = _recorded_values(seg, numbers)
    if values is not None:
        top = max(values.values())
        lut = np.zeros(max(numbers) + 1, dtype=label_dtype(top))
        for number, value in values.items():
            lut[number] = value
        label = remap_values(label, lut)
        segments = [replace(s, value=values[s.value]) for s in segments]
    label_map = image.with_array(label)
    label_map.meta = VolumeMeta(modality="SEG", labels={s.value: s for s in segments}, source_files=[str(path)],
                                frame_of_reference_uid=seg_for, extra={"format": "dicom-seg",
                                                                       "image_comments": str(seg.get("ImageComments", ""))})
    return SegReadResult(label_map, segments, notes, placement, values is not None)


def _check_frame_count(seg: Any, path: Path) -> None:
    """Number of Frames, the per-frame groups and the pixel data must agree: a SEG saying 300 frames with
    3 present was measured over the 3 without a word."""
    try:
        declared = int(seg.get("NumberOfFrames", 1) or 0)
    except (TypeError, ValueError):
        raise GeometryError(f"its Number of Frames {seg.get('NumberOfFrames')!r} is not a number", path=path) from None
    if declared < 1:
        raise GeometryError(f"its Number of Frames is {declared}: a SEG has at least one frame", path=path)
    per_frame = seg.get("PerFrameFunctionalGroupsSequence")
    if per_frame is not None and len(per_frame) != declared:
        raise GeometryError(f"it declares {declared} frames but describes {len(per_frame)} (Per-frame Functional "
                            "Groups): frames are missing or the header is corrupt", path=path,
                            hint="export the SEG again from the program that made it")
    syntax = getattr(getattr(seg, "file_meta", None), "TransferSyntaxUID", None)
    if syntax is not None and not syntax.is_compressed:
        rows, columns = int(seg.Rows), int(seg.Columns)
        bits = int(seg.get("BitsAllocated", 1) or 1)
        needed = (declared * rows * columns * bits + 7) // 8
        present = len(seg.PixelData)
        if present < needed:
            raise GeometryError(f"its pixel data holds {present} bytes; its {declared} frames of {columns} x {rows} "
                                f"need {needed}: the file is cut short or its header is corrupt", path=path)


def _reference_notes(seg: Any, image: Volume) -> list[str]:
    """A SEG drawn on another series of the same scan is placed by patient coordinates; say so."""
    referenced = set()
    for item in seg.get("ReferencedSeriesSequence") or []:
        uid = str(item.get("SeriesInstanceUID", "") or "")
        if uid:
            referenced.add(uid)
    if referenced and image.meta.series_uid and image.meta.series_uid not in referenced:
        return [f"the SEG was drawn on another series ({', '.join(sorted(referenced))[:120]}) than the open one; it is "
                "placed by patient coordinates (the same frame of reference)"]
    return []


def _recorded_values(seg: Any, numbers: list[int]) -> dict[int, int] | None:
    """Segment number -> label value, when every segment records a distinct value (medseg's SEGs)."""
    values = {}
    for item in seg.SegmentSequence:
        match = _LABEL_VALUE.match(str(item.get("SegmentDescription", "") or ""))
        if match is None:
            return None
        values[int(item.SegmentNumber)] = int(match.group(1))
    if sorted(values) != sorted(numbers) or len(set(values.values())) != len(values) \
            or not all(1 <= v <= MAX_LABEL_VALUE for v in values.values()):
        return None
    return values


def _read_segments(seg: Any) -> list[Label]:
    import highdicom as hd

    infos = []
    for item in seg.SegmentSequence:
        number = int(item.SegmentNumber)
        color = None
        if "RecommendedDisplayCIELabValue" in item:
            try:
                color = hd.color.CIELabColor.from_dicom_value(item.RecommendedDisplayCIELabValue).to_rgb(clip=True)
            except Exception:  # noqa: BLE001 - an odd colour is not worth refusing the segment
                color = None

        def coded(keyword: str) -> Code | None:
            code = _item(item, keyword)
            return Code(str(code.CodeValue), str(code.CodingSchemeDesignator), str(code.CodeMeaning)) if code else None

        type_item = _item(item, "SegmentedPropertyTypeCodeSequence")
        modifier = _code(_item(type_item, "SegmentedPropertyTypeModifierCodeSequence")) if type_item else None
        region_item = _item(item, "AnatomicRegionSequence")
        region = _code(region_item)
        region_modifier = _code(_item(region_item, "AnatomicRegionModifierSequence")) if region_item else None
        if modifier is not None and region == _code(type_item) and region_modifier == modifier:
            region = region_modifier = None  # the laterality medseg also writes as the region's (_add_modifiers)
        algorithm = _item(item, "SegmentationAlgorithmIdentificationSequence")
        made_by = Provenance(
            str(item.get("SegmentAlgorithmType", "MANUAL")),
            str(item.get("SegmentAlgorithmName", "") or (algorithm.get("AlgorithmName", "") if algorithm else "")),
            str(algorithm.get("AlgorithmVersion", "") if algorithm else ""))
        category, type_ = uncoded(coded("SegmentedPropertyCategoryCodeSequence"),
                                  coded("SegmentedPropertyTypeCodeSequence"))
        infos.append(Label(
            number, str(item.get("SegmentLabel", "") or f"segment {number}"),
            tuple(int(c) for c in color) if color is not None else None,  # type: ignore[arg-type]
            category, type_, made_by,
            modifier=modifier, region=region, region_modifier=region_modifier))
    return infos


def _code(item: Any) -> Code | None:
    if item is None or "CodeValue" not in item:
        return None
    return Code(str(item.CodeValue), str(item.CodingSchemeDesignator), str(item.get("CodeMeaning", "")))


class _FrameSource:
    """Frames of a SEG one at a time: bit-unpacked straight from Pixel Data when it is native
    1-bit (every BINARY SEG medseg, dcmqi or Slicer writes), else decoded by highdicom."""

    def __init__(self, seg: Any, path: Path) -> None:
        self.seg, self.path = seg, path
        self.rows, self.columns = int(seg.Rows), int(seg.Columns)
        self.labelmap = str(seg.get("SegmentationType", "")) == "LABELMAP"
        syntax = getattr(getattr(seg, "file_meta", None), "TransferSyntaxUID", None)
        self.packed = int(seg.get("BitsAllocated", 0)) == 1 and syntax is not None and not syntax.is_compressed
        self.bits = np.frombuffer(seg.PixelData, dtype=np.uint8) if self.packed else None
        self._highdicom: Any = None

    def highdicom(self) -> Any:
        if self._highdicom is None:
            import highdicom as hd

            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    self._highdicom = hd.seg.Segmentation.from_dataset(self.seg, copy=False)
            except Exception as error:  # noqa: BLE001 - highdicom raises many types for a bad SEG
                raise GeometryError(f"cannot read the DICOM SEG ({type(error).__name__}: {error})"[:400],
                                    path=self.path) from error
        return self._highdicom

    def frame(self, index: int, threshold: float) -> np.ndarray:
        if self.bits is not None:
            n = self.rows * self.columns
            start = index * n
            first, offset = divmod(start, 8)
            chunk = self.bits[first:(start + n + 7) // 8]
            if chunk.size * 8 < offset + n:
                raise GeometryError(f"the SEG's pixel data ends before frame {index + 1}", path=self.path)
            bits = np.unpackbits(chunk, bitorder="little")[offset:offset + n]
            return bits.reshape(self.rows, self.columns).astype(bool)
        frame = self.highdicom().get_stored_frame(index, as_index=True)
        return frame if self.labelmap else frame >= threshold


def _typical_step(along: np.ndarray, fallback: float) -> float:
    steps = np.diff(np.sort(along))
    steps = steps[steps > 1e-6]
    return float(np.median(steps)) if steps.size else float(fallback)


def _frame_planes(frames: list[_Frame], normal: np.ndarray) -> np.ndarray:
    """The SEG's distinct plane positions along the normal (sorted)."""
    return np.unique(np.round([float(f.position @ normal) for f in frames], 3))


def _nearest_slices(along_planes: np.ndarray, along: float, frame_planes: np.ndarray) -> list[int]:
    """Image slices whose nearest SEG plane is this one (half the local plane step either side)."""
    i = int(np.argmin(np.abs(frame_planes - along)))
    steps = np.diff(frame_planes)
    if steps.size == 0:
        steps = np.diff(along_planes)[:1] if along_planes.size > 1 else np.array([1.0])
        i = 0

    def gap(j: int) -> float:
        """Step j, capped: a step far above both its neighbours is a run of omitted (empty) frames."""
        j = min(max(j, 0), steps.size - 1)
        neighbours = [steps[n] for n in (j - 1, j + 1) if 0 <= n < steps.size]
        return float(min(steps[j], 1.5 * max(neighbours))) if neighbours else float(steps[j])

    below = gap(i - 1) if i > 0 else gap(0)
    above = gap(i) if i < steps.size else gap(steps.size - 1)
    lo, hi = along - below / 2.0, along + above / 2.0
    return [int(k) for k in np.nonzero((along_planes >= lo - 1e-6) & (along_planes < hi - 1e-6))[0]]


def _paste(target: np.ndarray, pixels: np.ndarray, frame: _Frame, plane_origin: np.ndarray,
           row_dir: np.ndarray, col_dir: np.ndarray, sx: float, sy: float, value: int,
           overlaps: dict[tuple[int, int], int] | None = None) -> bool:
    """Paint ``value`` where ``pixels`` is set into image slice ``target``; False if nothing fell inside.

    Voxels of another segment painted over are counted in ``overlaps`` (BINARY SEGs may overlap)."""
    from scipy import ndimage

    offset = frame.position - plane_origin
    x0, y0 = float(offset @ row_dir) / sx, float(offset @ col_dir) / sy
    fx = float(frame.row_dir @ row_dir) * frame.spacing_rc[1] / sx  # image columns per frame column
    fy = float(frame.col_dir @ col_dir) * frame.spacing_rc[0] / sy
    rows, cols = target.shape
    if (abs(fx - 1) < 1e-4 and abs(fy - 1) < 1e-4 and abs(x0 - round(x0)) < POSITION_TOLERANCE_VOXEL
            and abs(y0 - round(y0)) < POSITION_TOLERANCE_VOXEL):
        xi, yi = int(round(x0)), int(round(y0))
        ys, xs = slice(max(0, yi), min(rows, yi + pixels.shape[0])), slice(max(0, xi), min(cols, xi + pixels.shape[1]))
        if ys.start >= ys.stop or xs.start >= xs.stop:
            return False
        source = pixels[ys.start - yi:ys.stop - yi, xs.start - xi:xs.stop - xi]
        view = target[ys, xs]
        if source.dtype == bool:
            _count_overlap(view[source], value, overlaps)
            view[source] = value
        else:
            view[source > 0] = source[source > 0]
        return bool(source.any())
    # Image (row, col) -> frame (row, col): nearest pixel of the frame for every image pixel.
    matrix = np.array([[1.0 / fy, 0.0], [0.0, 1.0 / fx]])
    shift = np.array([-y0 / fy, -x0 / fx])
    sampled = ndimage.affine_transform(pixels.astype(np.uint16), matrix, offset=shift, output_shape=(rows, cols),
                                       order=0, mode="constant", cval=0)
    if not sampled.any():
        return False
    if pixels.dtype == bool:
        _count_overlap(target[sampled > 0], value, overlaps)
        target[sampled > 0] = value
    else:
        target[sampled > 0] = sampled[sampled > 0]
    return True


def _count_overlap(before: np.ndarray, value: int, overlaps: dict[tuple[int, int], int] | None) -> None:
    if overlaps is None:
        return
    taken = before[(before != 0) & (before != value)]
    if taken.size:
        for earlier, count in zip(*np.unique(taken, return_counts=True)):
            overlaps[(int(earlier), value)] = overlaps.get((int(earlier), value), 0) + int(count)


def _resampled(seg: Any, image: Volume, dtype: Any, path: Path) -> np.ndarray:
    from medseg.io.resample import resample_to

    try:
        volume = seg.get_volume(combine_segments=True, skip_overlap_checks=True)
    except Exception as error:  # noqa: BLE001
        raise GeometryError(f"the SEG's frames do not form a volume that can be placed on this image ({error})"[:400],
                            path=path) from error
    affine = volume.affine
    array = np.asarray(volume.array)  # (slice, row, col)
    spacing = np.linalg.norm(affine[:3, :3], axis=0)
    direction = np.column_stack([affine[:3, 2] / spacing[2], affine[:3, 1] / spacing[1], affine[:3, 0] / spacing[0]])
    seg_volume = Volume(array.astype(dtype), (spacing[2], spacing[1], spacing[0]), affine[:3, 3], direction)
    return resample_to(seg_volume, image, "nearest", 0).array.astype(dtype)
