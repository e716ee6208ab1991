"""DICOM discovery: a header-only, parallel scan that groups images into series.

Headers are read with pydicom's ``stop_before_pixels`` in a thread pool (the work is
mostly file I/O). Images are grouped by Series Instance UID, and further split by frame
of reference, orientation, pixel spacing, rows/columns and series number/description,
so blank or duplicated UIDs (anonymised data) still give one series per stack.
Localizers, secondary captures and non-image objects never reach a volume; each is
reported with the reason.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import struct
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import pydicom
from pydicom.datadict import tag_for_keyword
from pydicom.dataset import FileMetaDataset
from pydicom.errors import InvalidDicomError
from pydicom.uid import ExplicitVRLittleEndian, ImplicitVRLittleEndian

from medseg import threads
from medseg.errors import Cancelled, DicomError
from medseg.io.dicom_geometry import StackGeometry, analyze_stack
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
from medseg.io.dicom_sources import expand_sources, open_ref, ref_size, split_ref
from medseg.io.dicom_walk import MalformedHeader, walk_header
from medseg.io.folder_walk import LINK_LEAVES
from medseg.core.volume import GeometryFinding
from medseg.progress import CancelToken, ProgressCallback, report

PIXEL_DATA_TAG = b"\xe0\x7f\x10\x00"


@dataclass(frozen=True)
class SkippedFile:
    path: str
    reason: str
    broken: bool = False  # a DICOM image file (its preamble or header said so) that cannot be used


@dataclass
class SeriesInfo:
    """One series as found by the scan: what to show in a list and what load_series needs."""

    key: str  # unique within a scan, even when the Series Instance UID is blank or shared
    series_uid: str
    study_uid: str
    modality: str
    series_description: str
    series_number: str
    patient_name: str  # display only: never log it
    patient_id: str  # display only: never log it
    study_description: str
    study_date: str
    files: list[str]  # source references, in slice order
    n_files: int
    size_xyz: tuple[int, int, int]  # of the acquired stack (columns, rows, images)
    spacing_mm: tuple[float, float, float]  # (x, y, typical slice step)
    origin_mm: tuple[float, float, float]
    direction: np.ndarray  # 3x3, columns = x, y, z index axes (LPS)
    transfer_syntaxes: list[str]
    findings: list[GeometryFinding]
    kind: str  # "volume", "single_slice", "localizer", "secondary_capture", "not_a_volume"
    loadable: bool
    frame_of_reference_uid: str = ""
    sop_class_uid: str = ""
    manufacturer: str = ""
    slices: list[SliceHeader] = field(default_factory=list, repr=False)  # sorted along the normal
    geometry: StackGeometry | None = field(default=None, repr=False)

    @property
    def n_slices(self) -> int:
        return len(self.slices)

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready summary (used by ``medseg info --json``)."""
        return {
            "key": self.key,
            "series_uid": self.series_uid,
            "study_uid": self.study_uid,
            "modality": self.modality,
            "series_description": self.series_description,
            "series_number": self.series_number,
            "kind": self.kind,
            "loadable": self.loadable,
            "n_files": self.n_files,
            "n_slices": self.n_slices,
            "size_xyz": list(self.size_xyz),
            "spacing_mm": [round(v, 6) for v in self.spacing_mm],
            "origin_mm": [round(v, 6) for v in self.origin_mm],
            "direction": [round(float(v), 6) for v in np.asarray(self.direction).reshape(-1)],
            "transfer_syntaxes": self.transfer_syntaxes,
            "findings": [{"kind": f.kind, "message": f.message, "details": f.details} for f in self.findings],
        }


@dataclass
class ScanResult:
    series: list[SeriesInfo]
    skipped: list[SkippedFile]

    def find(self, key_or_uid: str) -> SeriesInfo:
        """The series whose key or Series Instance UID is ``key_or_uid``."""
        for series in self.series:
            if series.key == key_or_uid:
                return series
        matches = [s for s in self.series if s.series_uid == key_or_uid]
        if len(matches) == 1:
            return matches[0]
        known = ", ".join(s.key for s in self.series) or "none"
        if matches:
            raise DicomError(f"several series share the UID {key_or_uid}; choose one by key ({known})")
        raise DicomError(f"no series {key_or_uid!r} was found (series found: {known})")


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
class _FileHeader:
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


def _read_one(ref: str) -> _FileHeader | SkippedFile:
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
                    except Exception as error:  # noqa: BLE001 - pydicom raises many types on a cut header
                        if len(head) == MAX_HEADER_BYTES:
                            return SkippedFile(ref, f"no image header ends within its first {MAX_HEADER_BYTES >> 20} "
                                                    "MiB: not read further (corrupt, or not DICOM)", broken=True)
                        raise error
                    if len(head) == MAX_HEADER_BYTES and head[memory.tell():memory.tell() + 4] not in _PIXEL_TAGS:
                        return SkippedFile(ref, f"no image header ends within its first {MAX_HEADER_BYTES >> 20} MiB: "
                                                "not read further (corrupt, or not DICOM)", broken=True)
                    fp = memory  # noqa: PLW2901 - the rest reads the same bytes from memory
                else:
                    ds, fp = parsed  # noqa: PLW2901 - the rest reads the same bytes from memory
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
            return _FileHeader(ref, facts, _category(ds, slices[0]), _gantry_tilt(ds), slices)
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


