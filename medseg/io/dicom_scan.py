"""DICOM discovery: a header-only, parallel scan that groups images into series.

Headers are read with pydicom's ``stop_before_pixels`` in a thread pool (the work is
mostly file I/O). Images are grouped by Series Instance UID, and further split by frame
of reference, orientation, pixel spacing, rows/columns and series number/description,
so blank or duplicated UIDs (anonymised data) still give one series per stack.
Localizers, secondary captures and non-image objects never reach a volume; each is
reported with the reason. Reading one file's header is :mod:`medseg.io.dicom_file_header`.
"""

from __future__ import annotations

import hashlib
import os
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from medseg import threads
from medseg.core.volume import GeometryFinding
from medseg.errors import Cancelled, DicomError
from medseg.io.dicom_file_header import FileHeader, SkippedFile, read_one
from medseg.io.dicom_geometry import StackGeometry, analyze_stack
from medseg.io.dicom_headers import SliceHeader
from medseg.io.dicom_sources import expand_sources
from medseg.io.folder_walk import LINK_LEAVES
from medseg.progress import CancelToken, ProgressCallback, report


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


def _group_key(header: FileHeader) -> tuple:
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


def _build_series(key: str, members: list[FileHeader], category: str) -> SeriesInfo:
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
    results: list[FileHeader | SkippedFile] = []
    workers = min(8, 4 * threads.budget(), max(1, len(refs)))  # header reads wait on the disk: a few per core
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="medseg-scan") as pool:
        futures = [pool.submit(read_one, ref) for ref in refs]
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
    headers = [r for r in results if isinstance(r, FileHeader)]

    groups: dict[tuple, list[FileHeader]] = defaultdict(list)
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
