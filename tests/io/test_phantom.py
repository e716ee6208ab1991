"""The built-in demo study: a synthetic torso phantom written as a DICOM CT series."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from scipy import ndimage

from medseg.errors import Cancelled, MedsegError
from medseg.io import load, phantom
from medseg.io.phantom import (
    COMPLETE_MARKER,
    DEFAULT_SHAPE_ZYX,
    DEFAULT_SPACING_XYZ,
    PHANTOM_LABELS,
    SYNTHETIC_NOTE,
    demo_study_path,
    make_phantom,
    write_demo_phantom,
)
from medseg.progress import CancelToken, Progress


@pytest.fixture(scope="module")
def demo() -> phantom.Phantom:
    return make_phantom(seed=0)


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_demo_phantom(tmp_path_factory.mktemp("phantom") / "series", seed=0)


def _pixel_bytes(files: list[Path]) -> list[bytes]:
    return [pydicom.dcmread(f).PixelData for f in files]


def test_simpleitk_reads_the_series_with_the_geometry_written(written: list[Path], demo: phantom.Phantom) -> None:
    reader = sitk.ImageSeriesReader()
    names = reader.GetGDCMSeriesFileNames(str(written[0].parent))
    assert len(names) == DEFAULT_SHAPE_ZYX[0]
    reader.SetFileNames(names)
    image = reader.Execute()
    assert image.GetSize() == DEFAULT_SHAPE_ZYX[::-1]
    np.testing.assert_allclose(image.GetSpacing(), DEFAULT_SPACING_XYZ, atol=1e-4)
    np.testing.assert_allclose(image.GetOrigin(), demo.image.origin_mm, atol=1e-3)
    np.testing.assert_allclose(np.reshape(image.GetDirection(), (3, 3)), np.eye(3), atol=1e-6)
    # GDCM applies the rescale: the HU it returns are the phantom's HU, voxel for voxel
    np.testing.assert_array_equal(sitk.GetArrayFromImage(image), demo.image.array.astype(np.int32))


def test_pydicom_reads_hu_and_the_tags_describe_the_grid(written: list[Path], demo: phantom.Phantom) -> None:
    sx, sy, sz = DEFAULT_SPACING_XYZ
    for index in (0, 47, len(written) - 1):
        ds = pydicom.dcmread(written[index])
        assert ds.file_meta.TransferSyntaxUID == pydicom.uid.ExplicitVRLittleEndian
        assert ds.SOPClassUID == pydicom.uid.CTImageStorage == ds.file_meta.MediaStorageSOPClassUID
        assert ds.SOPInstanceUID == ds.file_meta.MediaStorageSOPInstanceUID
        assert ds.Modality == "CT"
        assert float(ds.RescaleIntercept) == -1024.0 and float(ds.RescaleSlope) == 1.0
        hu = ds.pixel_array.astype(np.float32) * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
        np.testing.assert_array_equal(hu, demo.image.array[index])
        np.testing.assert_allclose([float(v) for v in ds.ImagePositionPatient], demo.image.index_to_physical((0, 0, index)), atol=1e-3)
        assert [float(v) for v in ds.ImageOrientationPatient] == [1, 0, 0, 0, 1, 0]
        assert [float(v) for v in ds.PixelSpacing] == [sy, sx]
        assert float(ds.SliceThickness) == sz == float(ds.SpacingBetweenSlices)
        assert (float(ds.WindowCenter), float(ds.WindowWidth)) == (40.0, 400.0)
    uids = {(pydicom.dcmread(f).StudyInstanceUID, pydicom.dcmread(f).SeriesInstanceUID) for f in written[:5]}
    assert len(uids) == 1
    assert len({pydicom.dcmread(f).SOPInstanceUID for f in written}) == len(written)


def test_every_description_says_the_data_is_synthetic(written: list[Path]) -> None:
    ds = pydicom.dcmread(written[0])
    for tag in ("StudyDescription", "SeriesDescription", "ImageComments"):
        assert "SYNTHETIC" in str(getattr(ds, tag)) and "not patient data" in str(getattr(ds, tag))
    assert str(ds.PatientName) == "Demo^Phantom"
    assert SYNTHETIC_NOTE == "SYNTHETIC DEMO PHANTOM - not patient data"


def _region_hu(demo: phantom.Phantom, label: int, erode_voxels: int = 2) -> np.ndarray:
    """HU inside a labelled structure, away from its edges (in-plane erosion)."""
    mask = demo.label_map.array == label
    inner = ndimage.binary_erosion(mask, structure=np.ones((1, 3, 3), bool), iterations=erode_voxels)
    return demo.image.array[inner]


def test_tissues_have_realistic_hounsfield_units(demo: phantom.Phantom) -> None:
    image, labels = demo.image, demo.label_map.array
    assert -1010 <= np.median(image.array[:, :20, :20]) <= -990  # air around the patient
    assert -900 <= np.median(_region_hu(demo, 2)) <= -800  # lung parenchyma
    liver = _region_hu(demo, 4)
    assert 50 <= liver.mean() <= 70
    assert 10 <= liver.std() <= 20  # the noise: realistic for a routine CT
    bone = demo.image.array[labels == 3]
    assert 700 <= np.percentile(bone, 95) <= 1200  # cortex
    assert 200 <= np.median(_region_hu(demo, 3, erode_voxels=3)) <= 320  # trabecular bone inside vertebrae/pelvis
    body = labels > 0
    skin_ring = body & ~ndimage.binary_erosion(body, np.ones((1, 3, 3), bool), iterations=5)
    skin_ring &= ndimage.binary_erosion(body, np.ones((1, 3, 3), bool), iterations=2)  # skip the blurred skin edge
    assert -120 <= np.median(image.array[skin_ring]) <= -80  # subcutaneous fat
    i, j, k = np.rint(image.physical_to_index((60.0, 95.0, 120.0))).astype(int)
    assert 25 <= np.median(image.array[k - 2 : k + 3, j - 2 : j + 3, i - 2 : i + 3]) <= 55  # back muscle


def test_a_patient_table_lies_below_the_body_and_is_not_labelled(demo: phantom.Phantom) -> None:
    labels = demo.label_map.array
    rows_with_body = np.nonzero((labels > 0).any(axis=(0, 2)))[0]
    below = demo.image.array[:, rows_with_body.max() + 1 :, :]
    assert (below > 200).sum() > 10_000  # the table's dense shells
    assert not (labels[:, rows_with_body.max() + 1 :, :] > 0).any()


def test_ground_truth_label_map_matches_the_image_grid(demo: phantom.Phantom) -> None:
    label_map = demo.label_map
    assert label_map.same_grid(demo.image)
    assert label_map.array.dtype == np.uint8
    assert set(np.unique(label_map.array)) == set(PHANTOM_LABELS)
    assert {v: label.name for v, label in label_map.meta.labels.items()} == PHANTOM_LABELS
    ml = {name: (label_map.array == value).sum() * label_map.voxel_volume_ml for value, name in PHANTOM_LABELS.items()}
    assert 1000 <= ml["lungs"] <= 5000  # two adult lungs, their apices cut off at the top of the scan
    assert 1000 <= ml["liver"] <= 2500
    assert 300 <= ml["bones"] <= 2000


def test_same_seed_same_pixels_other_seed_other_pixels(written: list[Path], tmp_path: Path) -> None:
    again = write_demo_phantom(tmp_path / "again", seed=0)
    assert [f.name for f in again] == [f.name for f in written]
    assert _pixel_bytes(again) == _pixel_bytes(written)
    assert pydicom.dcmread(again[3]).SOPInstanceUID == pydicom.dcmread(written[3]).SOPInstanceUID
    other = make_phantom(seed=1).image.array
    assert not np.array_equal(other, make_phantom(seed=0).image.array)


def test_a_smaller_grid_shows_the_same_anatomy() -> None:
    small = make_phantom(shape=(40, 96, 96), spacing=(4.0, 4.0, 6.0))
    assert small.image.shape_zyx == (40, 96, 96)
    assert set(np.unique(small.label_map.array)) == set(PHANTOM_LABELS)


def test_bad_arguments_raise_a_medseg_error(tmp_path: Path) -> None:
    a_file = tmp_path / "occupied"
    a_file.write_text("not a folder")
    with pytest.raises(MedsegError, match="not a folder") as caught:
        write_demo_phantom(a_file)
    assert caught.value.path == a_file
    with pytest.raises(MedsegError, match="spacing"):
        make_phantom(spacing=(0.0, 1.0, 1.0))
    with pytest.raises(MedsegError, match="shape"):
        make_phantom(shape=(2, 64, 64))


def test_demo_study_is_generated_once_then_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    folder = demo_study_path()
    assert folder == tmp_path / "cache" / "demo-phantom-v1"
    marker = json.loads((tmp_path / "cache" / f"demo-phantom-v1.{COMPLETE_MARKER}").read_text())
    assert len(marker["files"]) == DEFAULT_SHAPE_ZYX[0]
    assert sorted(p.name for p in folder.iterdir()) == sorted(marker["files"])  # nothing but the series
    assert not list((tmp_path / "cache").glob("*partial*"))  # the staging folder is gone

    def must_not_write(*args: object, **kwargs: object) -> list[Path]:
        raise AssertionError("a complete demo study was regenerated")

    monkeypatch.setattr(phantom, "write_demo_phantom", must_not_write)
    assert demo_study_path() == folder


def test_demo_study_is_regenerated_when_incomplete(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path))
    folder = demo_study_path()
    reference = _pixel_bytes(sorted(folder.glob("CT.*.dcm")))

    (folder / "CT.0010.dcm").unlink()  # a file went missing: the marker no longer holds
    assert demo_study_path() == folder
    assert _pixel_bytes(sorted(folder.glob("CT.*.dcm"))) == reference

    marker = tmp_path / f"demo-phantom-v1.{COMPLETE_MARKER}"
    marker.unlink()  # an interrupted write never reached the marker
    (folder / "CT.0050.dcm").write_bytes(b"half written")
    assert demo_study_path() == folder
    assert _pixel_bytes(sorted(folder.glob("CT.*.dcm"))) == reference
    assert marker.is_file()


def test_a_cancelled_generation_leaves_nothing_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path))
    token = CancelToken()
    seen: list[Progress] = []

    def cancel_midway(update: Progress) -> None:
        seen.append(update)
        if update.stage == "write" and update.fraction > 0.5:
            token.cancel()

    with pytest.raises(Cancelled):
        demo_study_path(progress=cancel_midway, cancel=token)
    assert seen and seen[0].fraction == 0.0
    assert list(tmp_path.iterdir()) == []


def test_medseg_loads_the_demo_study_as_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, demo: phantom.Phantom) -> None:
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path))
    volume = load(demo_study_path())
    assert volume.same_grid(demo.image)
    np.testing.assert_array_equal(volume.array, demo.image.array)
    assert volume.meta.findings == []  # a clean series: nothing to warn the user about
    assert volume.meta.modality == "CT"
    assert "SYNTHETIC" in volume.meta.series_description and "SYNTHETIC" in volume.meta.study_description
