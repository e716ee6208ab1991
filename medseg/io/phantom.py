"""The built-in demo study: a generated synthetic torso phantom written as a DICOM CT series.

medseg ships no patient data, yet the quick start (``make run``, ``medseg info`` without a
path) needs a study to open. This module draws a torso from smooth shapes (superellipse
body, ellipsoid organs, tubes for ribs and vessels) with realistic Hounsfield units,
puts a patient table under it (the rule-based labeller must leave the table out), blurs
the edges a little (partial volume) and adds Gaussian noise. The same seed gives the
same voxels, so tests can compare against the ground-truth label map that is drawn with
the image (:func:`make_phantom`).

The series is deliberately anisotropic (1.5 mm pixels, 2.5 mm slices) like a routine
clinical CT, so the spacing-planned network sees the case it is built for. Every
description tag says the data is synthetic.

Anatomy coordinates are millimetres in LPS (x to the patient's left, y to the back,
z up); the torso's centre is at (0, 0, 120) and the grid is always centred there.
"""

from __future__ import annotations

import datetime
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import numpy as np
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import CTImageStorage, ExplicitVRLittleEndian, PYDICOM_IMPLEMENTATION_UID, generate_uid
from scipy import ndimage

from medseg import app_dirs
from medseg.errors import MedsegError
from medseg.io.atomic import atomic_folder, atomic_write_text
from medseg.io.file_checks import IncompleteFile
from medseg.core.volume import Volume, VolumeMeta
from medseg.progress import CancelToken, ProgressCallback, report

PHANTOM_VERSION = "demo-phantom-v1"
SYNTHETIC_NOTE = "SYNTHETIC DEMO PHANTOM - not patient data"
DEFAULT_SHAPE_ZYX: tuple[int, int, int] = (96, 256, 256)
DEFAULT_SPACING_XYZ: tuple[float, float, float] = (1.5, 1.5, 2.5)
NOISE_SD_HU = 12.0
RESCALE_INTERCEPT = -1024.0
COMPLETE_MARKER = "complete.json"  # "<folder>.complete.json" beside the folder, written last

# Ground-truth labels drawn with the image. Liver is extra: the fine-tuning example adds it.
PHANTOM_LABELS: dict[int, str] = {0: "background", 1: "body", 2: "lungs", 3: "bones", 4: "liver"}

# Typical CT numbers (HU) of the tissues drawn; tests check the written series against them.
TISSUE_HU: dict[str, float] = {
    "air": -1000.0,
    "lung": -850.0,
    "fat": -100.0,
    "visceral_fat": -90.0,
    "muscle": 40.0,
    "blood": 40.0,
    "liver": 60.0,
    "spleen": 50.0,
    "kidney": 35.0,
    "stomach": 25.0,
    "bladder": 10.0,
    "disc": 80.0,
    "trabecular_bone": 250.0,
    "cortical_bone": 900.0,
    "dense_cortical_bone": 1100.0,
    "posterior_elements": 700.0,
    "table_shell": 500.0,
    "table_foam": -900.0,
}

_ANATOMY_CENTRE_Z_MM = 120.0
_BACKGROUND, _BODY, _LUNGS, _BONES, _LIVER = 0, 1, 2, 3, 4


@dataclass(frozen=True)
class Phantom:
    """The phantom's CT image (HU, float32 rounded to integers) and its ground-truth label map."""

    image: Volume
    label_map: Volume


# --- geometry helpers ----------------------------------------------------------------------


