"""The facts medseg needs from one DICOM image header, read once during the scan.

A :class:`SliceHeader` describes one 2D image: a single-frame file, or one frame of an
Enhanced (multi-frame) object, whose geometry lives in the Shared and Per-Frame
Functional Groups rather than at the top level.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from pydicom.datadict import tag_for_keyword

# Transfer syntaxes whose pixel data is stored raw, little endian (read with numpy directly).
NATIVE_LITTLE_ENDIAN = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1"}
IMPLICIT_VR_LE = "1.2.840.10008.1.2"

SECONDARY_CAPTURE_PREFIX = "1.2.840.10008.5.1.4.1.1.7"
ENHANCED_CT = "1.2.840.10008.5.1.4.1.1.2.1"
# SOP classes that are never image series (say why they were skipped).
NON_IMAGE_SOP_CLASSES = {
    "1.2.840.10008.1.3.10": "a DICOMDIR (media directory)",
    "1.2.840.10008.5.1.4.1.1.66.4": "a DICOM Segmentation (SEG) object, not an image series",
    "1.2.840.10008.5.1.4.1.1.481.3": "an RT Structure Set, not an image",
    "1.2.840.10008.5.1.4.1.1.11.1": "a presentation state, not an image",
    "1.2.840.10008.5.1.4.1.1.104.1": "an encapsulated PDF, not an image",
    "1.2.840.10008.5.1.4.1.1.88.67": "a dose structured report, not an image",
}
STRUCTURED_REPORT_PREFIX = "1.2.840.10008.5.1.4.1.1.88."


@dataclass
class SliceHeader:
    ref: str  # source reference (file path or zip member)
    frame: int | None  # frame index in a multi-frame object, else None
    rows: int
    columns: int
    position: np.ndarray | None  # Image Position (Patient), LPS mm
    orientation: np.ndarray | None  # Image Orientation (Patient): row cosine, column cosine
    pixel_spacing: tuple[float, float] | None  # (row spacing = y, column spacing = x)
    slope: float
    intercept: float
    sop_instance_uid: str
    instance_number: int | None
    transfer_syntax: str
    bits_allocated: int
    pixel_representation: int
    samples_per_pixel: int
    window: tuple[float, float] | None  # (center, width)
    pixel_offset: int | None = None  # byte offset of native little-endian pixel data, if known
    bits_stored: int = 0
    extra: dict[str, Any] = field(default_factory=dict)


def ascii_value(owner: Any, keyword: str) -> str | None:
    """A DS/IS/UI/CS value as text, straight from the raw bytes (None when absent).

    pydicom converts values lazily, through validation hooks that cost more than the
    whole header parse; these VRs are ASCII by definition, so the scan reads them raw.
    """
    if owner is None:
        return None
    element = owner.get_item(tag_for_keyword(keyword))
    if element is None:
        return None
    value = element.value
    if isinstance(value, (bytes, bytearray)):
        return value.decode("ascii", "replace").strip(" \x00")
    if value is None:
        return ""
    if isinstance(value, (list, tuple)) or type(value).__name__ == "MultiValue":
        return "\\".join(str(v) for v in value)
    return str(value).strip()


def ascii_numbers(owner: Any, keyword: str) -> list[str] | None:
    text = ascii_value(owner, keyword)
    if text is None or text == "":
        return None
    return [part.strip() for part in text.split("\\")]


def _floats(value: Any, count: int) -> np.ndarray | None:
    try:
        numbers = np.asarray([float(v) for v in value], dtype=np.float64)
    except (TypeError, ValueError):
        return None
    if numbers.shape != (count,) or not np.all(np.isfinite(numbers)):
        return None
    return numbers


def _first_float(value: Any) -> float | None:
    if value is None or value == "":
        return None
    try:
        if not isinstance(value, (str, bytes, int, float)) and hasattr(value, "__len__"):
            value = value[0]
        number = float(value)
    except (TypeError, ValueError, IndexError):
        return None
    return number if np.isfinite(number) else None


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _orientation(value: Any) -> np.ndarray | None:
    cosines = _floats(value, 6) if value is not None else None
    if cosines is None:
        return None
    row, col = cosines[:3], cosines[3:]
    # A degenerate orientation (zero or parallel vectors) cannot define a plane.
    if np.linalg.norm(row) < 0.5 or np.linalg.norm(col) < 0.5 or np.linalg.norm(np.cross(row, col)) < 0.5:
        return None
    return cosines


def _item(sequence_owner: Any, keyword: str) -> Any:
    seq = sequence_owner.get(keyword) if sequence_owner is not None else None
    if seq:
        return seq[0]
    return None


def _functional(per_frame: Any, shared: Any, keyword: str) -> Any:
    """A functional group macro item, per-frame first, then shared."""
    return _item(per_frame, keyword) or _item(shared, keyword)


def slice_headers(ds: Any, ref: str, pixel_offset: int | None) -> list[SliceHeader]:
    """One SliceHeader per frame of a pydicom dataset read with stop_before_pixels."""
    transfer_syntax = str(getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", "") or "")
    rows = _int_or_none(ds.get("Rows"))
    columns = _int_or_none(ds.get("Columns"))
    num = ascii_numbers
    common = dict(
        ref=ref,
        rows=rows or 0,
        columns=columns or 0,
        sop_instance_uid=ascii_value(ds, "SOPInstanceUID") or "",
        instance_number=_int_or_none((num(ds, "InstanceNumber") or [None])[0]),
        transfer_syntax=transfer_syntax,
        bits_allocated=_int_or_none(ds.get("BitsAllocated")) or 16,
        pixel_representation=_int_or_none(ds.get("PixelRepresentation")) or 0,
        samples_per_pixel=_int_or_none(ds.get("SamplesPerPixel")) or 1,
        bits_stored=_int_or_none(ds.get("BitsStored")) or 0,
    )
    n_frames = _int_or_none((num(ds, "NumberOfFrames") or [None])[0]) or 1
    per_frame_groups = ds.get("PerFrameFunctionalGroupsSequence")
    shared = _item(ds, "SharedFunctionalGroupsSequence")
    if n_frames > 1 or per_frame_groups:
        headers = []
        for index in range(n_frames):
            per = per_frame_groups[index] if per_frame_groups and index < len(per_frame_groups) else None
            position = _functional(per, shared, "PlanePositionSequence")
            orientation = _functional(per, shared, "PlaneOrientationSequence")
            measures = _functional(per, shared, "PixelMeasuresSequence")
            rescale = _functional(per, shared, "PixelValueTransformationSequence")
            voi = _functional(per, shared, "FrameVOILUTSequence")
            headers.append(SliceHeader(
                frame=index,
                position=_floats(num(position or ds, "ImagePositionPatient"), 3),
                orientation=_orientation(num(orientation or ds, "ImageOrientationPatient")),
                pixel_spacing=_spacing(num(measures or ds, "PixelSpacing")),
                slope=_first_float(num(rescale or ds, "RescaleSlope")) or 1.0,
                intercept=_first_float(num(rescale or ds, "RescaleIntercept")) or 0.0,
                window=_window(voi or ds),
                **common,
            ))
        return headers
    return [SliceHeader(
        frame=None,
        position=_floats(num(ds, "ImagePositionPatient"), 3),
        orientation=_orientation(num(ds, "ImageOrientationPatient")),
        pixel_spacing=_spacing(num(ds, "PixelSpacing")),
        slope=_first_float(num(ds, "RescaleSlope")) or 1.0,
        intercept=_first_float(num(ds, "RescaleIntercept")) or 0.0,
        window=_window(ds),
        pixel_offset=pixel_offset,
        **common,
    )]


def _spacing(value: Any) -> tuple[float, float] | None:
    numbers = _floats(value, 2) if value is not None else None
    if numbers is None or np.any(numbers <= 0):
        return None
    return float(numbers[0]), float(numbers[1])


def _window(owner: Any) -> tuple[float, float] | None:
    center = _first_float(ascii_numbers(owner, "WindowCenter"))
    width = _first_float(ascii_numbers(owner, "WindowWidth"))
    if center is None or width is None or width <= 0:
        return None
    return center, width


def image_type(ds: Any) -> list[str]:
    return [v.upper() for v in (ascii_numbers(ds, "ImageType") or [])]
