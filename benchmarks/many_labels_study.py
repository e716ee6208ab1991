"""A 512×512×300 CT series with TotalSegmentator's 117 structures on it, for bench_many_labels.py.

Real content, stretched: TotalSegmentator's example series (512×512×20, 2 mm steps; its own result
on it, split to all 117 structures by tests/many_labels_data.py) is interpolated to 300 slices
1 mm apart (CT linear, labels nearest) and written as a DICOM series with complete UIDs (dcmqi's
writer needs them). The structures are TotalSegmentator's shapes, stretched along z.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(__import__("os").environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
SOURCE = SHARED / "ct" / "totalsegmentator"
sys.path.insert(0, str(REPO / "tests"))


def build(folder: Path, slices: int = 300, step_mm: float = 1.0) -> tuple[Path, np.ndarray]:
    """Write the series into ``folder/series`` (once) and return it with the (z, y, x) label map on it."""
    import pydicom
    import SimpleITK as sitk
    from many_labels_data import all_117
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid
    from scipy import ndimage

    from medseg.io import load

    series = folder / "series"
    labels_path = folder / "labels.npy"
    if series.is_dir() and labels_path.is_file():
        return series, np.load(labels_path)
    image = load(SOURCE / "example_ct_dicom")
    grid = sitk.Image([int(n) for n in image.size_xyz], sitk.sitkUInt8)
    grid.SetSpacing([float(s) for s in image.spacing_mm])
    grid.SetOrigin([float(o) for o in image.origin_mm])
    grid.SetDirection([float(d) for d in np.asarray(image.direction).ravel()])
    placed = sitk.Resample(sitk.ReadImage(str(SOURCE / "example_seg_dicom.nii.gz")), grid, sitk.Transform(),
                           sitk.sitkNearestNeighbor, 0)
    small = all_117(sitk.GetArrayFromImage(placed))
    factor = (slices / small.shape[0], 1, 1)
    labels = ndimage.zoom(small, factor, order=0, grid_mode=True, mode="grid-constant")[:slices]
    hu = ndimage.zoom(np.asarray(image.array, np.float32), factor, order=1, grid_mode=True, mode="nearest")[:slices]
    files = sorted(SOURCE.joinpath("example_ct_dicom").iterdir())
    template = pydicom.dcmread(files[0])
    template.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
    study, series_uid, frame = generate_uid(), generate_uid(), generate_uid()
    slope, intercept = float(template.get("RescaleSlope", 1)), float(template.get("RescaleIntercept", 0))
    origin = np.asarray(image.origin_mm, float)
    series.mkdir(parents=True, exist_ok=True)
    for k in range(slices):
        ds = template.copy()
        uid = generate_uid()
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = uid
        ds.SOPClassUID = ds.file_meta.MediaStorageSOPClassUID = "1.2.840.10008.5.1.4.1.1.2"
        ds.StudyInstanceUID, ds.SeriesInstanceUID, ds.FrameOfReferenceUID = study, series_uid, frame
        ds.PatientID, ds.PatientName, ds.SeriesNumber = "bench117", "Bench^ManyLabels", 1
        ds.ImageOrientationPatient = [1, 0, 0, 0, 1, 0]
        ds.ImagePositionPatient = [float(origin[0]), float(origin[1]), float(origin[2] + step_mm * k)]
        ds.SliceLocation = float(origin[2] + step_mm * k)
        ds.SliceThickness = step_mm
        ds.InstanceNumber = k + 1
        stored = np.clip(np.rint((hu[k] - intercept) / slope), 0, 4095).astype(np.uint16)
        ds.BitsAllocated, ds.BitsStored, ds.HighBit, ds.PixelRepresentation = 16, 12, 11, 0
        ds.PixelData = stored.tobytes()
        ds.save_as(series / f"{k:04d}.dcm", enforce_file_format=True)
    np.save(labels_path, labels)
    return series, labels


__all__ = ["build"]