class _Canvas:
    """HU and label arrays with the physical coordinates of their voxel centres."""

    def __init__(self, shape_zyx: tuple[int, int, int], spacing_xyz: tuple[float, float, float]):
        nz, ny, nx = shape_zyx
        sx, sy, sz = spacing_xyz
        self.origin_xyz = (-(nx - 1) * sx / 2.0, -(ny - 1) * sy / 2.0, _ANATOMY_CENTRE_Z_MM - (nz - 1) * sz / 2.0)
        self.x = self.origin_xyz[0] + sx * np.arange(nx, dtype=np.float32)
        self.y = self.origin_xyz[1] + sy * np.arange(ny, dtype=np.float32)
        self.z = self.origin_xyz[2] + sz * np.arange(nz, dtype=np.float32)
        self.hu = np.full(shape_zyx, TISSUE_HU["air"], dtype=np.float32)
        self.labels = np.zeros(shape_zyx, dtype=np.uint8)

    def box(self, lo: Iterable[float], hi: Iterable[float]) -> tuple[tuple[slice, slice, slice], np.ndarray, np.ndarray, np.ndarray] | None:
        """Index slices covering the physical box [lo, hi] (x, y, z) and the coordinates inside it."""
        (x0, y0, z0), (x1, y1, z1) = tuple(lo), tuple(hi)
        ranges = []
        for axis, a, b in ((self.z, z0, z1), (self.y, y0, y1), (self.x, x0, x1)):
            i0, i1 = int(np.searchsorted(axis, a, "left")), int(np.searchsorted(axis, b, "right"))
            if i1 <= i0:
                return None
            ranges.append(slice(i0, i1))
        zs, ys, xs = ranges
        return (zs, ys, xs), self.z[zs][:, None, None], self.y[ys][None, :, None], self.x[xs][None, None, :]

    def paint(self, region: tuple[tuple[slice, slice, slice], np.ndarray] | None, hu: float, label: int | None) -> None:
        if region is None:  # the shape lies outside this grid
            return
        slices, mask = region
        self.hu[slices][mask] = hu
        if label is not None:
            self.labels[slices][mask] = label


def _ellipsoid(canvas: _Canvas, centre, semi, shrink: float = 0.0):
    """Voxels inside an axis-aligned ellipsoid; ``shrink`` mm thins it (for a cortical shell's inside)."""
    semi = np.maximum(np.asarray(semi, dtype=np.float32) - shrink, 0.1)
    centre = np.asarray(centre, dtype=np.float32)
    found = canvas.box(centre - semi, centre + semi)
    if found is None:
        return None
    slices, z, y, x = found
    rho = ((x - centre[0]) / semi[0]) ** 2 + ((y - centre[1]) / semi[1]) ** 2 + ((z - centre[2]) / semi[2]) ** 2
    return slices, rho <= 1.0


def _elliptic_cylinder(canvas: _Canvas, centre_xy, semi_xy, z_range, shrink: float = 0.0, exponent: float = 2.0):
    """Voxels inside a (super)elliptic cylinder along z between z_range (mm)."""
    ax, ay = max(semi_xy[0] - shrink, 0.1), max(semi_xy[1] - shrink, 0.1)
    cx, cy = centre_xy
    found = canvas.box((cx - ax, cy - ay, z_range[0] + shrink), (cx + ax, cy + ay, z_range[1] - shrink))
    if found is None:
        return None
    slices, z, y, x = found
    inside = np.abs((x - cx) / ax) ** exponent + np.abs((y - cy) / ay) ** exponent <= 1.0
    return slices, np.broadcast_to(inside, (z.shape[0],) + inside.shape[1:])


def _paint_shelled(canvas: _Canvas, shape_fn, cortex_mm: float, cortex_hu: float, inner_hu: float, label: int) -> None:
    """A bone: a dense cortical shell around trabecular bone (both labelled bone)."""
    outer = shape_fn(0.0)
    if outer is not None:
        canvas.paint(outer, cortex_hu, label)
    inner = shape_fn(cortex_mm)
    if inner is not None:
        canvas.paint(inner, inner_hu, label)


