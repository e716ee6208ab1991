"""Per-label measurements of a segmentation over its CT: what a clinician reports.

For every label: voxel count, volume (ml), HU mean / SD / min / max / median over the
label's voxels, and the bounding box in LPS millimetres (the axis-aligned box of the
voxel centres in patient space, so it is right on tilted and oblique grids too). SD is
the sample SD (n - 1), as SimpleITK's LabelStatistics and most viewers report it. Percentiles
(5, 25, 75, 95) are NumPy's default (linear between order statistics), as the median.

The size is the extent of the voxels themselves, not of their centres: a label over 7
slices of 5 mm is 35 mm tall (the centres span 30 mm), one slice is 5 mm, not 0 — as 3D
Slicer's Segment Statistics and ITK-SNAP report it. It is measured along the image's own
axes (columns, rows, slices: voxels counted times the spacing), each reported under the
patient axis it lies nearest (x, y, z). On an axial series that is the patient's box; on a
tilted one, z is along the slice normal, so a label on one slice is one slice's spacing tall
(the patient-axis box of a tilted slice grew with the label's height: 9 mm for one 2.4 mm
slice). The bounding box (bbox_*) stays in LPS millimetres.

These are medseg's standard definitions. TotalSegmentator's ``--statistics`` are computed
differently (the CT cast to int16, masks near the image's edge reported as 0, volume in mm³):
:mod:`medseg.edit.totalseg_stats` gives those, for numbers that compare with its statistics.json.
"""

from __future__ import annotations

import csv
import io
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Mapping

import numpy as np
from scipy import ndimage

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import GeometryError
from medseg.io.atomic import atomic_write_text

PERCENTILES = (5, 25, 75, 95)
STANDARD = "standard"  # the definitions these are (the exported files say so)
CSV_COLUMNS = ("value", "name", "voxels", "volume_ml", "hu_mean", "hu_sd", "hu_min", "hu_max", "hu_median",
               "hu_p5", "hu_p25", "hu_p75", "hu_p95",
               "bbox_min_x_mm", "bbox_min_y_mm", "bbox_min_z_mm", "bbox_max_x_mm", "bbox_max_y_mm", "bbox_max_z_mm",
               "size_x_mm", "size_y_mm", "size_z_mm")


@dataclass
class LabelStats:
    value: int
    name: str
    voxels: int
    volume_ml: float
    hu_mean: float
    hu_sd: float
    hu_min: float
    hu_max: float
    hu_median: float
    bbox_min_lps_mm: tuple[float, float, float]  # of the voxel centres
    bbox_max_lps_mm: tuple[float, float, float]
    voxel_extent_lps_mm: tuple[float, float, float] = (0.0, 0.0, 0.0)  # one voxel's LPS box
    hu_percentiles: tuple[float, ...] = ()  # at PERCENTILES
    # the voxels' extent along the image's axes, each under the patient axis it lies nearest (x, y, z);
    # None (figures made without it): the LPS box of the voxels' corners
    image_axes_size_mm: tuple[float, float, float] | None = None

    @property
    def size_mm(self) -> tuple[float, float, float]:
        """The extent of the label's voxels along the image's axes (see the module's doc), as x, y, z."""
        if self.image_axes_size_mm is not None:
            return self.image_axes_size_mm
        return tuple(float(b - a + v) for a, b, v in zip(self.bbox_min_lps_mm, self.bbox_max_lps_mm,  # type: ignore[return-value]
                                                         self.voxel_extent_lps_mm))

    def row(self) -> dict:
        lo, hi, size = self.bbox_min_lps_mm, self.bbox_max_lps_mm, self.size_mm
        return {"value": self.value, "name": self.name, "voxels": self.voxels, "volume_ml": round(self.volume_ml, 4),
                "hu_mean": round(self.hu_mean, 3), "hu_sd": round(self.hu_sd, 3), "hu_min": self.hu_min,
                "hu_max": self.hu_max, "hu_median": self.hu_median,
                **{f"hu_p{p}": round(v, 3) for p, v in zip(PERCENTILES, self.hu_percentiles)},
                "bbox_min_x_mm": round(lo[0], 3), "bbox_min_y_mm": round(lo[1], 3), "bbox_min_z_mm": round(lo[2], 3),
                "bbox_max_x_mm": round(hi[0], 3), "bbox_max_y_mm": round(hi[1], 3), "bbox_max_z_mm": round(hi[2], 3),
                "size_x_mm": round(size[0], 3), "size_y_mm": round(size[1], 3), "size_z_mm": round(size[2], 3)}

    def as_json(self) -> dict:
        data = asdict(self)
        data["size_mm"] = list(self.size_mm)
        data["hu_percentiles"] = {str(p): v for p, v in zip(PERCENTILES, self.hu_percentiles)}
        return data


