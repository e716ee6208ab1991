"""NIfTI/NRRD/MHA read and write (LPS/RAS handled by SimpleITK), atomic writes, resample_to,
and the TotalSegmentator check: a LAS label map resampled onto the DICOM grid puts liver on liver."""

from __future__ import annotations

import os
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest

from medseg.core.volume import Volume
from medseg.errors import GeometryError, ImageFormatError
from medseg.io import load, read_image, resample_to, write_image


@pytest.fixture(scope="module")
def dicom_ct(ct_dir: Path) -> Volume:
    return load(ct_dir / "totalsegmentator/example_ct_dicom")


def test_totalsegmentator_las_labels_land_on_the_organs(ct_dir: Path, dicom_ct: Volume) -> None:
    labels = read_image(ct_dir / "totalsegmentator/example_seg_dicom.nii.gz")
    assert labels.direction[1, 1] == pytest.approx(-1.0)  # stored LAS: y flipped relative to LPS
    assert labels.origin_mm[1] == pytest.approx(61.5117, abs=1e-3)
    on_grid = resample_to(labels, dicom_ct, interpolation="nearest")
    assert on_grid.same_grid(dicom_ct) and on_grid.array.dtype == np.uint8
    hu = dicom_ct.array.astype(np.float64)
    assert hu[on_grid.array == 5].mean() == pytest.approx(89, abs=3)  # liver (about -75 if done wrong)
    assert hu[on_grid.array == 1].mean() == pytest.approx(80, abs=3)  # spleen
    assert hu[on_grid.array == 52].mean() == pytest.approx(177, abs=4)  # aorta
    # Same-grid resampling is the y flip: no voxel is invented or lost.
    np.testing.assert_array_equal(on_grid.array, labels.array[:, ::-1, :])


@pytest.mark.parametrize("suffix", [".nii.gz", ".nii", ".nrrd", ".mha"])
def test_dicom_round_trip_is_exact(dicom_ct: Volume, tmp_path: Path, suffix: str) -> None:
    path = write_image(dicom_ct, tmp_path / f"ct{suffix}")
    back = read_image(path)
    assert back.array.dtype == dicom_ct.array.dtype
    np.testing.assert_array_equal(back.array, dicom_ct.array)
    np.testing.assert_allclose(back.spacing_mm, dicom_ct.spacing_mm, atol=1e-6)
    np.testing.assert_allclose(back.origin_mm, dicom_ct.origin_mm, atol=1e-5)
    np.testing.assert_allclose(back.direction, dicom_ct.direction, atol=1e-6)
    assert [p.name for p in tmp_path.iterdir()] == [f"ct{suffix}"]  # no temp file left behind


def test_nifti_is_written_in_ras_for_other_tools(dicom_ct: Volume, tmp_path: Path) -> None:
    path = write_image(dicom_ct, tmp_path / "ct.nii.gz")
    affine = nib.load(str(path)).affine
    # LPS origin (x, y, z) is RAS (-x, -y, z); the LPS identity direction is RAS diag(-1, -1, 1).
    x, y, z = dicom_ct.origin_mm
    np.testing.assert_allclose(affine[:3, 3], [-x, -y, z], atol=1e-3)
    np.testing.assert_allclose(np.sign(np.diag(affine)[:3]), [-1, -1, 1])


def test_tilted_regularized_volume_round_trips(ct_dir: Path, tmp_path: Path) -> None:
    volume = load(ct_dir / "dicom2nifti_testdata/gantry_tilt_siemens_iop_only")
    back = read_image(write_image(volume, tmp_path / "tilt.nrrd"))
    np.testing.assert_array_equal(back.array, volume.array)
    np.testing.assert_allclose(back.direction, volume.direction, atol=1e-6)  # oblique, orthogonal
    np.testing.assert_allclose(back.origin_mm, volume.origin_mm, atol=1e-4)


def test_nrrd_and_nifti_facts_from_the_data_readme(ct_dir: Path) -> None:
    lung = read_image(ct_dir / "pyradiomics_lung1/lung1_image.nrrd")
    assert lung.size_xyz == (512, 512, 48)
    assert lung.spacing_mm == pytest.approx((0.570, 0.570, 5.0), abs=1e-3)
    assert lung.origin_mm == pytest.approx((-146, -325, -777.5), abs=0.5)
    assert (int(lung.array.min()), int(lung.array.max())) == (-1024, 3071)
    nodule = read_image(ct_dir / "pyradiomics_lung1/lung1_label.nrrd")
    assert int((nodule.array == 1).sum()) == 837
    assert lung.array[nodule.array == 1].mean() == pytest.approx(-64, abs=10)
    ras = read_image(ct_dir / "totalsegmentator/example_ct.nii.gz")
    assert ras.size_xyz == (122, 101, 112)
    np.testing.assert_allclose(np.diag(ras.direction), [-1, -1, 1])  # RAS file seen in LPS
    assert (int(ras.array.min()), int(ras.array.max())) == (-1207, 3382)


def test_ct3slice_masks_share_the_dicom_grid(ct_dir: Path) -> None:
    ct = load(ct_dir / "dcmqi_ct3slice_masks/image")
    liver = read_image(ct_dir / "dcmqi_ct3slice_masks/masks/liver_seg.nrrd")
    assert liver.same_grid(ct, tol=1e-3)
    assert int((liver.array == 1).sum()) == 107098


def test_resample_linear_to_a_coarser_grid(dicom_ct: Volume) -> None:
    coarse = Volume(np.zeros((10, 128, 128), np.int16), (3.90625, 3.90625, 4.0), dicom_ct.origin_mm,
                    dicom_ct.direction)
    result = resample_to(dicom_ct, coarse, interpolation="linear", default_value=-1024)
    assert result.same_grid(coarse) and result.array.dtype == np.int16
    # Voxel (0, 0, 0) of both grids is the same point: identical HU there.
    assert result.array[0, 0, 0] == dicom_ct.array[0, 0, 0]
    assert abs(float(result.array.mean()) - float(dicom_ct.array[::2].mean())) < 20
    with pytest.raises(GeometryError):
        resample_to(dicom_ct, coarse, interpolation="cubic-ish")


def test_read_errors_name_the_file(ct_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(ImageFormatError, match="no such file"):
        read_image(tmp_path / "missing.nii.gz")
    broken = tmp_path / "broken.nii.gz"
    broken.write_bytes((ct_dir / "totalsegmentator/example_ct_sm.nii.gz").read_bytes()[:2000])
    with pytest.raises(ImageFormatError) as caught:
        read_image(broken)
    assert str(broken) in str(caught.value)
    with pytest.raises(ImageFormatError, match="not a NIfTI"):
        read_image(ct_dir / "pyradiomics_lung1/LICENSE_BSD-3-Clause.txt")


def test_failed_write_keeps_the_old_file(dicom_ct: Volume, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import SimpleITK as sitk

    target = tmp_path / "ct.nrrd"
    target.write_bytes(b"previous contents")

    def disk_full(image, name, *args, **kwargs):
        Path(name).write_bytes(b"half")  # what a crash mid-write leaves
        raise RuntimeError("No space left on device")

    monkeypatch.setattr(sitk, "WriteImage", disk_full)
    with pytest.raises(ImageFormatError) as caught:
        write_image(dicom_ct, target)
    assert str(target) in str(caught.value) and "No space left" in str(caught.value)
    assert target.read_bytes() == b"previous contents"
    assert sorted(os.listdir(tmp_path)) == ["ct.nrrd"]
    with pytest.raises(ImageFormatError, match="cannot write this format"):
        write_image(dicom_ct, tmp_path / "ct.png")