def _tube_distance(canvas: _Canvas, points: np.ndarray, radii: np.ndarray, out: np.ndarray) -> None:
    """Fold a polyline tube into ``out``: the signed distance (mm) to its surface, minimum kept.

    Each segment only touches its own small bounding box, so long curved tubes (ribs)
    cost little.
    """
    for a, b, ra, rb in zip(points[:-1], points[1:], radii[:-1], radii[1:]):
        r = max(ra, rb)
        found = canvas.box(np.minimum(a, b) - r, np.maximum(a, b) + r)
        if found is None:
            continue
        slices, z, y, x = found
        ab = b - a
        length2 = float(ab @ ab) or 1e-6
        t = np.clip(((x - a[0]) * ab[0] + (y - a[1]) * ab[1] + (z - a[2]) * ab[2]) / length2, 0.0, 1.0)
        d = np.sqrt((x - a[0] - t * ab[0]) ** 2 + (y - a[1] - t * ab[1]) ** 2 + (z - a[2] - t * ab[2]) ** 2)
        signed = d - (ra + t * (rb - ra))
        np.minimum(out[slices], signed, out=out[slices])


# --- anatomy ---------------------------------------------------------------------------------

_BODY_SEMI = (155.0, 117.0)  # superellipse half-width / half-depth (mm)
_BODY_EXPONENT = 2.4  # > 2 gives the flatter sides and back of a torso
_FAT_MM = 14.0


def _draw_table(canvas: _Canvas) -> None:
    """A curved carbon-fibre table: two dense shells around a foam core, 6 mm below the back."""
    found = canvas.box((-1e4, 120.0, -1e4), (1e4, 160.0, 1e4))
    if found is None:
        return
    slices, z, y, x = found
    top = 123.0 - 0.0006 * x**2  # curves up towards the patient at the sides
    depth = y - top
    shape = (z.shape[0], y.shape[1], x.shape[2])
    shell = np.broadcast_to(((depth >= 0) & (depth < 3.0)) | ((depth >= 15.0) & (depth < 18.0)), shape)
    foam = np.broadcast_to((depth >= 3.0) & (depth < 15.0), shape)
    canvas.paint((slices, foam), TISSUE_HU["table_foam"], _BACKGROUND)
    canvas.paint((slices, shell), TISSUE_HU["table_shell"], _BACKGROUND)


def _draw_body_wall(canvas: _Canvas, z_range: tuple[float, float]) -> None:
    def body(shrink: float):
        return _elliptic_cylinder(canvas, (0.0, 0.0), _BODY_SEMI, z_range, shrink, _BODY_EXPONENT)

    canvas.paint(body(0.0), TISSUE_HU["fat"], _BODY)
    canvas.paint(body(_FAT_MM), TISSUE_HU["muscle"], _BODY)
    # the abdominal cavity is full of fat around the organs
    canvas.paint(_ellipsoid(canvas, (0.0, -15.0, 55.0), (115.0, 72.0, 75.0)), TISSUE_HU["visceral_fat"], _BODY)


def _draw_abdomen(canvas: _Canvas, rng: np.random.Generator) -> None:
    paint = canvas.paint
    paint(_ellipsoid(canvas, (-60.0, -5.0, 105.0), (85.0, 75.0, 55.0)), TISSUE_HU["liver"], _LIVER)
    paint(_ellipsoid(canvas, (85.0, 35.0, 120.0), (28.0, 40.0, 40.0)), TISSUE_HU["spleen"], _BODY)
    for side in (-1.0, 1.0):
        paint(_ellipsoid(canvas, (side * 68.0, 45.0, 80.0 + 8.0 * side), (24.0, 20.0, 45.0)), TISSUE_HU["kidney"], _BODY)
    paint(_ellipsoid(canvas, (0.0, -45.0, 5.0), (45.0, 35.0, 30.0)), TISSUE_HU["bladder"], _BODY)
    # stomach with a gas cap at the front (patient supine): bowel gas the labeller must not call lung
    paint(_ellipsoid(canvas, (45.0, -35.0, 120.0), (35.0, 32.0, 30.0)), TISSUE_HU["stomach"], _BODY)
    gas = _ellipsoid(canvas, (45.0, -48.0, 122.0), (28.0, 16.0, 22.0))
    paint(gas, TISSUE_HU["air"], _BODY)
    # scattered gas in the bowel loops of the lower abdomen
    for _ in range(7):
        centre = (rng.uniform(-70, 70), rng.uniform(-70, 0), rng.uniform(30, 75))
        size = rng.uniform(6, 14)
        paint(_ellipsoid(canvas, centre, (size * 1.4, size, size * 1.2)), TISSUE_HU["air"], _BODY)


