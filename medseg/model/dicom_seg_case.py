"""A training case from a DICOM series and a DICOM SEG drawn on it (Qt-free).

The SEG is found by its SOP Class (Segmentation Storage) when the user gives one folder
holding both; the series it was drawn on is found among the scanned series through the
SEG's Referenced Series Sequence, or, when the UIDs differ there, through the SOP
instances its frames and references name. The SEG is placed onto the loaded series' grid
by the I/O layer's reader (:func:`medseg.io.dicom_seg_read.read_dicom_seg`, every frame by its
own position), so the case written into the training set is image + label map on one grid.

What the reader had to approximate (frames between slices, oblique planes, frames cut at
the edge) and segments with no voxel on this series are returned as the case's notes, which
the dataset table shows as problems.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import DatasetError, MedsegError

SEGMENTATION_STORAGE = "1.2.840.10008.5.1.4.1.1.66.4"


@dataclass
class SegReference:
    """What a SEG says it was drawn on."""

    series_uids: set[str]
    instance_uids: set[str]
    segment_names: dict[int, str]  # segment number -> label


@dataclass
class SegCase:
    image: Volume
    label_map: Volume  # segment numbers on the image's grid
    labels: dict[int, Label]  # label value -> the SEG's segment (its label, colour, coded concept)
    series_path: Path
    seg_path: Path
    notes: list[str] = field(default_factory=list)


def _header(path: Path) -> Any | None:
    import pydicom

    try:
        return pydicom.dcmread(str(path), stop_before_pixels=True)
    except Exception:  # noqa: BLE001 - not DICOM (or not readable): not a SEG
        return None


def is_segmentation(dataset: Any) -> bool:
    return dataset is not None and str(dataset.get("SOPClassUID", "")) == SEGMENTATION_STORAGE


def find_seg_files(folder: str | Path) -> list[Path]:
    """The DICOM SEG files (by SOP Class) under ``folder``."""
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError("not a folder", path=folder)
    return sorted(p for p in folder.rglob("*") if p.is_file() and is_segmentation(_header(p)))


def find_seg_in_folder(folder: str | Path) -> Path:
    """The one DICOM SEG in a folder that holds a series and its SEG."""
    found = find_seg_files(folder)
    if not found:
        raise DatasetError("no DICOM SEG (Segmentation Storage) among the files", path=folder,
                           hint="pick the SEG file itself")
    if len(found) > 1:
        names = ", ".join(p.name for p in found[:6])
        raise DatasetError(f"{len(found)} DICOM SEG files ({names}): cannot tell which one to add", path=folder,
                           hint="pick the SEG file itself")
    return found[0]


def read_seg_reference(seg_path: str | Path) -> SegReference:
    """The series and instances a SEG references, and its segments; refuses what is not a usable SEG."""
    seg_path = Path(seg_path)
    if not seg_path.is_file():
        raise DatasetError("no such file", path=seg_path)
    dataset = _header(seg_path)
    if not is_segmentation(dataset):
        raise DatasetError("not a DICOM SEG (its SOP Class is not Segmentation Storage)", path=seg_path)
    segments = dataset.get("SegmentSequence") or []
    if not segments:
        raise DatasetError("the DICOM SEG has no segments", path=seg_path)
    series_uids: set[str] = set()
    instance_uids: set[str] = set()
    for item in dataset.get("ReferencedSeriesSequence") or []:
        if item.get("SeriesInstanceUID"):
            series_uids.add(str(item.SeriesInstanceUID))
        instance_uids.update(str(r.ReferencedSOPInstanceUID) for r in item.get("ReferencedInstanceSequence") or []
                             if r.get("ReferencedSOPInstanceUID"))
    for frame in dataset.get("PerFrameFunctionalGroupsSequence") or []:
        for derivation in frame.get("DerivationImageSequence") or []:
            instance_uids.update(str(s.ReferencedSOPInstanceUID) for s in derivation.get("SourceImageSequence") or []
                                 if s.get("ReferencedSOPInstanceUID"))
    names = {int(s.SegmentNumber): str(s.get("SegmentLabel", "") or f"segment {int(s.SegmentNumber)}")
             for s in segments}
    return SegReference(series_uids, instance_uids, names)


def _referenced_series(scan_result: Any, reference: SegReference, series_path: Path, seg_path: Path) -> Any:
    by_uid = [s for s in scan_result.series if s.series_uid and s.series_uid in reference.series_uids]
    by_instance = [s for s in scan_result.series
                   if reference.instance_uids & {h.sop_instance_uid for h in s.slices if h.sop_instance_uid}]
    matches = by_uid or by_instance
    loadable = [s for s in matches if s.loadable]
    if loadable:
        return max(loadable, key=lambda s: s.n_slices)
    found = "; ".join(f"{s.series_description or s.key} ({s.n_slices} images)" for s in scan_result.series) or "none"
    wanted = ", ".join(sorted(reference.series_uids)) or "no series UID"
    if matches:
        raise DatasetError(f"the series this DICOM SEG references is not a loadable CT volume ({found})",
                           path=seg_path)
    raise DatasetError(f"the DICOM SEG does not reference the series in {series_path} (it references {wanted}; "
                       f"series there: {found})", path=seg_path, hint="pick the series the SEG was drawn on")


def load_seg_case(series_path: str | Path, seg_path: str | Path | None = None) -> SegCase:
    """Load the series a SEG references and place the SEG on it.

    ``seg_path`` None: ``series_path`` is one folder holding both (the SEG found by its SOP Class).
    """
    from medseg.io.dicom_load import load_series
    from medseg.io.dicom_scan import scan
    from medseg.io.segmentations import open_segmentation

    series_path = Path(series_path)
    seg_path = find_seg_in_folder(series_path) if seg_path is None else Path(seg_path)
    reference = read_seg_reference(seg_path)
    if not series_path.exists():
        raise DatasetError("no such folder", path=series_path)
    series = _referenced_series(scan(series_path), reference, series_path, seg_path)
    image = load_series(series)
    try:
        result = open_segmentation(seg_path, image)
    except MedsegError as error:
        raise DatasetError(f"cannot place the DICOM SEG on its series: {error.message}", path=seg_path,
                           hint=error.hint) from error
    notes = [f"SEG: {note}" for note in result.notes]
    present = set(np.unique(result.label_map.array).tolist()) - {0}
    empty = [s.name for s in result.segments if s.value not in present]
    if empty:
        notes.append("empty mask: " + ", ".join(empty))
    return SegCase(image, result.label_map, {s.value: s for s in result.segments}, series_path, seg_path, notes)
