"""Every DICOM series in shared/data loads with the geometry SimpleITK (GDCM) reads and the
HU ranges the data README states."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.io import load, load_series, scan


def sitk_series(folder: Path, files: list[str] | None = None) -> sitk.Image:
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(files or sitk.ImageSeriesReader.GetGDCMSeriesFileNames(str(folder)))
    return reader.Execute()


# (folder, size_xyz, hu_min, hu_max) from the data README; regular series SimpleITK reads correctly.
REGULAR_SERIES = [
    ("totalsegmentator/example_ct_dicom", (512, 512, 20), -1024, 1839),
    ("dcmqi_ct3slice_masks/image", (512, 512, 3), None, None),
]


@pytest.mark.parametrize("folder, size, hu_min, hu_max", REGULAR_SERIES)
def test_regular_series_match_simpleitk(ct_dir: Path, folder: str, size, hu_min, hu_max) -> None:
    volume = load(ct_dir / folder)
    reference = sitk_series(ct_dir / folder)
    assert volume.size_xyz == size == reference.GetSize()
    np.testing.assert_allclose(volume.spacing_mm, reference.GetSpacing(), atol=1e-4)
    np.testing.assert_allclose(volume.origin_mm, reference.GetOrigin(), atol=1e-3)
    np.testing.assert_allclose(volume.direction.reshape(-1), reference.GetDirection(), atol=1e-5)
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(reference))
    if hu_min is not None:
        assert (int(volume.array.min()), int(volume.array.max())) == (hu_min, hu_max)
    assert volume.array.dtype == np.int16


def test_philips_mixed_folder_splits_into_series(ct_dir: Path) -> None:
    folder = ct_dir / "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series"
    result = scan(folder)
    kinds = sorted((s.kind, s.n_slices) for s in result.series)
    assert kinds == [("localizer", 1), ("secondary_capture", 1), ("secondary_capture", 1),
                     ("volume", 16), ("volume", 28)]
    by_description = {s.series_description: s for s in result.series if s.kind == "volume"}
    thick, thin = by_description["STD BRAIN 5MM"], by_description["STD BRAIN 1MM, iDose"]
    assert thick.spacing_mm[2] == pytest.approx(5.0) and thin.spacing_mm[2] == pytest.approx(1.0)
    for series in (thick, thin):
        volume = load_series(series)
        reference = sitk_series(folder, sitk.ImageSeriesReader.GetGDCMSeriesFileNames(str(folder), series.series_uid))
        assert volume.size_xyz == reference.GetSize()
        np.testing.assert_allclose(volume.spacing_mm, reference.GetSpacing(), atol=1e-4)
        np.testing.assert_allclose(volume.origin_mm, reference.GetOrigin(), atol=1e-3)
        np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(reference))
        # Slices sorted by position along the normal even though file names sort wrongly as text.
        assert all(np.diff([float(np.dot(s.position, volume.direction[:, 2])) for s in series.slices]) > 0)
    # load() picks the volume with the most slices and says what it left out.
    volume = load(folder)
    assert volume.meta.series_description == "STD BRAIN 5MM"
    kinds = {f.kind for f in volume.meta.findings}
    assert {"series_chosen", "localizer_excluded"} <= kinds


def test_blank_uids_series_is_grouped_and_reported(ct_dir: Path) -> None:
    result = scan(ct_dir / "totalsegmentator/example_ct_dicom")
    assert len(result.series) == 1
    series = result.series[0]
    assert series.series_uid == "" and series.key  # a usable key despite the blank UID
    assert series.n_files == 20 and series.kind == "volume"
    assert "blank_uids" in {f.kind for f in series.findings}
    volume = load(ct_dir / "totalsegmentator/example_ct_dicom", series_uid=series.key)
    assert volume.size_xyz == (512, 512, 20)


# Irregular stacks: SimpleITK reads them as an (incorrectly) evenly spaced, sheared stack, so only
# the acquired voxels, their order and the first slice's position and in-plane axes are comparable.
IRREGULAR_SERIES = [
    "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing",
    "dicom2nifti_testdata/gantry_tilt_siemens_iop_only",
    "dicom2nifti_testdata/missing_slice_ge_lightspeed16",
    "dicom2nifti_testdata/missing_slice_tilted_siemens",
]


@pytest.mark.parametrize("folder", IRREGULAR_SERIES)
def test_raw_stacks_of_irregular_series_match_simpleitk_voxels(ct_dir: Path, folder: str) -> None:
    raw = load(ct_dir / folder, regularize=False)
    reference = sitk_series(ct_dir / folder)
    assert raw.size_xyz == reference.GetSize()
    np.testing.assert_array_equal(raw.array, sitk.GetArrayFromImage(reference))
    np.testing.assert_allclose(raw.origin_mm, reference.GetOrigin(), atol=1e-3)
    np.testing.assert_allclose(raw.direction[:, :2], np.asarray(reference.GetDirection()).reshape(3, 3)[:, :2],
                               atol=1e-5)
    assert "raw_stack" in {f.kind for f in raw.meta.findings}