def _draw_chest(canvas: _Canvas, rng: np.random.Generator) -> None:
    """Lungs (carved by the liver dome and the heart), lung vessels, heart, aorta and trachea."""
    shape = canvas.hu.shape
    lung_mask = np.zeros(shape, dtype=bool)
    for side in (-1.0, 1.0):
        region = _ellipsoid(canvas, (side * 70.0, 8.0, 185.0 - 5.0 * side), (52.0, 60.0, 100.0))
        if region is not None:
            lung_mask[region[0]] |= region[1]
    for carve_centre, carve_semi in (
        ((-60.0, -5.0, 105.0), (91.0, 81.0, 61.0)),  # the liver dome pushes up the right lung
        ((50.0, 0.0, 100.0), (70.0, 80.0, 50.0)),  # spleen/stomach under the left dome
        ((15.0, -25.0, 160.0), (60.0, 55.0, 50.0)),  # the heart
    ):
        region = _ellipsoid(canvas, carve_centre, carve_semi)
        if region is not None:
            lung_mask[region[0]] &= ~region[1]
    canvas.hu[lung_mask] = TISSUE_HU["lung"]
    canvas.labels[lung_mask] = _LUNGS

    # vessels fan out from each hilum; they are part of the lung label (as in TotalSegmentator)
    vessel_sdf = np.full(shape, np.inf, dtype=np.float32)
    for side in (-1.0, 1.0):
        hilum = np.array([side * 45.0, 5.0, 170.0], dtype=np.float32)
        for _ in range(22):
            direction = rng.normal(size=3) + np.array([side * 1.2, 0.0, 0.0])
            direction /= np.linalg.norm(direction)
            length = rng.uniform(40.0, 110.0)
            bend = rng.normal(scale=8.0, size=3)
            t = np.linspace(0.0, 1.0, 6, dtype=np.float32)[:, None]
            points = hilum + t * length * direction + np.sin(np.pi * t) * bend
            radii = np.linspace(3.5, 0.9, 6)
            _tube_distance(canvas, points.astype(np.float32), radii, vessel_sdf)
    vessels = (vessel_sdf <= 0) & lung_mask
    canvas.hu[vessels] = TISSUE_HU["blood"]

    canvas.paint(_ellipsoid(canvas, (15.0, -25.0, 160.0), (55.0, 50.0, 45.0)), TISSUE_HU["blood"], _BODY)
    z_top = float(canvas.z[-1]) + 10.0
    aorta = np.full(shape, np.inf, dtype=np.float32)
    _tube_distance(canvas, np.array([[22.0, 38.0, -20.0], [22.0, 38.0, 190.0], [10.0, -5.0, 215.0], [-5.0, -25.0, 195.0]], np.float32), np.full(4, 12.0), aorta)
    canvas.hu[aorta <= 0] = TISSUE_HU["blood"]
    canvas.labels[aorta <= 0] = _BODY
    def trachea(shrink: float):
        return _elliptic_cylinder(canvas, (0.0, -15.0), (10.0, 10.0), (200.0, z_top), shrink)

    canvas.paint(trachea(0.0), TISSUE_HU["muscle"], _BODY)
    canvas.paint(trachea(2.0), TISSUE_HU["air"], _BODY)


