"""One DICOM file's header for the scan (:mod:`medseg.io.dicom_scan`): read fast, checked, or skipped with the reason.

Only the elements the scan needs are parsed, from the file's first bytes in memory; a file
that is not a regular file, not DICOM, not an image, or whose pixel data is cut short becomes
a :class:`SkippedFile` naming why. :func:`read_one` never raises for bad input.
"""

from __future__ import annotations

import io
import os
import stat
import struct
from dataclasses import dataclass
from typing import Any

import pydicom
from pydicom.datadict import tag_for_keyword
from pydicom.dataset import FileMetaDataset
from pydicom.errors import InvalidDicomError
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian

from medseg.errors import DicomError
from medseg.io.dicom_headers import (
    IMPLICIT_VR_LE,
    NATIVE_LITTLE_ENDIAN,
    NON_IMAGE_SOP_CLASSES,
    SECONDARY_CAPTURE_PREFIX,
    STRUCTURED_REPORT_PREFIX,
    SliceHeader,
    ascii_value,
    image_type,
    slice_headers,
)
from medseg.io.dicom_sources import open_ref, ref_size, split_ref
from medseg.io.dicom_walk import MalformedHeader, walk_header

PIXEL_DATA_TAG = b"\xe0\x7f\x10\x00"


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str
    broken: bool = False  # a DICOM image file (its preamble or header said so) that cannot be used


# Header text medseg keeps per file. Read eagerly inside the scan's error handling: pydicom
# converts values lazily, and a corrupt value must not raise later, outside it.
_TEXT_KEYWORDS = ("SeriesInstanceUID", "StudyInstanceUID", "FrameOfReferenceUID", "SOPClassUID", "SOPInstanceUID",
                  "Modality", "SeriesDescription", "SeriesNumber", "PatientName", "PatientID", "StudyDescription",
                  "StudyDate", "Manufacturer")


# Only these elements are parsed during the scan: skipping the rest (large private groups,
# dose and protocol details) halves pydicom's header parse time.
SCAN_KEYWORDS = sorted({*_TEXT_KEYWORDS, "SpecificCharacterSet", "ImageType", "InstanceNumber", "NumberOfFrames",
                        "ImagePositionPatient", "ImageOrientationPatient", "PixelSpacing", "RescaleSlope",
                        "RescaleIntercept", "WindowCenter", "WindowWidth", "GantryDetectorTilt", "Rows", "Columns",
                        "BitsAllocated", "BitsStored", "PixelRepresentation", "SamplesPerPixel",
                        "PhotometricInterpretation", "SharedFunctionalGroupsSequence",
                        "PerFrameFunctionalGroupsSequence"})


SCAN_TAGS = tuple(tag_for_keyword(keyword) for keyword in SCAN_KEYWORDS)


@dataclass
class FileHeader:
    ref: str
    facts: dict[str, str]
    category: str
    gantry_tilt: float | None
    slices: list[SliceHeader]


def _pixel_offset(fp: Any, ds: Any, transfer_syntax: str) -> int | None:
    """Byte offset of native little-endian 16-bit Pixel Data right after the header, or None.

    None sends the file through pydicom's full decode, which also reports malformed data.
    """
    if transfer_syntax not in NATIVE_LITTLE_ENDIAN:
        return None
    position = fp.tell()
    head = fp.read(12)
    if len(head) < 8 or head[:4] != PIXEL_DATA_TAG:
        return None
    if transfer_syntax == IMPLICIT_VR_LE:
        header_size, length = 8, struct.unpack("<I", head[4:8])[0]
    elif len(head) == 12 and head[4:6] in (b"OW", b"OB"):
        header_size, length = 12, struct.unpack("<I", head[8:12])[0]
    else:
        return None
    try:
        needed = int(ds.Rows) * int(ds.Columns) * 2
    except (AttributeError, TypeError, ValueError):
        return None
    # The declared length must hold one 16-bit frame (undefined length 0xFFFFFFFF is not native).
    if length == 0xFFFFFFFF or length < needed:
        return None
    return position + header_size


def _read_without_preamble(fp: Any) -> Any:
    """A bare little-endian dataset without preamble and file meta (old ACR-NEMA style exports).

    Only tried when the file starts with a group 0008 element, so arbitrary files are not
    parsed as DICOM by force.
    """
    fp.seek(0)
    if fp.read(2) != b"\x08\x00":
        return None
    fp.seek(0)
    ds = pydicom.dcmread(fp, stop_before_pixels=True, specific_tags=SCAN_KEYWORDS, force=True)
    implicit, little = ds.original_encoding
    if not little or "Rows" not in ds:
        return None
    ds.file_meta = FileMetaDataset()
    ds.file_meta.TransferSyntaxUID = ImplicitVRLittleEndian if implicit else ExplicitVRLittleEndian
    return ds


