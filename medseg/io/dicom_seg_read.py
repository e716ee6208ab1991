"""Read a DICOM SEG onto an open image, every frame placed by its own position and orientation.

Frames on an image slice with the same pixel grid are pasted exactly; parallel frames elsewhere
are placed by nearest plane and nearest pixel; oblique SEGs are resampled (nearest). See
:mod:`medseg.io.dicom_seg` for the whole picture.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np

from medseg.core.label_arrays import remap_values
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume, VolumeMeta
from medseg.errors import GeometryError, MedsegError
from medseg.io.dicom_seg import first_item
from medseg.io.dicom_seg_segments import read_segments, recorded_values

__all__ = ["SegReadResult", "read_dicom_seg"]

POSITION_TOLERANCE_VOXEL = 0.05  # of a voxel: rounding in DS strings is far below this


@dataclass
class SegReadResult:
    label_map: Volume  # on the image's grid
    segments: list[Label]  # value = the label value in label_map
    notes: list[str] = field(default_factory=list)
    placement: str = "exact"  # "exact", "nearest_plane" or "resampled"
    values_restored: bool = True  # False: the SEG recorded no label values; they are its segment numbers


@dataclass
class _Frame:
    index: int  # 0-based frame index in the SEG
    segment: int
    position: np.ndarray
    row_dir: np.ndarray  # direction of increasing column index
    col_dir: np.ndarray  # direction of increasing row index
    spacing_rc: tuple[float, float]  # (between rows, between columns) in mm


def _frames(seg: Any) -> list[_Frame]:
    shared = first_item(seg, "SharedFunctionalGroupsSequence")
    per_frame = seg.get("PerFrameFunctionalGroupsSequence") or [None] * int(seg.get("NumberOfFrames", 1))
    labelmap = str(seg.get("SegmentationType", "")) == "LABELMAP"
    frames = []
    for index, groups in enumerate(per_frame):
        def pick(keyword: str) -> Any:
            return first_item(groups, keyword) or first_item(shared, keyword)
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
    except Exception as error:  # pydicom datasets raise many types on malformed content
        raise GeometryError(f"the DICOM SEG is malformed ({type(error).__name__}: {error})"[:400], path=path,
                            hint="export it again from the program that made it") from error


def _read_dicom_seg(path: str | os.PathLike, image: Volume) -> SegReadResult:
    import pydicom

    path = Path(path)
    if not path.is_file():
        raise GeometryError("no such file", path=path)
    try:
        seg = pydicom.dcmread(str(path))
    except Exception as error:  # pydicom raises many types for a broken file
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
    segments = read_segments(seg)
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
    values = recorded_values(seg, numbers)
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
            except Exception as error:  # highdicom raises many types for a bad SEG
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
    except Exception as error:
        raise GeometryError(f"the SEG's frames do not form a volume that can be placed on this image ({error})"[:400],
                            path=path) from error
    affine = volume.affine
    array = np.asarray(volume.array)  # (slice, row, col)
    spacing = np.linalg.norm(affine[:3, :3], axis=0)
    direction = np.column_stack([affine[:3, 2] / spacing[2], affine[:3, 1] / spacing[1], affine[:3, 0] / spacing[0]])
    seg_volume = Volume(array.astype(dtype), (spacing[2], spacing[1], spacing[0]), affine[:3, 3], direction)
    return resample_to(seg_volume, image, "nearest", 0).array.astype(dtype)