def _draw_skeleton(canvas: _Canvas) -> None:
    cortical, trabecular = TISSUE_HU["cortical_bone"], TISSUE_HU["trabecular_bone"]
    z_first, z_last = float(canvas.z[0]) - 30.0, float(canvas.z[-1]) + 30.0
    # spine: vertebrae 22 mm tall with 6 mm discs, posterior arch, spinous and transverse processes
    z = -20.0
    while z < z_last:
        if z + 28.0 > z_first:
            lo, hi = z, z + 22.0
            canvas.paint(_elliptic_cylinder(canvas, (0.0, 50.0), (21.0, 16.0), (hi, hi + 6.0)), TISSUE_HU["disc"], _BODY)
            _paint_shelled(canvas, lambda s: _elliptic_cylinder(canvas, (0.0, 50.0), (21.0, 16.0), (lo, hi), s), 2.0, cortical, trabecular, _BONES)
            found = canvas.box((-15.0, 64.0, lo + 3.0), (15.0, 94.0, hi - 3.0))
            if found is not None:  # the arch: a ring around the spinal canal behind the vertebral body
                slices, zz, yy, xx = found
                r2 = xx**2 + (yy - 79.0) ** 2
                ring = np.broadcast_to((r2 > 9.0**2) & (r2 <= 15.0**2), (zz.shape[0], yy.shape[1], xx.shape[2]))
                canvas.paint((slices, ring), TISSUE_HU["posterior_elements"], _BONES)
            for box_lo, box_hi in (((-4.0, 92.0, lo + 4.0), (4.0, 104.0, hi - 4.0)), ((-42.0, 68.0, lo + 5.0), (42.0, 76.0, hi - 5.0))):
                found = canvas.box(box_lo, box_hi)
                if found is not None:
                    slices, zz, yy, xx = found
                    solid = np.ones((zz.shape[0], yy.shape[1], xx.shape[2]), dtype=bool)
                    if box_lo[0] < -10:  # transverse processes: leave the canal and vertebral body alone
                        solid &= np.abs(xx) > 14.0
                    canvas.paint((slices, solid), TISSUE_HU["posterior_elements"], _BONES)
        z += 28.0

    # ribs: tubes that follow the chest wall from the spine forwards and downwards
    rib_sdf = np.full(canvas.hu.shape, np.inf, dtype=np.float32)
    a_rib, b_rib = _BODY_SEMI[0] - 22.0, _BODY_SEMI[1] - 24.0
    for index, z_back in enumerate((228.0, 206.0, 184.0, 162.0, 140.0, 118.0)):
        phi_end = 2.75 if index < 4 else 2.3  # the lower ribs end short of the sternum
        phi = np.linspace(0.3, phi_end, 48, dtype=np.float32)
        for side in (-1.0, 1.0):
            points = np.stack(
                [side * a_rib * np.sin(phi), b_rib * np.cos(phi), z_back - 38.0 * (phi - 0.3) / (2.75 - 0.3)], axis=1
            )
            _tube_distance(canvas, points, np.full(len(phi), 5.5), rib_sdf)
    canvas.paint((np.s_[:, :, :], rib_sdf <= 0), cortical, _BONES)
    canvas.paint((np.s_[:, :, :], rib_sdf <= -1.6), trabecular, _BONES)

    _paint_shelled(canvas, lambda s: _elliptic_cylinder(canvas, (0.0, -88.0), (15.0, 6.5), (150.0, 240.0), s), 1.8, TISSUE_HU["dense_cortical_bone"], trabecular, _BONES)
    # pelvis: two iliac wings (flattened ellipsoids) and the sacrum
    for side in (-1.0, 1.0):
        _paint_shelled(canvas, lambda s: _ellipsoid(canvas, (side * 105.0, 35.0, 25.0), (10.0, 48.0, 40.0), s), 2.5, TISSUE_HU["dense_cortical_bone"], trabecular, _BONES)
    _paint_shelled(canvas, lambda s: _ellipsoid(canvas, (0.0, 72.0, 15.0), (45.0, 16.0, 32.0), s), 2.0, cortical, trabecular, _BONES)


# --- the phantom as volumes ------------------------------------------------------------------