def _physical_bbox(label_map: Volume, mask: np.ndarray, offset_zyx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Axis-aligned LPS box of the mask's voxel centres (exact for any direction matrix)."""
    lo = np.full(3, np.inf)
    hi = np.full(3, -np.inf)
    if np.allclose(np.abs(label_map.direction), np.round(np.abs(label_map.direction)), atol=1e-6):
        # Axis-aligned (possibly flipped/permuted) grid: the index box's corners are the extremes.
        z, y, x = np.nonzero(mask)
        ends = np.array([[x.min(), y.min(), z.min()], [x.max(), y.max(), z.max()]], dtype=float)
        ends += offset_zyx[::-1]
        corners = np.array([[ends[i, 0], ends[j, 1], ends[k, 2]] for i in (0, 1) for j in (0, 1) for k in (0, 1)])
        points = label_map.index_to_physical(corners)
        return points.min(axis=0), points.max(axis=0)
    for k in range(mask.shape[0]):
        y, x = np.nonzero(mask[k])
        if x.size == 0:
            continue
        index = np.column_stack([x + offset_zyx[2], y + offset_zyx[1], np.full(x.size, k + offset_zyx[0])])
        points = label_map.index_to_physical(index.astype(np.float64))
        lo = np.minimum(lo, points.min(axis=0))
        hi = np.maximum(hi, points.max(axis=0))
    return lo, hi


def nearest_patient_axes(direction: np.ndarray) -> tuple[int, int, int]:
    """For the patient's x, y, z: the image axis (0 columns, 1 rows, 2 slices) lying nearest to it —
    the permutation that keeps the most of the direction matrix (a sagittal series' columns are y)."""
    from itertools import permutations

    weight = np.abs(np.asarray(direction, dtype=float))  # [patient axis, image axis]
    return max(permutations(range(3)), key=lambda order: float(np.prod([weight[p, order[p]] for p in range(3)])))


def label_statistics(image: Volume, label_map: Volume, labels: Mapping[int, Label] | None = None) -> list[LabelStats]:
    """Statistics of every non-zero label of ``label_map`` over ``image`` (same grid), named by ``labels``
    (default: the label map's own table)."""
    if not label_map.same_grid(image):
        raise GeometryError("the segmentation is not on the image's grid; open it onto the image first")
    table = labels if labels is not None else label_map.meta.labels
    voxels = np.asarray(label_map.array)
    hu = np.asarray(image.array)
    stats = []
    # one voxel's box in LPS: each index axis's step, projected on L, P and S
    extent = tuple(float(v) for v in np.abs(np.asarray(label_map.direction)) @ np.asarray(label_map.spacing_mm))
    max_value = int(voxels.max(initial=0))
    if max_value == 0:
        return []
    spacing_xyz = np.asarray(label_map.spacing_mm, dtype=float)
    nearest = nearest_patient_axes(label_map.direction)
    boxes = ndimage.find_objects(voxels if voxels.dtype.kind in "ui" else voxels.astype(np.int32), max_label=max_value)
    for value, box in enumerate(boxes, start=1):
        if box is None:
            continue
        mask = voxels[box] == value
        values = hu[box][mask].astype(np.float64)
        if values.size == 0:
            continue
        offset = np.array([s.start for s in box])
        counted_xyz = np.array([s.stop - s.start for s in box][::-1], dtype=float)  # the box is tight: voxels
        along_image = counted_xyz * spacing_xyz
        lo, hi = _physical_bbox(label_map, mask, offset)
        median, *percentiles = np.percentile(values, [50, *PERCENTILES])  # one partial sort for all of them
        stats.append(LabelStats(
            value, table[value].name if value in table else f"label {value}", int(values.size),
            values.size * image.voxel_volume_ml,
            float(values.mean()), float(values.std(ddof=1)) if values.size > 1 else 0.0,
            float(values.min()), float(values.max()), float(median),
            tuple(float(v) for v in lo), tuple(float(v) for v in hi), extent,  # type: ignore[arg-type]
            tuple(float(v) for v in percentiles), tuple(float(along_image[axis]) for axis in nearest)))  # type: ignore[arg-type]
    return stats


def study_columns(image: Volume, patient_name: bool = False) -> dict[str, str]:
    """Which series the figures are of, as leading CSV columns: its UID and description (and the
    patient's name only when the user asks for it: a CSV travels further than the study)."""
    meta = image.meta
    columns = {"series_uid": meta.series_uid, "series_description": meta.series_description}
    if patient_name:
        columns["patient_name"] = meta.patient_name
    return columns


def stats_csv(stats: list[LabelStats], study: dict[str, str] | None = None) -> str:
    study = {**(study or {}), "definitions": STANDARD}
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*study, *CSV_COLUMNS], lineterminator="\n")
    writer.writeheader()
    for item in stats:
        writer.writerow({**study, **item.row()})
    return buffer.getvalue()


def is_stats_csv(path: str | os.PathLike) -> bool:
    """Is ``path`` a statistics table medseg wrote (its header ends with this table's columns, or names
    TotalSegmentator's definitions)?"""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            header = handle.readline().rstrip("\r\n")
    except OSError:
        return False
    return header.endswith(",".join(CSV_COLUMNS)) or "definitions,value,name,volume,intensity" in header


def is_stats_json(path: str | os.PathLike) -> bool:
    """Is ``path`` a statistics document medseg wrote?"""
    import json

    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return json.load(handle).get("format") == "medseg-statistics"
    except (OSError, ValueError, AttributeError):
        return False


def write_stats_csv(stats: list[LabelStats], path: str | os.PathLike, study: dict[str, str] | None = None) -> Path:
    """The table as CSV (one row per label, LPS millimetres; ``study``'s columns and the definitions first),
    written atomically."""
    return atomic_write_text(path, stats_csv(stats, study))


def stats_json(stats: list[LabelStats], study: dict[str, str] | None = None) -> dict:
    """The figures as a JSON document that says which definitions they follow."""
    return {"format": "medseg-statistics", "definitions": STANDARD,
            "about": "medseg's standard definitions: volume in ml, HU over the label's voxels as stored, SD with "
                     "n - 1, percentiles linear between order statistics; bounding box in LPS mm; size along the "
                     "image's axes (voxels counted times the spacing), each under the patient axis it lies nearest",
            "study": dict(study or {}), "labels": [item.as_json() for item in stats]}


def write_stats_json(document: dict, path: str | os.PathLike) -> Path:
    """A statistics document (:func:`stats_json` or TotalSegmentator's definitions) as JSON, written atomically."""
    import json

    return atomic_write_text(path, json.dumps(document, indent=1) + "\n")