def _group_key(header: _FileHeader) -> tuple:
    facts, first = header.facts, header.slices[0]
    orientation = tuple(np.round(first.orientation, 3)) if first.orientation is not None else None
    spacing = tuple(round(v, 4) for v in first.pixel_spacing) if first.pixel_spacing else None
    multi_frame = header.ref if first.frame is not None else ""  # each multi-frame object is one stack
    # The study, patient and modality too: images forged or copied into another series' UID (three
    # slices of another study, one MR slice in a CT series) must not join it (issue 43).
    return (facts["SeriesInstanceUID"], facts["FrameOfReferenceUID"], orientation, spacing,
            first.rows, first.columns, facts["SeriesNumber"], facts["SeriesDescription"],
            header.category, multi_frame, facts["StudyInstanceUID"], facts["PatientID"], facts["Modality"])


# How two groups of one Series Instance UID differ, in the words of the "series_split" finding.
_SPLIT_REASONS = ((10, "of another study"), (11, "of another patient"), (12, "of another modality"),
                  (1, "of another frame of reference"), (2, "of another orientation"), (3, "of another pixel spacing"),
                  (4, "of another size"), (5, "of another size"), (8, "of another kind (localizer or capture)"),
                  (6, "of another series number"), (7, "of another series description"))


def _parts_sharing_a_uid(series: list[SeriesInfo]) -> list[list[SeriesInfo]]:
    """The series found under one Series Instance UID, where there are two or more of them."""
    by_uid: dict[str, list[SeriesInfo]] = defaultdict(list)
    for s in series:
        if s.series_uid:
            by_uid[s.series_uid].append(s)
    return [group for group in by_uid.values() if len(group) >= 2]


def _note_split_series(series: list[SeriesInfo], keys: dict[str, tuple]) -> None:
    """Images that carry a series' UID but were not taken into it are said, on every part, with why."""
    for group in _parts_sharing_a_uid(series):
        for s in group:
            parts = []
            for other in group:
                if other is s:
                    continue
                why = [words for index, words in _SPLIT_REASONS if keys[s.key][index] != keys[other.key][index]]
                why = list(dict.fromkeys(why)) or ["of another stack"]
                size = f" ({other.size_xyz[0]} x {other.size_xyz[1]})" if "of another size" in why else ""
                modality = f" ({other.modality or 'none'})" if "of another modality" in why else ""
                names = ", ".join(os.path.basename(f) for f in other.files[:3]) + (" ..." if len(other.files) > 3 else "")
                parts.append(f"{other.n_slices} image{'s' if other.n_slices != 1 else ''} {' and '.join(why)}{size}"
                             f"{modality} ({names})")
            s.findings.append(GeometryFinding(
                "series_split", f"Images with this series' identifier were left out of it: {'; '.join(parts)}.",
                {"others": [o.key for o in group if o is not s]}))