def _check_grid(shape_zyx: tuple[int, int, int], spacing_xyz: tuple[float, float, float]) -> None:
    if len(shape_zyx) != 3 or any(int(n) < 8 for n in shape_zyx):
        raise MedsegError(f"phantom shape must be three sizes of at least 8 voxels, got {shape_zyx}")
    if len(spacing_xyz) != 3 or any(not (0.2 <= float(s) <= 20.0) for s in spacing_xyz):
        raise MedsegError(f"phantom spacing must be three values between 0.2 and 20 mm, got {spacing_xyz}")


def make_phantom(
    seed: int = 0,
    shape: tuple[int, int, int] = DEFAULT_SHAPE_ZYX,
    spacing: tuple[float, float, float] = DEFAULT_SPACING_XYZ,
) -> Phantom:
    """Draw the phantom on a (z, y, x) grid of ``shape`` voxels with ``spacing`` (x, y, z) mm.

    The image holds integer HU (float32); the label map uses :data:`PHANTOM_LABELS`.
    Smaller grids show the same anatomy more coarsely (handy for fast tests).
    """
    shape = tuple(int(n) for n in shape)  # type: ignore[assignment]
    spacing = tuple(float(s) for s in spacing)  # type: ignore[assignment]
    _check_grid(shape, spacing)
    rng = np.random.default_rng(seed)
    canvas = _Canvas(shape, spacing)
    z_range = (float(canvas.z[0]) - 10.0, float(canvas.z[-1]) + 10.0)  # the torso runs off both ends
    _draw_table(canvas)
    _draw_body_wall(canvas, z_range)
    _draw_abdomen(canvas, rng)
    _draw_chest(canvas, rng)
    _draw_skeleton(canvas)

    # blur by the scanner's point spread (about 0.8 mm in-plane, 1.2 mm along z for the slice
    # profile) gives the soft, partial-volumed edges of a reconstructed CT; then noise
    blur_voxels = [1.2 / spacing[2], 0.8 / spacing[1], 0.8 / spacing[0]]
    hu = ndimage.gaussian_filter(canvas.hu, sigma=blur_voxels, mode="nearest")
    hu += rng.normal(0.0, NOISE_SD_HU, size=hu.shape).astype(np.float32)
    hu = np.clip(np.rint(hu), -1024, 3071).astype(np.float32)

    meta = VolumeMeta(
        modality="CT",
        patient_name="Demo^Phantom",
        patient_id="MEDSEG-DEMO",
        study_description=SYNTHETIC_NOTE,
        series_description=SYNTHETIC_NOTE,
        window_center=40.0,
        window_width=400.0,
        extra={"synthetic": True, "phantom_version": PHANTOM_VERSION, "seed": int(seed)},
    )
    image = Volume(hu, spacing, canvas.origin_xyz, np.eye(3), meta)
    label_meta = VolumeMeta(modality="SEG", labels=dict(PHANTOM_LABELS), extra=dict(meta.extra))
    label_map = Volume(canvas.labels, spacing, canvas.origin_xyz, np.eye(3), label_meta)
    return Phantom(image, label_map)


def phantom_volume(
    seed: int = 0,
    shape: tuple[int, int, int] = DEFAULT_SHAPE_ZYX,
    spacing: tuple[float, float, float] = DEFAULT_SPACING_XYZ,
) -> Volume:
    """The phantom's CT image in HU (see :func:`make_phantom`)."""
    return make_phantom(seed, shape, spacing).image


def phantom_label_map(
    seed: int = 0,
    shape: tuple[int, int, int] = DEFAULT_SHAPE_ZYX,
    spacing: tuple[float, float, float] = DEFAULT_SPACING_XYZ,
) -> Volume:
    """The phantom's ground-truth label map (:data:`PHANTOM_LABELS`) on the image's grid."""
    return make_phantom(seed, shape, spacing).label_map


# --- the phantom as a DICOM series ------------------------------------------------------------


