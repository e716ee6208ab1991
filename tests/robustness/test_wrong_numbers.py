"""Numbers are never silently wrong: non-finite voxels are replaced and said, every finding that
affects a number reaches the commands that print numbers (text and --json), and a spacing no
CT has is refused with the file named unless the user gives the true one."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from probes import json_event, rewrite_series, run_medseg

from medseg.core.volume import Volume
from medseg.errors import GeometryError
from medseg.io import load, write_image


def _kinds(findings: list[dict]) -> set[str]:
    return {f["kind"] for f in findings}


def test_one_nan_voxel_no_longer_blanks_its_slice(three_slices: Path, tmp_path: Path) -> None:
    full = load(three_slices)
    centre = full.array[:, 128:384, 128:384].astype(np.float32)  # the middle of the body: fewer tiles to run
    origin = full.index_to_physical((128, 128, 0))
    clean = Volume(centre.copy(), full.spacing_mm, origin, full.direction)
    holed = Volume(centre.copy(), full.spacing_mm, origin, full.direction)
    holed.array[1, 128, 128] = np.nan  # one voxel in the middle slice
    write_image(clean, tmp_path / "clean.nrrd")
    write_image(holed, tmp_path / "holed.nrrd")
    loaded = load(tmp_path / "holed.nrrd")
    assert np.isfinite(loaded.array).all()
    assert [f.kind for f in loaded.meta.findings] == ["non_finite_voxels"]
    assert loaded.array[1, 128, 128] == clean.array.min()

    results = {}
    for name in ("clean", "holed"):
        done = json_event(run_medseg("segment", tmp_path / f"{name}.nrrd", "-o", tmp_path / f"{name}_seg.nii.gz",
                                     "--json"))
        results[name] = (done, sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / f"{name}_seg.nii.gz"))))
    assert "non_finite_voxels" in _kinds(results["holed"][0]["findings"])
    assert "non_finite_voxels" not in _kinds(results["clean"][0]["findings"])
    clean_labels, holed_labels = results["clean"][1], results["holed"][1]
    assert np.count_nonzero(clean_labels[1]) > 40_000  # the middle slice is mostly body
    assert np.count_nonzero(clean_labels[1] != holed_labels[1]) < 50  # one voxel, not the whole slice


@pytest.fixture
def missing_pixel_spacing(three_slices: Path, tmp_path: Path) -> Path:
    import pydicom

    folder = rewrite_series(three_slices, tmp_path / "no_spacing", crop=256)
    for path in folder.iterdir():
        dataset = pydicom.dcmread(path)
        del dataset.PixelSpacing
        dataset.save_as(path)
    return folder


def test_an_assumed_pixel_spacing_reaches_segment_and_stats(missing_pixel_spacing: Path, tmp_path: Path) -> None:
    done = json_event(run_medseg("segment", missing_pixel_spacing, "-o", tmp_path / "seg.nii.gz", "--json"))
    assert "no_pixel_spacing" in _kinds(done["findings"])
    assert any("1 mm" in f["message"] for f in done["findings"])

    stats = run_medseg("stats", tmp_path / "seg.nii.gz", "--image", missing_pixel_spacing, "--json")
    assert stats.returncode == 0, stats.stderr
    assert "no_pixel_spacing" in _kinds(json.loads(stats.stdout)["findings"])
    text = run_medseg("stats", tmp_path / "seg.nii.gz", "--image", missing_pixel_spacing)
    assert "finding [no_pixel_spacing]" in text.stdout and "1 mm is assumed" in text.stdout


def test_a_pixel_spacing_of_0_is_refused_unless_given(three_slices: Path, tmp_path: Path) -> None:
    zero = rewrite_series(three_slices, tmp_path / "zero_spacing", crop=128, PixelSpacing=[0, 0])
    run = run_medseg("convert", zero, tmp_path / "out.nii.gz")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "the Pixel Spacing in the header is '0.0\\0.0'" in run.stderr and "--spacing" in run.stderr
    assert not (tmp_path / "out.nii.gz").exists()
    given = run_medseg("convert", zero, tmp_path / "out.nii.gz", "--spacing", "0.7", "0.7", "2.5")
    assert given.returncode == 0, given.stderr
    assert "finding [spacing_override]" in given.stderr
    assert sitk.ReadImage(str(tmp_path / "out.nii.gz")).GetSpacing() == pytest.approx((0.7, 0.7, 2.5))


def _nifti_with_pixdim_x(tmp_path: Path, ct_dir: Path, value: float) -> Path:
    source = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    plain = tmp_path / f"ct_{value}.nii"
    sitk.WriteImage(sitk.ReadImage(str(source)), str(plain))
    data = bytearray(plain.read_bytes())
    data[80:84] = struct.pack("<f", value)  # pixdim[1]
    data[252:256] = struct.pack("<hh", 0, 0)  # no qform/sform: pixdim is the spacing
    plain.write_bytes(bytes(data))
    return plain


@pytest.mark.parametrize("value", [0.0, float("nan"), -3.0, float("inf")])
def test_a_nifti_whose_pixdim_is_unusable_is_refused_unless_given(ct_dir: Path, tmp_path: Path, value: float) -> None:
    path = _nifti_with_pixdim_x(tmp_path, ct_dir, value)
    with pytest.raises(GeometryError, match=f"the voxel spacing in the header is {value:g} mm along x") as caught:
        load(path)
    assert path.name in str(caught.value) and "--spacing" in str(caught.value)
    given = load(path, spacing_mm=(3.0, 3.0, 3.0))
    assert given.spacing_mm == (3.0, 3.0, 3.0)
    override = [f for f in given.meta.findings if f.kind == "spacing_override"]
    assert len(override) == 1 and f"the file says {value:g} x 3 x 3 mm" in override[0].message
    clean = load(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    np.testing.assert_array_equal(given.array, clean.array)  # the same voxels, read by another path
    labels = given.with_array((given.array > 0).astype(np.uint8))
    write_image(labels, tmp_path / "labels.nii.gz")
    stats = run_medseg("stats", tmp_path / "labels.nii.gz", "--image", path, "--spacing", "3", "3", "3", "--json")
    assert stats.returncode == 0, stats.stderr
    assert "spacing_override" in _kinds(json.loads(stats.stdout)["findings"])


@pytest.mark.parametrize("value", [1e-30, 1e30, 0.001, 200.0])
def test_a_spacing_no_ct_has_is_refused_unless_given(ct_dir: Path, tmp_path: Path, value: float) -> None:
    path = _nifti_with_pixdim_x(tmp_path, ct_dir, value)
    with pytest.raises(GeometryError, match="outside the range") as caught:
        load(path)
    assert path.name in str(caught.value) and "--spacing" in str(caught.value)
    run = run_medseg("stats", ct_dir / "totalsegmentator" / "example_seg.nii.gz", "--image", path)
    assert run.returncode == 1 and "Traceback" not in run.stderr and path.name in run.stderr
    given = load(path, spacing_mm=(3.0, 3.0, 3.0))
    assert given.spacing_mm == (3.0, 3.0, 3.0)
    assert "spacing_override" in [f.kind for f in given.meta.findings]
    write_image(given.with_array((given.array > 0).astype(np.uint8)), tmp_path / "seg.nii.gz")  # drawn on it
    overridden = run_medseg("stats", tmp_path / "seg.nii.gz", "--image", path, "--spacing", "3", "3", "3", "--json")
    assert overridden.returncode == 0, overridden.stderr
    assert "spacing_override" in _kinds(json.loads(overridden.stdout)["findings"])