def _build_series(key: str, members: list[_FileHeader], category: str) -> SeriesInfo:
    facts = members[0].facts
    findings: list[GeometryFinding] = []
    # The same SOP instance twice (a copied file) is one image, not a duplicate position.
    seen: set[str] = set()
    slices: list[SliceHeader] = []
    duplicates = 0
    for member in members:
        for s in member.slices:
            uid_key = f"{s.sop_instance_uid}/{s.frame}" if s.sop_instance_uid else None
            if uid_key and uid_key in seen:
                duplicates += 1
                continue
            if uid_key:
                seen.add(uid_key)
            slices.append(s)
    if duplicates:
        findings.append(GeometryFinding("duplicate_files", f"{duplicates} duplicate copies of the same image were ignored."))
    series_uid = facts["SeriesInstanceUID"]
    if not series_uid:
        findings.append(GeometryFinding(
            "blank_uids",
            "The images carry no series identifier (the data was anonymised); medseg grouped them into a series "
            "by their orientation, pixel spacing, size and series description.",
            {"study_uid_blank": not facts["StudyInstanceUID"], "sop_instance_uid_blank": not facts["SOPInstanceUID"]}))
    geometry = analyze_stack(slices, members[0].gantry_tilt)
    findings.extend(geometry.findings)
    unscaled = sum(1 for s in slices if s.extra.get("rescale_absent"))
    if unscaled and facts["Modality"] == "CT" and category == "image":
        findings.append(GeometryFinding(
            "no_rescale", f"{unscaled} of the {len(slices)} CT images carry no Rescale Slope/Intercept: their stored "
                          "values are taken as Hounsfield units (slope 1, intercept 0). Check the values.",
            {"images": unscaled}))
    if category == "localizer":
        kind, loadable = "localizer", False
        findings.append(GeometryFinding("localizer_excluded", "Localizer (scout) image: not part of a volume."))
    elif category == "secondary_capture":
        kind, loadable = "secondary_capture", False
        findings.append(GeometryFinding(
            "secondary_capture", "Secondary capture or colour image (e.g. a dose report): not a CT volume."))
    elif geometry.not_a_volume:
        kind, loadable = "not_a_volume", False
    elif len(geometry.slices) == 1:
        kind, loadable = "single_slice", True
    else:
        kind, loadable = "volume", True
    ordered = geometry.slices
    files = list(dict.fromkeys(s.ref for s in ordered))
    first = ordered[0]
    return SeriesInfo(
        key=key,
        series_uid=series_uid,
        study_uid=facts["StudyInstanceUID"],
        modality=facts["Modality"],
        series_description=facts["SeriesDescription"],
        series_number=facts["SeriesNumber"],
        patient_name=facts["PatientName"],
        patient_id=facts["PatientID"],
        study_description=facts["StudyDescription"],
        study_date=facts["StudyDate"],
        files=files,
        n_files=len(files),
        size_xyz=(first.columns, first.rows, len(ordered)),
        spacing_mm=geometry.spacing_mm,
        origin_mm=geometry.origin_mm,
        direction=geometry.direction,
        transfer_syntaxes=sorted({s.transfer_syntax for s in ordered}),
        findings=findings,
        kind=kind,
        loadable=loadable,
        frame_of_reference_uid=facts["FrameOfReferenceUID"],
        sop_class_uid=facts["SOPClassUID"],
        manufacturer=facts["Manufacturer"],
        slices=ordered,
        geometry=geometry,
    )


def _mark_orientation_localizers(series: list[SeriesInfo]) -> None:
    """A few images in a series whose orientation differs from its main stack are localizers."""
    for group in _parts_sharing_a_uid(series):
        main = max(group, key=lambda s: s.n_slices)
        for s in group:
            if s is main or s.kind not in ("single_slice", "volume") or s.n_slices > 3:
                continue
            if not np.allclose(s.direction[:, 2], main.direction[:, 2], atol=0.05) and main.n_slices > s.n_slices:
                s.kind, s.loadable = "localizer", False
                s.findings.append(GeometryFinding(
                    "localizer_excluded", "Orientation differs from the rest of the series: treated as a localizer."))


def _series_key(group_key: tuple, uid_count: dict[str, int]) -> str:
    uid = group_key[0]
    if uid and uid_count[uid] == 1:
        return uid
    digest = hashlib.sha1(repr(group_key).encode()).hexdigest()[:8]
    return f"{uid or 'blank-uid'}#{digest}"


def scan(
    paths: str | os.PathLike | Sequence[str | os.PathLike],
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> ScanResult:
    """Find the DICOM series in a folder (recursive), files, a .zip or a DICOMDIR."""
    refused_links: list[str] = []
    refs = expand_sources(paths, refused_links)
    report(progress, 0.0, f"reading {len(refs)} file headers", "scan")
    results: list[_FileHeader | SkippedFile] = []
    workers = min(8, 4 * threads.budget(), max(1, len(refs)))  # header reads wait on the disk: a few per core
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="medseg-scan") as pool:
        futures = [pool.submit(_read_one, ref) for ref in refs]
        try:
            for done, future in enumerate(as_completed(futures), 1):
                if cancel is not None and cancel.cancelled:
                    raise Cancelled()
                results.append(future.result())
                if done % 16 == 0 or done == len(refs):
                    report(progress, done / max(1, len(refs)), f"read {done} of {len(refs)} headers", "scan")
        except BaseException:
            for future in futures:
                future.cancel()
            raise
    order = {ref: i for i, ref in enumerate(refs)}
    results.sort(key=lambda r: order[r.path if isinstance(r, SkippedFile) else r.ref])
    skipped = [SkippedFile(link, LINK_LEAVES) for link in refused_links]
    skipped += [r for r in results if isinstance(r, SkippedFile)]
    headers = [r for r in results if isinstance(r, _FileHeader)]

    groups: dict[tuple, list[_FileHeader]] = defaultdict(list)
    for header in headers:
        groups[_group_key(header)].append(header)
    uid_count: dict[str, int] = defaultdict(int)
    for group_key in groups:
        uid_count[group_key[0]] += 1
    series = [_build_series(_series_key(k, uid_count), members, k[8]) for k, members in groups.items()]
    _mark_orientation_localizers(series)
    _note_split_series(series, {_series_key(k, uid_count): k for k in groups})
    series.sort(key=lambda s: (s.study_uid, _number(s.series_number), s.series_description, -s.n_slices, s.key))
    return ScanResult(series, skipped)


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return float("inf")