def _uid(*parts: object) -> str:
    """A deterministic UID: the same phantom always gets the same study/series/instance UIDs."""
    return generate_uid(entropy_srcs=[PHANTOM_VERSION, *(str(p) for p in parts)])


def _slice_dataset(image: Volume, index: int, uids: dict[str, str], stored: np.ndarray) -> FileDataset:
    sop_uid = _uid(uids["series"], "instance", index)
    file_meta = FileMetaDataset()
    file_meta.MediaStorageSOPClassUID = CTImageStorage
    file_meta.MediaStorageSOPInstanceUID = sop_uid
    file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    file_meta.ImplementationClassUID = PYDICOM_IMPLEMENTATION_UID
    file_meta.ImplementationVersionName = "MEDSEG_PHANTOM"

    ds = FileDataset("", {}, file_meta=file_meta, preamble=b"\0" * 128)
    ds.SpecificCharacterSet = "ISO_IR 100"
    ds.ImageType = ["DERIVED", "SECONDARY", "AXIAL"]  # DERIVED: no scanner acquired it
    ds.SOPClassUID = CTImageStorage
    ds.SOPInstanceUID = sop_uid
    ds.StudyDate = ds.SeriesDate = ds.ContentDate = "20260101"
    ds.StudyTime = ds.SeriesTime = ds.ContentTime = "120000"
    ds.AccessionNumber = ""
    ds.Modality = "CT"
    ds.Manufacturer = "medseg"
    ds.InstitutionName = "medseg synthetic data"
    ds.ReferringPhysicianName = ""
    ds.StudyDescription = SYNTHETIC_NOTE
    ds.SeriesDescription = SYNTHETIC_NOTE
    ds.ImageComments = SYNTHETIC_NOTE
    ds.ManufacturerModelName = PHANTOM_VERSION
    ds.PatientName = "Demo^Phantom"
    ds.PatientID = "MEDSEG-DEMO"
    ds.PatientBirthDate = ""
    ds.PatientSex = "O"
    ds.PatientIdentityRemoved = "YES"
    ds.BodyPartExamined = "CHEST"
    ds.KVP = "120"
    ds.SliceThickness = f"{image.spacing_mm[2]:g}"
    ds.SpacingBetweenSlices = f"{image.spacing_mm[2]:g}"
    ds.PatientPosition = "HFS"
    ds.StudyInstanceUID = uids["study"]
    ds.SeriesInstanceUID = uids["series"]
    ds.FrameOfReferenceUID = uids["frame"]
    ds.StudyID = "1"
    ds.SeriesNumber = 1
    ds.InstanceNumber = index + 1
    position = image.index_to_physical((0.0, 0.0, float(index)))
    ds.ImagePositionPatient = [f"{v:.4f}" for v in position]
    ds.ImageOrientationPatient = [f"{v:g}" for v in (*image.direction[:, 0], *image.direction[:, 1])]
    ds.PositionReferenceIndicator = ""
    ds.SliceLocation = f"{position[2]:.4f}"
    ds.SamplesPerPixel = 1
    ds.PhotometricInterpretation = "MONOCHROME2"
    ds.Rows, ds.Columns = stored.shape
    ds.PixelSpacing = [f"{image.spacing_mm[1]:g}", f"{image.spacing_mm[0]:g}"]  # row spacing, column spacing
    ds.BitsAllocated = 16
    ds.BitsStored = 16
    ds.HighBit = 15
    ds.PixelRepresentation = 1
    ds.RescaleIntercept = f"{RESCALE_INTERCEPT:g}"
    ds.RescaleSlope = "1"
    ds.RescaleType = "HU"
    ds.WindowCenter = f"{image.meta.window_center:g}"
    ds.WindowWidth = f"{image.meta.window_width:g}"
    ds.PixelData = np.ascontiguousarray(stored, dtype="<i2").tobytes()
    return ds


