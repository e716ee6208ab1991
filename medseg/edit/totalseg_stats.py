"""Statistics by TotalSegmentator's ``--statistics`` definitions, for numbers that compare with its statistics.json.

TotalSegmentator 2.18.0 (``totalsegmentator.statistics.get_basic_statistics``) reports, for every
structure, a volume and an intensity, and defines them its own way:

- **volume** in mm³: the voxel count times the product of the voxel spacing;
- **intensity**: the mean (or, with ``-sa median``, the median) of the CT **cast to int16**
  (fractions cut toward zero) over the structure;
- **border rule** (on unless ``-sii``): a structure with any voxel in the first or last three
  slices of any axis is reported with volume 0 and intensity 0 — it may be cut off by the scan;
- with ``-sx``: ``n_voxels``, ``intensity_std`` (population SD, n), ``intensity_min``/``max``,
  ``centroid_vox`` and ``bbox_vox`` in voxel indices (i, j, k: x, y, z of the image as stored).

Rounding as TotalSegmentator's: intensity and SD to 5 decimals, the centroid to 2. A structure
the map does not contain is listed with zeros, as TotalSegmentator lists every class of its task.
medseg's own definitions (:mod:`medseg.edit.stats`) stay the default; this module is the option.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from typing import Mapping

import numpy as np
from scipy import ndimage

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import GeometryError

DEFINITIONS = "totalsegmentator"
VERSION = "2.18.0"  # the TotalSegmentator whose definitions these are (tests compare with it)
BORDER_SLICES = 3
CSV_COLUMNS = ("value", "name", "volume", "intensity", "n_voxels", "intensity_std", "intensity_min", "intensity_max",
               "centroid_vox", "bbox_vox")


@dataclass(frozen=True)
class TotalSegOptions:
    """TotalSegmentator's switches: ``-sa median`` (metric), ``-sii`` (not exclude_border), ``-sx`` (extra)."""

    metric: str = "mean"
    exclude_border: bool = True
    extra: bool = False

    def __post_init__(self) -> None:
        if self.metric not in ("mean", "median"):
            raise ValueError(f"intensity metric must be mean or median, not {self.metric!r}")

    def describe(self) -> str:
        switches = [s for s, on in (("-sa median", self.metric == "median"), ("-sii", not self.exclude_border),
                                    ("-sx", self.extra)) if on]
        return f"TotalSegmentator {VERSION} --statistics" + (f" ({' '.join(switches)})" if switches else "")


def _touches_border(box: tuple[slice, ...], shape: tuple[int, ...]) -> bool:
    """TotalSegmentator's rule: any voxel in the first or last BORDER_SLICES along any axis (from the bounding box)."""
    return any(s.start < BORDER_SLICES or s.stop > n - BORDER_SLICES for s, n in zip(box, shape))


def totalseg_statistics(image: Volume, label_map: Volume, table: Mapping[int, Label],
                        options: TotalSegOptions = TotalSegOptions()) -> dict[str, dict]:
    """``{name: {"volume": mm³, "intensity": …[, extra metrics]}}`` for every label of ``table``, in value order."""
    if not label_map.same_grid(image):
        raise GeometryError("the segmentation is not on the image's grid; open it onto the image first")
    labels = np.asarray(label_map.array)
    # TotalSegmentator reads the CT as float64 and casts it to int16 (truncating; wrapping outside int16)
    ct = np.asarray(image.array).astype(np.float64, copy=False).astype(np.int16)
    voxel_mm3 = float(np.prod(image.spacing_mm))
    top = max([int(labels.max(initial=0)), *table]) if table else int(labels.max(initial=0))
    boxes = ndimage.find_objects(labels if labels.dtype.kind in "ui" else labels.astype(np.int32), max_label=top)
    result: dict[str, dict] = {}
    for value, name in sorted((value, label.name) for value, label in table.items()):
        box = boxes[value - 1] if 0 < value <= len(boxes) else None
        entry: dict = {}
        if box is None or (options.exclude_border and _touches_border(box, labels.shape)):
            entry["volume"], entry["intensity"] = 0.0, 0.0
            if options.extra:
                entry.update(n_voxels=0, intensity_std=0.0, intensity_min=0.0, intensity_max=0.0, centroid_vox=None,
                             bbox_vox=None)
            result[name] = entry
            continue
        mask = labels[box] == value
        values = ct[box][mask]
        count = int(values.size)
        entry["volume"] = count * voxel_mm3
        if options.metric == "mean":
            # a sum of whole numbers is exact in float64: the same mean whatever the order of the terms
            entry["intensity"] = round(float(values.sum(dtype=np.float64)) / count, 5)
        else:
            entry["intensity"] = round(float(np.median(values)), 5)
        if options.extra:
            zyx = np.argwhere(mask) + np.array([s.start for s in box])
            xyz = zyx[:, ::-1]  # voxel index (i, j, k) of the image as stored
            entry.update(
                n_voxels=count, intensity_std=round(float(np.std(values)), 5), intensity_min=float(values.min()),
                intensity_max=float(values.max()), centroid_vox=[round(float(c), 2) for c in xyz.mean(axis=0)],
                bbox_vox=[[int(xyz[:, a].min()), int(xyz[:, a].max())] for a in range(3)])
        result[name] = entry
    return result


def totalseg_json(figures: dict[str, dict], options: TotalSegOptions, study: dict[str, str] | None = None) -> dict:
    """The document medseg writes: TotalSegmentator's per-structure entries under ``structures``, and what they are."""
    return {"format": "medseg-statistics", "definitions": DEFINITIONS, "about": options.describe() +
            ": volume in mm³ (voxels × voxel volume), intensity of the CT cast to int16"
            + ("; structures within 3 voxels of the image's edge reported as 0" if options.exclude_border else ""),
            "study": dict(study or {}), "structures": figures}


def totalseg_csv(figures: dict[str, dict], values: Mapping[str, int], options: TotalSegOptions,
                 study: dict[str, str] | None = None) -> str:
    """One row per structure; after the study's columns, one says which definitions (with TotalSegmentator's switches)."""
    study = {**(study or {}), "definitions": options.describe()}
    columns = CSV_COLUMNS if options.extra else CSV_COLUMNS[:4]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=[*study, *columns], lineterminator="\n")
    writer.writeheader()
    for name, entry in figures.items():
        row = {**study, "value": values.get(name, ""), "name": name}
        row.update({k: entry.get(k) for k in columns[2:]})
        writer.writerow(row)
    return buffer.getvalue()


__all__ = ["TotalSegOptions", "totalseg_statistics", "totalseg_json", "totalseg_csv", "DEFINITIONS", "VERSION"]
