"""The built-in demo study: a generated synthetic torso phantom written as a DICOM CT series.

medseg ships no patient data, yet the quick start (``make run``, ``medseg info`` without a
path) needs a study to open. This module draws a torso from smooth shapes (superellipse
body, ellipsoid organs, tubes for ribs and vessels) with realistic Hounsfield units,
puts a patient table under it (the rule-based labeller must leave the table out), blurs
the edges a little (partial volume) and adds Gaussian noise. The same seed gives the
same voxels, so tests can compare against the ground-truth label map that is drawn with
the image (:func:`make_phantom`). The anatomy is drawn in :mod:`medseg.io.phantom_anatomy`.

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

import numpy as np
from pydicom.dataset import FileDataset, FileMetaDataset
from pydicom.uid import PYDICOM_IMPLEMENTATION_UID, CTImageStorage, ExplicitVRLittleEndian, generate_uid
from scipy import ndimage

from medseg import app_dirs
from medseg.core.volume import Volume, VolumeMeta
from medseg.errors import MedsegError
from medseg.io.atomic import atomic_folder, atomic_write_text
from medseg.io.file_checks import IncompleteFile
from medseg.io.phantom_anatomy import Canvas, draw_torso
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


@dataclass(frozen=True)
class Phantom:
    """The phantom's CT image (HU, float32 rounded to integers) and its ground-truth label map."""

    image: Volume
    label_map: Volume


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
    canvas = Canvas(shape, spacing)
    draw_torso(canvas, rng)

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
