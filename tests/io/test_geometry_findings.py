"""Each awkward series in shared/data gives its documented finding; irregular stacks are
regularized onto a grid that keeps every acquired voxel where it was in patient space."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from medseg.errors import NotAVolumeError
from medseg.io import load, load_series, scan


def finding(volume_or_series, kind: str):
    findings = volume_or_series.meta.findings if hasattr(volume_or_series, "meta") else volume_or_series.findings
    matches = [f for f in findings if f.kind == kind]
    assert matches, f"no {kind!r} finding in {[f.kind for f in findings]}"
    return matches[0]


def only_series(folder: Path):
    result = scan(folder)
    assert len(result.series) == 1
    return result.series[0]


def test_ge_tilt_with_tag_and_variable_spacing(ct_dir: Path) -> None:
    series = only_series(ct_dir / "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing")
    tilt = finding(series, "gantry_tilt")
    assert tilt.details["angle_deg"] == pytest.approx(18.5, abs=0.2)
    assert tilt.details["gantry_detector_tilt_deg"] == pytest.approx(18.5)
    spacing = finding(series, "variable_spacing")
    # dz 4.22 / 1.14 / 7.38 mm between positions, i.e. x cos(18.5 deg) along the slice normal.
    cos = np.cos(np.radians(18.5))
    steps = spacing.details["distinct_steps_mm"]
    assert min(steps) == pytest.approx(1.14 * cos, abs=0.05) and max(steps) == pytest.approx(7.38 * cos, abs=0.05)
    assert "missing_slices" not in {f.kind for f in series.findings}

    raw = load_series(series, regularize=False)
    assert raw.size_xyz == (512, 512, 28) and "raw_stack" in {f.kind for f in raw.meta.findings}
    regular = load_series(series)
    details = finding(regular, "regularized").details
    assert set(details["reasons"]) == {"gantry_tilt", "variable_spacing"}
    assert regular.size_xyz[2] == details["size_xyz"][2] > 28
    assert regular.size_xyz[1] > 512  # the field of view grew to hold the sheared slices
    assert np.allclose(regular.direction.T @ regular.direction, np.eye(3), atol=1e-6)  # orthogonal grid
    _assert_acquired_voxels_stay_in_place(series, raw, regular)


def _assert_acquired_voxels_stay_in_place(series, raw, regular) -> None:
    """Sample the regularized volume at the physical centres of the first acquired slice's voxels.

    Both sides are smoothed in-plane (sigma 2 px) so the comparison measures placement, not
    the noise that bilinear resampling averages away.
    """
    first = series.slices[0]
    rows, cols = np.mgrid[64:448:8, 64:448:8]
    rows, cols = rows.reshape(-1), cols.reshape(-1)
    points = (first.position[None, :] + cols[:, None] * raw.spacing_mm[0] * raw.direction[:, 0]
              + rows[:, None] * raw.spacing_mm[1] * raw.direction[:, 1])
    smooth_regular = ndimage.gaussian_filter(regular.array.astype(np.float32), sigma=(0, 2, 2))
    acquired = ndimage.gaussian_filter(raw.array[0].astype(np.float32), sigma=2)[rows, cols]

    def sample(index_xyz: np.ndarray) -> np.ndarray:
        return ndimage.map_coordinates(smooth_regular, index_xyz[:, ::-1].T, order=1, mode="nearest")

    placed = sample(regular.physical_to_index(points))
    error = np.median(np.abs(placed - acquired))
    # The same voxels read without the shear correction land far from where they were acquired.
    unsheared = sample(np.column_stack([cols, rows, np.zeros_like(rows)]).astype(np.float64))
    print(f"placement error {error:.1f} HU, without shear correction {np.median(np.abs(unsheared - acquired)):.1f} HU")
    assert error < 15.0
    assert error < 0.25 * np.median(np.abs(unsheared - acquired))


def test_siemens_tilt_only_in_orientation(ct_dir: Path) -> None:
    series = only_series(ct_dir / "dicom2nifti_testdata/gantry_tilt_siemens_iop_only")
    tilt = finding(series, "gantry_tilt")
    assert tilt.details["angle_deg"] == pytest.approx(14.0, abs=0.3)
    assert tilt.details["gantry_detector_tilt_deg"] is None
    assert tilt.details["source"] == "ImageOrientationPatient only"
    assert "seen in the image orientation only" in tilt.message
    raw = load_series(series, regularize=False)
    regular = load_series(series)
    _assert_acquired_voxels_stay_in_place(series, raw, regular)


def test_missing_slice_ge(ct_dir: Path) -> None:
    series = only_series(ct_dir / "dicom2nifti_testdata/missing_slice_ge_lightspeed16")
    missing = finding(series, "missing_slices")
    assert missing.details["n_missing"] == 1 and missing.details["gap_mm"] == [10.0]
    assert series.spacing_mm[2] == pytest.approx(5.0)
    assert "variable_spacing" not in {f.kind for f in series.findings}
    volume = load_series(series)
    assert volume.size_xyz == (512, 512, 5)  # z = 18.11 .. 38.11 every 5 mm, the gap interpolated
    raw = load_series(series, regularize=False)
    np.testing.assert_array_equal(volume.array[[0, 1, 2, 4]], raw.array)  # acquired planes unchanged
    expected = (raw.array[2].astype(np.float32) + raw.array[3]) / 2
    assert np.abs(volume.array[3] - expected).max() <= 0.5 + 1e-6


def test_missing_slice_tilted_siemens(ct_dir: Path) -> None:
    series = only_series(ct_dir / "dicom2nifti_testdata/missing_slice_tilted_siemens")
    assert finding(series, "missing_slices").details["n_missing"] == 1
    assert finding(series, "gantry_tilt").details["angle_deg"] == pytest.approx(15.5, abs=0.5)
    volume = load(ct_dir / "dicom2nifti_testdata/missing_slice_tilted_siemens")
    assert volume.size_xyz[2] == 5
    assert set(finding(volume, "regularized").details["reasons"]) == {"gantry_tilt", "missing_slices"}


def test_duplicate_positions_are_not_a_volume(ct_dir: Path) -> None:
    folder = ct_dir / "dicom2nifti_testdata/duplicate_positions_siemens"
    series = only_series(folder)
    assert series.kind == "not_a_volume" and not series.loadable
    assert finding(series, "duplicate_positions").details["n_distinct_positions"] == 1
    with pytest.raises(NotAVolumeError) as caught:
        load_series(series)
    assert str(folder) in str(caught.value) and "not a 3D volume" in str(caught.value)
    with pytest.raises(Exception) as caught_load:
        load(folder)
    assert "no loadable CT volume" in str(caught_load.value)


def test_single_slice_is_reported(ct_dir: Path) -> None:
    volume = load(ct_dir / "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm")
    single = finding(volume, "single_slice")
    assert single.details["gantry_detector_tilt_deg"] == -22.0
    assert volume.size_xyz == (512, 512, 1)


@pytest.mark.parametrize("name", ["pydicom_data/eCT_Supplemental.dcm",
                                  "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm"])
def test_enhanced_ct_geometry_from_functional_groups(ct_dir: Path, name: str) -> None:
    import SimpleITK as sitk

    path = ct_dir / name
    volume = load(path)
    assert volume.size_xyz == (512, 512, 2)
    assert volume.spacing_mm == pytest.approx((0.388672, 0.388672, 10.0))
    np.testing.assert_allclose(volume.direction[:, 0], [-1, 0, 0])
    np.testing.assert_allclose(volume.direction[:, 1], [0, 1, 0])
    slice_z = sorted(float(volume.index_to_physical([0, 0, k])[2]) for k in range(2))
    assert slice_z == pytest.approx([-159.0, -149.0])
    assert volume.meta.extra["frames"] is not None
    # Same voxels at the same physical slice as GDCM (which orders frames as stored).
    reference = sitk.ReadImage(str(path))
    expected = sitk.GetArrayFromImage(reference)
    for k in range(2):
        z = float(volume.index_to_physical([0, 0, k])[2])
        other = int(round(reference.TransformPhysicalPointToContinuousIndex((99.5, -301.5, z))[2]))
        # JPEG Extended: libjpeg and GDCM's IJG differ by at most 1 in the inverse DCT rounding.
        assert np.abs(volume.array[k].astype(np.int32) - expected[other]).max() <= 1