# The header is parsed from the file's first bytes in memory: pydicom asks a file object
# for its position about 500 times per header, and each such call on a real file is a
# system call (profiled: a third of the scan). The parse counts only when it stopped at the
# pixel data inside those bytes, or they are the whole file; otherwise the file is parsed.
HEADER_BYTES = 64 * 1024
_PIXEL_TAGS = (b"\xe0\x7f\x10\x00", b"\xe0\x7f\x08\x00", b"\xe0\x7f\x09\x00", b"\x7f\xe0\x00\x10")
_DEFLATED = "1.2.840.10008.1.2.1.99"


def _header_from_memory(fp: Any) -> tuple[Any, Any] | None:
    """(dataset, in-memory file positioned after the header), or None when the bytes are not enough."""
    head = fp.read(HEADER_BYTES)
    whole_file = len(head) < HEADER_BYTES
    if _DEFLATED.encode() in head[132:2048]:
        _check_deflated(head)
    memory = io.BytesIO(head)
    walked = walk_header(head, SCAN_TAGS)
    if walked is not None:
        ds, pixel_at = walked
        if (pixel_at + 12 <= len(head)) or (whole_file and pixel_at == len(head)):
            memory.seek(pixel_at)
            return ds, memory
    try:
        ds = pydicom.dcmread(memory, stop_before_pixels=True, specific_tags=SCAN_KEYWORDS)
    except InvalidDicomError:
        raise
    except Exception:  # noqa: BLE001 - cut off mid-element: the file itself decides (and names the error)
        return None
    transfer_syntax = str(getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", "") or "")
    position = memory.tell()
    at_pixels = head[position:position + 4] in _PIXEL_TAGS and position + 12 <= len(head)
    if transfer_syntax == _DEFLATED or not (whole_file or at_pixels):
        return None
    return ds, memory


def _check_deflated(head: bytes) -> None:
    """A Deflated Explicit VR file must inflate: pydicom, given one that is not, read garbage as elements."""
    import zlib

    if len(head) < 144 or head[132:140] != b"\x02\x00\x00\x00UL\x04\x00":
        return
    end = 144 + struct.unpack("<I", head[140:144])[0]
    if end >= len(head):
        return
    try:
        zlib.decompressobj(-zlib.MAX_WBITS).decompress(head[end:], 1 << 16)
    except zlib.error as error:
        raise DicomError(f"its transfer syntax says Deflated but the data after its file meta does not inflate "
                         f"({error})", hint="the file is corrupt or its transfer syntax is wrong") from None


# The most of a file the scan reads for its header: a header larger than this (none is: an Enhanced CT
# of 1000 frames has about 2 MiB) is not read, so a huge or sparse file cannot keep the scan busy.
MAX_HEADER_BYTES = 16 << 20


def read_one(ref: str) -> FileHeader | SkippedFile:
    """Read one file's header; never raises for bad input (the reason is returned)."""
    try:
        reason = _not_a_regular_file(ref)
        if reason:
            return SkippedFile(ref, reason)
        size = ref_size(ref)
        with open_ref(ref) as fp:
            try:
                parsed = _header_from_memory(fp)
                if parsed is None:
                    fp.seek(0)
                    head = fp.read(MAX_HEADER_BYTES)
                    memory = io.BytesIO(head)
                    try:
                        ds = pydicom.dcmread(memory, stop_before_pixels=True, specific_tags=SCAN_KEYWORDS)
                    except InvalidDicomError:
                        raise
                    except Exception as error:  # pydicom raises many types on a cut header
                        if len(head) == MAX_HEADER_BYTES:
                            return SkippedFile(ref, f"no image header ends within its first {MAX_HEADER_BYTES >> 20} "
                                                    "MiB: not read further (corrupt, or not DICOM)", broken=True)
                        raise error
                    if len(head) == MAX_HEADER_BYTES and head[memory.tell():memory.tell() + 4] not in _PIXEL_TAGS:
                        return SkippedFile(ref, f"no image header ends within its first {MAX_HEADER_BYTES >> 20} MiB: "
                                                "not read further (corrupt, or not DICOM)", broken=True)
                    fp = memory  # the rest reads the same bytes from memory
                else:
                    ds, fp = parsed  # the rest reads the same bytes from memory
            except InvalidDicomError:
                ds = _read_without_preamble(fp)
                if ds is None:
                    return SkippedFile(ref, "not a DICOM file (no DICM preamble)")
            transfer_syntax = str(getattr(getattr(ds, "file_meta", None), "TransferSyntaxUID", "") or "")
            if not transfer_syntax:
                return SkippedFile(ref, "DICOM file without a transfer syntax in its file meta information")
            reason = _non_image_reason(ds)
            if reason:
                return SkippedFile(ref, reason)
            reason = _pixel_data_reason(fp, ds, transfer_syntax, size)
            if reason:
                return SkippedFile(ref, reason, broken=True)
            offset = _pixel_offset(fp, ds, transfer_syntax) if not ds.get("NumberOfFrames") else None
            slices = slice_headers(ds, ref, offset)
            facts = {keyword: _text(ds, keyword) for keyword in _TEXT_KEYWORDS}
            return FileHeader(ref, facts, _category(ds, slices[0]), _gantry_tilt(ds), slices)
    except DicomError as error:
        return SkippedFile(ref, error.message, broken=True)
    except MalformedHeader as error:
        return SkippedFile(ref, f"not a readable DICOM header: {error}", broken=True)
    except OSError as error:
        return SkippedFile(ref, f"cannot be read ({error.strerror or error})")
    except Exception as error:  # noqa: BLE001 - pydicom raises many exception types on malformed files
        return SkippedFile(ref, f"unreadable DICOM header ({type(error).__name__}: {error})"[:300])


def _not_a_regular_file(ref: str) -> str | None:
    """Why ``ref`` is not opened (a FIFO would block the scan forever, a device never ends), or None."""
    archive, member = split_ref(ref)
    if member is not None:
        return None
    try:
        mode = os.stat(archive).st_mode
    except OSError as error:
        return f"cannot be read ({error.strerror or error})"
    if stat.S_ISREG(mode):
        return None
    kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a device or socket"
    return f"not a regular file ({kind}): not read"


def _pixel_data_reason(fp: Any, ds: Any, transfer_syntax: str, size: int) -> str | None:
    """Why the Pixel Data element the header ends at cannot hold the images, or None.

    Its length must fit in the file (a length field of 2 GB in a 40 KB file was read as far as the
    file went), and native (uncompressed) pixel data must hold every pixel its header declares.
    """
    position = fp.tell()
    head = fp.read(12)
    fp.seek(position)
    if len(head) < 8 or head[:4] != PIXEL_DATA_TAG:
        return None
    explicit = transfer_syntax != IMPLICIT_VR_LE and head[4:6].isalpha()
    if explicit:
        if head[4:6] not in (b"OB", b"OW", b"OF", b"UN") or len(head) < 12:
            return None
        header_size, length = 12, struct.unpack("<I", head[8:12])[0]
    else:
        header_size, length = 8, struct.unpack("<I", head[4:8])[0]
    if length == 0xFFFFFFFF:  # encapsulated: fragments, checked by the decoder
        if transfer_syntax in NATIVE_LITTLE_ENDIAN:
            return "its Pixel Data is encapsulated (compressed) although its transfer syntax says uncompressed"
        return None
    present = size - position - header_size
    if length > present:
        return (f"its Pixel Data declares {length} bytes but the file holds {max(0, present)} after the header: the file "
                "is cut short or its header is corrupt")
    if transfer_syntax in NATIVE_LITTLE_ENDIAN or transfer_syntax == "1.2.840.10008.1.2.2":
        try:
            frames = int(ds.get("NumberOfFrames") or 1)
            needed = (int(ds.Rows) * int(ds.Columns) * frames * int(ds.get("SamplesPerPixel") or 1)
                      * int(ds.get("BitsAllocated") or 16) + 7) // 8
        except (TypeError, ValueError, AttributeError):
            return None
        if not needed <= length <= needed + 1:  # + 1: an odd length is padded to even
            return (f"its Pixel Data holds {length} bytes; its {frames} image(s) of {ds.Columns} x {ds.Rows} pixels "
                    f"need {needed}: the header does not describe these pixels")
    return None


def _non_image_reason(ds: Any) -> str | None:
    sop_class = _text(ds, "SOPClassUID")
    if sop_class in NON_IMAGE_SOP_CLASSES:
        return NON_IMAGE_SOP_CLASSES[sop_class]
    if sop_class.startswith(STRUCTURED_REPORT_PREFIX):
        return "a structured report, not an image"
    if not ds.get("Rows") or not ds.get("Columns"):
        return f"not an image (no Rows/Columns; SOP class {sop_class or 'empty'})"
    return None


def _category(ds: Any, first: SliceHeader) -> str:
    sop_class = _text(ds, "SOPClassUID")
    photometric = (ascii_value(ds, "PhotometricInterpretation") or "MONOCHROME2").upper()
    # A colour image (RGB, YBR, or PALETTE COLOR whose stored values are indices into a colour table)
    # is not a CT volume: its stored values are not Hounsfield units.
    if sop_class.startswith(SECONDARY_CAPTURE_PREFIX) or first.samples_per_pixel > 1 \
            or not photometric.startswith("MONOCHROME"):
        return "secondary_capture"
    if "LOCALIZER" in image_type(ds):
        return "localizer"
    return "image"


def _gantry_tilt(ds: Any) -> float | None:
    try:
        value = ds.get("GantryDetectorTilt")
        return float(value) if value not in (None, "") else None
    except (TypeError, ValueError):
        return None


_ASCII_KEYWORDS = {"SeriesInstanceUID", "StudyInstanceUID", "FrameOfReferenceUID", "SOPClassUID", "SOPInstanceUID",
                   "Modality", "SeriesNumber", "StudyDate"}


def _text(ds: Any, keyword: str) -> str:
    if keyword in _ASCII_KEYWORDS:
        return ascii_value(ds, keyword) or ""
    value = ds.get(keyword, "")
    return "" if value is None else str(value).strip()