def write_demo_phantom(
    folder: str | Path,
    seed: int = 0,
    shape: tuple[int, int, int] = DEFAULT_SHAPE_ZYX,
    spacing: tuple[float, float, float] = DEFAULT_SPACING_XYZ,
    *,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> list[Path]:
    """Write the phantom as a CT series (one Explicit VR Little Endian file per slice) into ``folder``.

    Returns the files in slice order (inferior to superior). Same arguments, same files.
    """
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise MedsegError("cannot write the demo study here: this is a file, not a folder", path=folder)
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MedsegError(f"cannot create the demo study folder ({exc.strerror})", path=folder) from exc
    report(progress, 0.0, "drawing the synthetic phantom", "phantom")
    image = make_phantom(seed, shape, spacing).image
    stored = (image.array - RESCALE_INTERCEPT).astype(np.int16)
    key = (seed, image.shape_zyx, image.spacing_mm)
    uids = {"study": _uid(key, "study"), "series": _uid(key, "series"), "frame": _uid(key, "frame")}
    files: list[Path] = []
    count = image.shape_zyx[0]
    for index in range(count):
        if cancel is not None:
            cancel.raise_if_cancelled()
        path = folder / f"CT.{index + 1:04d}.dcm"
        try:
            _slice_dataset(image, index, uids, stored[index]).save_as(path, enforce_file_format=True)
        except OSError as exc:
            raise MedsegError(f"cannot write a demo study slice ({exc.strerror})", path=path) from exc
        files.append(path)
        report(progress, 0.2 + 0.8 * (index + 1) / count, f"writing slice {index + 1} of {count}", "write")
    return files


# --- the cached demo study ----------------------------------------------------------------------


def cache_root() -> Path:
    """medseg's per-user cache folder ($MEDSEG_CACHE_DIR, else the platform's): see medseg.app_dirs."""
    return app_dirs.cache_dir()


def _marker_of(folder: Path) -> Path:
    # beside the series, not in it: a loader scanning the folder must find only DICOM files
    return folder.parent / f"{folder.name}.{COMPLETE_MARKER}"


def _is_complete(folder: Path) -> bool:
    try:
        facts = json.loads(_marker_of(folder).read_text(encoding="utf-8"))
        names = list(facts["files"])
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return facts.get("version") == PHANTOM_VERSION and bool(names) and all((folder / n).is_file() for n in names)


def _write_marker(folder: Path, files: list[Path]) -> None:
    facts = {
        "version": PHANTOM_VERSION,
        "note": SYNTHETIC_NOTE,
        "files": [f.name for f in files],
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    }
    atomic_write_text(_marker_of(folder), json.dumps(facts, indent=1))


def demo_study_path(*, progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Path:
    """The folder of the built-in demo study, generated on first use and reused afterwards.

    The series is written into a temporary sibling folder, checked and swapped into place
    (:func:`medseg.io.atomic.atomic_folder`); a marker file beside it, written last, lists the
    files. A folder whose marker is missing or whose files are not all there (deleted files, a
    folder an older medseg left half-written) is regenerated.
    """
    folder = cache_root() / PHANTOM_VERSION
    if _is_complete(folder):
        return folder
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise MedsegError(f"cannot create the cache folder ({exc.strerror})", path=folder.parent, hint="set MEDSEG_CACHE_DIR") from exc
    names: list[str] = []

    def every_slice(temp: Path) -> None:
        if not names or not all((temp / name).is_file() for name in names):
            raise IncompleteFile("a slice of the demo study is missing")

    try:
        _marker_of(folder).unlink(missing_ok=True)
        with atomic_folder(folder, verify=every_slice) as temp:
            names = [f.name for f in write_demo_phantom(temp, progress=progress, cancel=cancel)]
        _write_marker(folder, [folder / name for name in names])
    except OSError as exc:
        raise MedsegError(f"cannot write the demo study ({exc.strerror})", path=folder, hint="set MEDSEG_CACHE_DIR") from exc
    return folder
