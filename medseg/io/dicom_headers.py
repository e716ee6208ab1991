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

from medseg.errors import DicomError

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


# Rescale values no CT (or any modality medseg opens) is stored with: beyond them a header is corrupt.
SLOPE_RANGE = (1e-6, 1e4)
INTERCEPT_LIMIT = 1e6


def _rescale(owner: Any, ds: Any) -> tuple[float, float, bool]:
    """(slope, intercept, either absent) of Rescale Slope/Intercept: absent means (1, 0); present, each must be
    a plausible number (a DicomError names the value: "abc" was read as 0, lungs 15 ml for 47)."""
    slope_text = ascii_numbers(owner, "RescaleSlope") if owner is not None else None
    intercept_text = ascii_numbers(owner, "RescaleIntercept") if owner is not None else None
    if slope_text is None and owner is not ds:
        slope_text = ascii_numbers(ds, "RescaleSlope")
    if intercept_text is None and owner is not ds:
        intercept_text = ascii_numbers(ds, "RescaleIntercept")
    slope = _strict_float(slope_text, "Rescale Slope", 1.0)
    intercept = _strict_float(intercept_text, "Rescale Intercept", 0.0)

    low, high = SLOPE_RANGE
    if not low <= abs(slope) <= high:
        raise DicomError(f"its Rescale Slope is {slope:g}: stored values cannot become Hounsfield units that way "
                         f"(a slope of {low:g} to {high:g} is needed)", hint="the header is corrupt")
    if abs(intercept) > INTERCEPT_LIMIT:
        raise DicomError(f"its Rescale Intercept is {intercept:g}, beyond any image's values", hint="the header is corrupt")
    return slope, intercept, slope_text is None or intercept_text is None


def _strict_float(parts: list[str] | None, name: str, default: float) -> float:
    if parts is None:
        return default
    try:
        number = float(parts[0])
    except (ValueError, IndexError):
        raise DicomError(f"its {name} is {_joined(parts)[:40]!r}, not a number", hint="the header is corrupt") from None
    if not np.isfinite(number):
        raise DicomError(f"its {name} is {parts[0]!r}, not a finite number", hint="the header is corrupt")
    return number


def _joined(parts: Any) -> str:
    return "\\".join(str(p) for p in parts)


def _int_or_none(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def _orientation(value: Any) -> np.ndarray | None:
    """Image Orientation (Patient): None when absent (axial is then assumed, and said); present, it must
    be two unit vectors at right angles (else a DicomError: the image cannot be placed)."""
    if value is None:
        return None
    cosines = _floats(value, 6)
    if cosines is None:
        raise DicomError(f"its Image Orientation (Patient) {_joined(value)[:80]!r} is not six numbers: the image "
                         "cannot be placed in patient space", hint="the header is corrupt")
    row, col = cosines[:3], cosines[3:]
    # A degenerate orientation (zero or parallel vectors) cannot define a plane; rounding aside, the
    # vectors are unit length and perpendicular.
    if (abs(np.linalg.norm(row) - 1) > 0.01 or abs(np.linalg.norm(col) - 1) > 0.01
            or abs(float(np.dot(row, col))) > 0.01):
        raise DicomError(f"its Image Orientation (Patient) {'/'.join(f'{v:g}' for v in cosines)} is not two "
                         "perpendicular unit vectors: the image cannot be placed in patient space",
                         hint="the header is corrupt")
    return cosines


def _position(value: Any) -> np.ndarray | None:
    """Image Position (Patient): None when absent; present, three finite numbers of sane size."""
    if value is None:
        return None
    numbers = _floats(value, 3)
    if numbers is None or np.any(np.abs(numbers) > 1e6):
        raise DicomError(f"its Image Position (Patient) {_joined(value)[:80]!r} is not a position: the image "
                         "cannot be placed in patient space", hint="the header is corrupt")
    return numbers


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
    _check_pixel_module(ds)
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
            slope, intercept, unscaled = _rescale(rescale or ds, ds)
            spacing, stated = _spacing(num(measures or ds, "PixelSpacing"))
            headers.append(SliceHeader(
                frame=index,
                position=_position(num(position or ds, "ImagePositionPatient")),
                orientation=_orientation(num(orientation or ds, "ImageOrientationPatient")),
                pixel_spacing=spacing,
                slope=slope,
                intercept=intercept,
                window=_window(voi or ds),
                **common,
                extra=_extra(stated, unscaled),
            ))
        return headers
    slope, intercept, unscaled = _rescale(ds, ds)
    spacing, stated = _spacing(num(ds, "PixelSpacing"))
    return [SliceHeader(
        frame=None,
        position=_position(num(ds, "ImagePositionPatient")),
        orientation=_orientation(num(ds, "ImageOrientationPatient")),
        pixel_spacing=spacing,
        slope=slope,
        intercept=intercept,
        window=_window(ds),
        pixel_offset=pixel_offset,
        **common,
        extra=_extra(stated, unscaled),
    )]


def _extra(stated: str | None, unscaled: bool) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if stated:
        extra["pixel_spacing_stated"] = stated
    if unscaled:
        extra["rescale_absent"] = True
    return extra


def _spacing(value: Any) -> tuple[tuple[float, float] | None, str | None]:
    """(Pixel Spacing, the text as stated when it is there but not two positive numbers)."""
    if value is None:
        return None, None
    numbers = _floats(value, 2)
    if numbers is None or np.any(numbers <= 0):
        return None, _joined(value)[:60]
    return (float(numbers[0]), float(numbers[1])), None


def _window(owner: Any) -> tuple[float, float] | None:
    center = _first_float(ascii_numbers(owner, "WindowCenter"))
    width = _first_float(ascii_numbers(owner, "WindowWidth"))
    if center is None or width is None or width <= 0:
        return None
    return center, width


def _check_pixel_module(ds: Any) -> None:
    """Bits Stored beyond Bits Allocated, or Bits Allocated no decoder knows, cannot describe an image."""
    allocated = _int_or_none(ds.get("BitsAllocated"))
    stored = _int_or_none(ds.get("BitsStored"))
    if allocated is not None and allocated not in (1, 8, 16, 32, 64):
        raise DicomError(f"its Bits Allocated is {allocated}: not a pixel size DICOM allows", hint="the header is corrupt")
    if stored is not None and allocated is not None and not 0 < stored <= allocated:
        raise DicomError(f"its Bits Stored ({stored}) does not fit its Bits Allocated ({allocated})",
                         hint="the header is corrupt")


def image_type(ds: Any) -> list[str]:
    return [v.upper() for v in (ascii_numbers(ds, "ImageType") or [])]
