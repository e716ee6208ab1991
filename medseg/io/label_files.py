"""Segmentation files: the one place that reads and writes them, and the one way to open one onto an image.

``liver.nii.gz`` gets ``liver.labels.json`` beside it (BIDS-style: same stem), the one sidecar
format (``"format": "medseg-labels/1"``): for every label its value, name, colour, SNOMED codes,
provenance (AUTOMATIC / SEMIAUTOMATIC / MANUAL with the model's name and version), lock and
visibility (a :class:`~medseg.core.labels.Label` row); the source series' UIDs (no patient
names or IDs); and, when medseg regularised the series (gantry tilt, gaps, variable spacing),
what it did and how — the label map lies on that regular grid, in the same patient coordinates
as the acquired slices. The flat sidecar older ``medseg edit`` wrote
(``{"<value>": {"name": ..., "color": [...], "locked": ...}}``) is still read.

:func:`medseg.io.segmentations.open_segmentation` is the one way to open a segmentation onto an image (the
GUI, the command line and the training datasets all call it): a NIfTI/NRRD/MHA label map with its
sidecar (:func:`read_label_map` here), or a DICOM SEG (:mod:`medseg.io.dicom_seg`). On the same grid a label map is taken
voxel for voxel; on another grid that overlaps the image it is placed in patient coordinates
(nearest neighbour, so no label value is invented; a raw stack's slices where they were
acquired) and a note says so; a map that does not overlap the image is refused.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from medseg.core.label_arrays import label_values
from medseg.core.label_values import MAX_LABEL_VALUE, label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume, VolumeMeta
from medseg.errors import GeometryError, ImageFormatError, MedsegError, SaveError
from medseg.io.atomic import atomic_write_text, check_writable
from medseg.io.dicom_seg import regularization_note
from medseg.io.digest import sha256_file
from medseg.io.file_types import DICOM_SEG, LABEL_MAP
from medseg.io.image_files import IMAGE_SUFFIXES, image_suffix, read_image, write_image
from medseg.io.json_files import read_json_object
from medseg.io.resample import place_labels

SIDECAR_SUFFIX = ".labels.json"
SIDECAR_FORMAT = "medseg-labels/1"


@dataclass
class LabelFileResult:
    """A segmentation opened onto an image."""

    label_map: Volume  # on the image's grid
    segments: list[Label]  # every label value present (and any the file describes), sorted by value
    notes: list[str] = field(default_factory=list)  # how it was placed, and its problems: the user must be told
    sidecar: Path | None = None
    placement: str = "exact"  # "exact", "resampled", "nearest_plane" (a SEG's frames between slices)
    format: str = LABEL_MAP  # or DICOM_SEG
    named: bool = False  # the names came from the file (a sidecar or the SEG), not from the values
    # how the labels were named or numbered, when the file did not say (no sidecar; a SEG without label values)
    naming: list[str] = field(default_factory=list)

    @property
    def named_by_header(self) -> bool:
        """The names came from the label map's own header (TotalSegmentator's label table), not from medseg."""
        return self.named and self.sidecar is None and self.format == LABEL_MAP

    @property
    def name_set_applies(self) -> bool:
        """A name set the user chose (TotalSegmentator's: names, codes, groups) describes this file: medseg did
        not (no sidecar, no SEG description), whether or not its header named the values."""
        return not self.named or self.named_by_header

    @property
    def labels(self) -> dict[int, Label]:
        return {label.value: label for label in self.segments}


def sidecar_path(path: str | os.PathLike) -> Path:
    path = Path(path)
    suffix = image_suffix(path) or path.suffix
    stem = path.name[: len(path.name) - len(suffix)] if suffix else path.stem
    return path.with_name(stem + SIDECAR_SUFFIX)


def _sidecar(label_map: Volume, image: Volume | None, labels: list[Label]) -> dict:
    source = image.meta if image is not None else label_map.meta
    regular = regularization_note(image) if image is not None else None
    return {
        "format": SIDECAR_FORMAT,
        "labels": [label.as_dict() for label in labels],
        "source": {
            "study_uid": source.study_uid, "series_uid": source.series_uid,
            "frame_of_reference_uid": source.frame_of_reference_uid,
            "series_description": source.series_description, "modality": source.modality,
        },
        "grid": {"size_xyz": list(label_map.size_xyz), "spacing_mm": list(label_map.spacing_mm),
                 "origin_lps_mm": list(label_map.origin_mm), "direction": label_map.direction.reshape(-1).tolist()},
        "regularized": regular,
    }


def write_label_map(label_map: Volume, path: str | os.PathLike, segments: list[Label] | None = None,
                    image: Volume | None = None, written_by: str = "medseg") -> tuple[Path, Path]:
    """Write the label map (format by suffix) and its ``.labels.json`` sidecar, both atomically.

    The sidecar describes every value present and every label in ``segments``, and records the
    written file's SHA-256 and ``written_by`` (e.g. "medseg edit"): a later command replaces only a
    file medseg wrote and nobody changed since (:func:`is_saved_segmentation`, :func:`is_written_by`)."""
    path = Path(path)
    array = np.asarray(label_map.array)
    present = label_values(array)
    given = {s.value: s for s in segments or []}
    described = label_map.meta.labels
    labels = [given.get(v) or described.get(v) or Label(v) for v in sorted(set(present) | set(given))]
    if array.dtype not in (np.uint8, np.uint16):
        dtype = label_dtype(int(array.max(initial=0))) if array.min(initial=0) >= 0 else np.uint16
        label_map = label_map.with_array(array.astype(dtype))
    try:
        written = write_image(label_map, path)
    except SaveError:
        raise
    except ImageFormatError as error:
        raise _save_error(path, error) from error
    record = _sidecar(label_map, image, labels)
    record["file"] = {"name": written.name, "sha256": sha256_file(written), "written_by": written_by}
    sidecar = atomic_write_text(sidecar_path(path), json.dumps(record, indent=1) + "\n")
    return written, sidecar




def unchanged_since_written(path: str | os.PathLike) -> tuple[list[Label], dict] | None:
    """The sidecar of a label map medseg wrote and nobody changed since (its recorded SHA-256 matches),
    else None (no sidecar, an older one without the record, a damaged one, or the file was changed)."""
    try:
        found = read_sidecar(path)
    except MedsegError:
        return None
    if found is None:
        return None
    record = found[1].get("file")
    if not isinstance(record, dict) or not isinstance(record.get("sha256"), str):
        return None
    try:
        return found if sha256_file(path) == record["sha256"] else None
    except OSError:
        return None


def is_written_by(path: str | os.PathLike, writer: str) -> bool:
    """Did ``writer`` (e.g. "medseg edit") write this label map, unchanged since?"""
    found = unchanged_since_written(path)
    return found is not None and found[1]["file"].get("written_by") == writer


def _save_error(path: Path, error: ImageFormatError) -> SaveError:
    """ITK does not say why a write failed: find out what can be found out, and say so."""
    if not path.parent.is_dir():
        return SaveError("the folder does not exist", path=path.parent, hint="create it or choose another folder")
    try:
        check_writable(path)
    except SaveError as writable:
        return writable
    return SaveError(f"cannot write the label map ({error.message})", path=path,
                     hint="the disk may be full or the file too large; free some space or choose another folder")


def read_sidecar(path: str | os.PathLike) -> tuple[list[Label], dict] | None:
    """The labels (and the whole record) of the sidecar beside a label map; None when there is none.

    Any malformed sidecar (garbage, a list, nesting 100 000 deep, a name that is a number, a
    value or colour out of range) is an ImageFormatError naming it; the label map itself is fine.
    """
    sidecar = sidecar_path(path)
    if not sidecar.is_file():
        return None
    data = read_json_object(sidecar, "label-name sidecar", ImageFormatError)
    try:
        if "format" in data or isinstance(data.get("labels"), list):
            if data.get("format", SIDECAR_FORMAT) != SIDECAR_FORMAT:
                raise ValueError(f"unknown format {data.get('format')!r} (this medseg reads {SIDECAR_FORMAT})")
            rows = data.get("labels")
            if not isinstance(rows, list):
                raise ValueError(f"'labels' must be a list, not {type(rows).__name__}")
            return [Label.from_dict(_checked_row(row)) for row in rows], data
        # The flat form older `medseg edit` wrote: {"<value>": {"name": ..., "color": [...], "locked": ...}}.
        return [Label.from_dict(_checked_row(row, int(value)), int(value)) for value, row in data.items()
                if str(value).isdigit() and isinstance(row, dict)], {}
    except (ValueError, KeyError, TypeError, AttributeError, OverflowError) as error:
        raise ImageFormatError(f"the label sidecar is not readable ({error})"[:300], path=sidecar,
                               hint="fix or delete it; the label map itself is fine") from error


def _checked_row(row: object, value: object = None) -> dict:
    """A sidecar row whose types and ranges Label.from_dict can trust (else ValueError saying which)."""
    if not isinstance(row, dict):
        raise ValueError(f"a label must be an object, not {type(row).__name__}")
    value = row.get("value") if value is None else value
    if isinstance(value, bool) or not isinstance(value, (int, str)) or not 0 <= int(value) <= MAX_LABEL_VALUE:
        raise ValueError(f"label value {value!r} is not a whole number in 0..{MAX_LABEL_VALUE}")
    if "name" in row and not isinstance(row["name"], str):
        raise ValueError(f"the name of label {value} must be text, not {row['name']!r}")
    color = row.get("color")
    if color is not None and (not isinstance(color, list) or len(color) != 3 or not all(
            isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in color)):
        raise ValueError(f"the colour of label {value} must be [r, g, b] of 0..255, not {color!r}"[:200])
    if "group" in row and row["group"] is not None and not isinstance(row["group"], str):
        raise ValueError(f"the group of label {value} must be text, not {row['group']!r}"[:200])
    moved = row.get("model_value")
    if moved is not None and (isinstance(moved, bool) or not isinstance(moved, int) or not 0 < moved <= MAX_LABEL_VALUE):
        raise ValueError(f"the model value of label {value} must be a whole number in 1..{MAX_LABEL_VALUE}, "
                         f"not {moved!r}"[:200])
    for key in ("category", "type", "modifier", "region", "region_modifier"):
        coded = row.get(key)
        if coded is not None and not (isinstance(coded, dict) and all(
                isinstance(coded.get(k), str) for k in ("value", "scheme", "meaning"))):
            raise ValueError(f"the {key} code of label {value} must have value, scheme and meaning")
    return row


def place_label_map(raw: Volume, image: Volume, path: str | os.PathLike | None = None) -> tuple[np.ndarray, str]:
    """``raw``'s labels on ``image``'s grid and how they got there ("exact" or "resampled"); refused
    when the two do not meet in patient space."""
    positions = raw.meta.extra.get("slice_positions_mm")
    if raw.same_grid(image, tol=1e-3) and (positions is None or positions == image.meta.extra.get("slice_positions_mm")):
        return np.asarray(raw.array), "exact"  # a file written from this grid is this grid, raw stack or not
    _check_overlap(raw, image, path)
    array = place_labels(raw, image)
    if not np.any(array):
        raise GeometryError("no labelled voxel falls inside the open image", path=path,
                            hint="open the image it was drawn on")
    return array, "resampled"


def read_label_map(path: str | os.PathLike, image: Volume) -> LabelFileResult:
    """A NIfTI/NRRD/MHA label map (described by its sidecar, if any) on ``image``'s grid."""
    path = Path(path)
    if image_suffix(path) is None:
        raise ImageFormatError("not a label-map file (by its name)", path=path,
                               hint="open " + ", ".join(IMAGE_SUFFIXES) + " or a DICOM SEG (.dcm)")
    raw = read_image(path)
    if np.issubdtype(raw.array.dtype, np.floating):
        if not np.array_equal(raw.array, np.round(raw.array)) or raw.array.min() < 0:
            raise ImageFormatError("this is not a label map: its voxels are not whole non-negative numbers", path=path,
                                   hint="open it as an image instead")
    if raw.array.min() < 0:
        raise ImageFormatError("this is not a label map: it has negative values", path=path)
    if raw.array.max() > MAX_LABEL_VALUE:
        raise ImageFormatError(f"label values up to {raw.array.max()} are too large ({MAX_LABEL_VALUE} at most)",
                               path=path)
    notes: list[str] = []
    naming: list[str] = []
    sidecar = read_sidecar(path)
    array, placement = place_label_map(raw, image, path)
    if placement == "resampled":
        notes.append("the label map is on another grid than the image: resampled onto the image in patient "
                     "coordinates (nearest neighbour)")
    dtype = label_dtype(int(array.max(initial=0)))
    array = np.ascontiguousarray(array.astype(dtype, copy=False))
    present = label_values(array)
    if sidecar is not None:
        described, data = sidecar
        by_value = {label.value: label for label in described}
        labels = [by_value.get(v) or Label(v) for v in sorted(set(present) | set(by_value))]
        source_for = (data.get("source") or {}).get("frame_of_reference_uid") or ""
        if source_for and image.meta.frame_of_reference_uid and source_for != image.meta.frame_of_reference_uid:
            notes.append("the sidecar names another frame of reference than the open image: check that this is "
                         "the right scan")
        if data.get("regularized") and image.meta.extra.get("raw_stack", True):
            notes.append("the label map was drawn on medseg's regularised grid; this image is the raw stack")
    elif raw.meta.labels:
        labels = [raw.meta.labels.get(v) or Label(v) for v in present]
        unnamed = [v for v in present if v not in raw.meta.labels]
        naming.append(f"no {SIDECAR_SUFFIX} sidecar: the labels are named from the label table in the file's header "
                      f"(as TotalSegmentator writes it)" + (f"; {len(unnamed)} value(s) it does not name are named by "
                                                            f"value" if unnamed else ""))
    else:
        labels = [Label(v) for v in present]
        naming.append(f"no {SIDECAR_SUFFIX} sidecar: labels are named by value")
    label_map = image.with_array(array)
    label_map.meta = VolumeMeta(modality="SEG", labels={s.value: s for s in labels},
                                source_files=[str(path)], extra={"format": image_suffix(path)})
    return LabelFileResult(label_map, labels, notes, sidecar_path(path) if sidecar else None, placement,
                           LABEL_MAP, sidecar is not None or bool(raw.meta.labels), naming)


def _check_overlap(raw: Volume, image: Volume, path: str | os.PathLike | None) -> None:
    """Refuse a label map whose box does not meet the image's in patient space."""
    def corners(volume: Volume) -> np.ndarray:
        size = np.asarray(volume.size_xyz) - 1
        grid = np.array([[i, j, k] for i in (0, size[0]) for j in (0, size[1]) for k in (0, size[2])], dtype=float)
        return volume.index_to_physical(grid)
    inside = image.physical_to_index(corners(raw))
    lo, hi = inside.min(axis=0), inside.max(axis=0)
    size = np.asarray(image.size_xyz)
    if np.any(hi < -0.5) or np.any(lo > size - 0.5):
        raise GeometryError("the label map lies entirely outside the open image in patient space", path=path,
                            hint="open the image it was drawn on")


def open_dicom_seg(path: Path, image: Volume) -> LabelFileResult:
    """A DICOM SEG opened onto ``image`` (the DICOM SEG row's ``open_segmentation``)."""
    from medseg.io.dicom_seg_read import read_dicom_seg

    result = read_dicom_seg(path, image)
    naming = [] if result.values_restored else [
        f"this DICOM SEG does not record label values (it was not written by medseg): its "
        f"{len(result.segments)} segments take their segment numbers as label values"]
    return LabelFileResult(result.label_map, result.segments, result.notes, None, result.placement,
                           DICOM_SEG, True, naming)


def label_map_of_sidecar(path: Path) -> Path:
    if not path.name.lower().endswith(SIDECAR_SUFFIX):
        return path
    stem = path.name[: -len(SIDECAR_SUFFIX)]
    found = [path.with_name(stem + suffix) for suffix in IMAGE_SUFFIXES if path.with_name(stem + suffix).is_file()]
    if len(found) == 1:
        return found[0]
    raise ImageFormatError("this is a label sidecar (names and colours), not a label map" +
                           (f"; several label maps share its name: {', '.join(p.name for p in found)}" if found else
                            " and no label map lies beside it"), path=path,
                           hint="open the label map (" + ", ".join(f"{stem}{s}" for s in IMAGE_SUFFIXES[:3]) +
                                ", ...) instead")


def is_unchanged_model_label_map(path: Path) -> bool:
    """A label map medseg wrote, nobody changed since, and every label of it AUTOMATIC (the label-map rows'
    ``unchanged_model_result``)."""
    from medseg.core.labels import AUTOMATIC

    found = unchanged_since_written(path)
    return found is not None and all(label.provenance.algorithm_type == AUTOMATIC for label in found[0])


def write_dicom_seg_noted(label_map: Volume, image: Volume, path: Path, segments: list[Label] | None,
                          written_by: str = "medseg") -> list[str]:
    """The DICOM SEG row's writer: the SEG (medseg's name is in its header, not ``written_by``), and notes."""
    from medseg.io.dicom_seg_write import write_dicom_seg

    result = write_dicom_seg(label_map, image, path, segments)
    return [f"DICOM SEG with {len(result.segments)} segments, {result.n_frames} frames "
            f"({'frames reference their source images' if result.mode == 'acquired' else 'frames on the regular grid'})",
            *result.notes]


def write_label_map_noted(label_map: Volume, image: Volume, path: Path, segments: list[Label] | None,
                          written_by: str = "medseg") -> list[str]:
    """The label-map rows' writer: the map and its sidecar, and notes."""
    written, sidecar = write_label_map(label_map, path, segments, image, written_by)
    notes = [f"label names in {sidecar.name}"]
    if regularization_note(image):
        notes.append("the series was regularised; the sidecar records how")
    return notes
