"""Dataset sources on real CT: label mapping, grid handling, DICOM SEG, fingerprint."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from medseg.errors import DatasetError
from medseg.io import load, read_image, write_image
from medseg.model.datasets import fingerprint_cases, label_table, open_dataset, save_case

TS = "totalsegmentator"
LIVER_VOXELS_SM = 38_634  # data README: liver voxels in example_seg.nii.gz


def _write_manifest(path: Path, record: dict) -> Path:
    path.write_text(json.dumps(record))
    return path


def test_folder_pairs_map_non_consecutive_values(ct_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "pairs"
    folder.mkdir()
    image = read_image(ct_dir / TS / "example_ct_sm.nii.gz")
    labels = read_image(ct_dir / TS / "example_seg.nii.gz")
    write_image(image, folder / "abdomen_image.nii.gz")
    write_image(labels, folder / "abdomen_label.nii.gz")
    (folder / "labels.json").write_text(json.dumps({"5": "liver", "2": "kidney_right"}))

    dataset = open_dataset(folder)
    assert dataset.labels == {0: "background", 1: "kidney_right", 2: "liver"}
    (case,) = list(dataset.cases())
    assert case.label_map.same_grid(case.image)
    assert np.count_nonzero(case.label_map.array == 2) == LIVER_VOXELS_SM
    assert set(np.unique(case.label_map.array)) == {0, 1, 2}
    assert any("no name" in note for note in case.notes)  # the other 39 labels are dropped, and said


def test_nnunet_raw_layout(ct_dir: Path, tmp_path: Path) -> None:
    root = tmp_path / "Dataset042_Liver"
    (root / "imagesTr").mkdir(parents=True)
    (root / "labelsTr").mkdir()
    write_image(read_image(ct_dir / TS / "example_ct_sm.nii.gz"), root / "imagesTr" / "abd_0000.nii.gz")
    write_image(read_image(ct_dir / TS / "example_seg.nii.gz"), root / "labelsTr" / "abd.nii.gz")
    (root / "dataset.json").write_text(json.dumps({
        "channel_names": {"0": "CT"}, "labels": {"background": 0, "liver": 5}, "numTraining": 1,
        "file_ending": ".nii.gz"}))
    dataset = open_dataset(root)
    assert dataset.labels == {0: "background", 1: "liver"}
    (case,) = list(dataset.cases())
    assert case.name == "abd"
    assert np.count_nonzero(case.label_map.array == 1) == LIVER_VOXELS_SM


def test_label_map_on_another_grid_is_resampled_and_said(ct_dir: Path, tmp_path: Path) -> None:
    # example_seg_dicom is stored LAS (y flipped); compared index for index the liver would read ~-75 HU.
    manifest = _write_manifest(tmp_path / "d.json", {
        "data_root": str(ct_dir), "labels": ["liver"],
        "cases": [{"name": "dicom", "image": f"{TS}/example_ct_dicom", "label": f"{TS}/example_seg_dicom.nii.gz",
                   "label_values": {"5": "liver"}}]})
    (case,) = list(open_dataset(manifest).cases())
    assert any("resampled onto the image in patient coordinates (nearest neighbour)" in note for note in case.notes)
    liver_hu = float(case.image.array[case.label_map.array == 1].mean())
    assert 80 < liver_hu < 100  # README: about 89 HU when the geometry is handled


def test_dicom_series_with_dicom_seg(ct_dir: Path, tmp_path: Path) -> None:
    base = ct_dir / "dcmqi_ct3slice_masks"
    manifest = _write_manifest(tmp_path / "seg.json", {
        "data_root": str(base), "labels": ["Liver"],
        "cases": [{"name": "seg", "image": "image", "label": "masks/liver_SEG.dcm"}]})
    dataset = open_dataset(manifest)
    (case,) = list(dataset.cases())
    reference = load(base / "masks" / "liver_seg.nrrd")
    assert case.label_map.same_grid(reference)
    assert np.array_equal(case.label_map.array == 1, reference.array == 1)  # same 107,098 voxels as the NRRD


def test_rule_labels_and_held_out_validation(ct_dir: Path, tmp_path: Path) -> None:
    manifest = _write_manifest(tmp_path / "rules.json", {
        "data_root": "$MEDSEG_TEST_ROOT", "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "ct3", "image": "dcmqi_ct3slice_masks/image", "label_rule": "starter"},
                  {"name": "sm", "image": f"{TS}/example_ct_sm.nii.gz", "label_rule": "starter"}],
        "validation": ["sm"]})
    with pytest.raises(DatasetError, match="MEDSEG_TEST_ROOT"):
        open_dataset(manifest)  # unset variable: a clear error, not a path under "$..."
    dataset = open_dataset(manifest, data_root=ct_dir)
    assert [s.name for s in dataset.training_specs] == ["ct3"]
    assert [s.name for s in dataset.validation_specs] == ["sm"]
    case = dataset.load(dataset.training_specs[0])
    assert set(np.unique(case.label_map.array)) == {0, 1, 2, 3}


def test_editor_case_round_trip(ct_dir: Path, tmp_path: Path) -> None:
    image = read_image(ct_dir / TS / "example_ct_sm.nii.gz")
    raw = read_image(ct_dir / TS / "example_seg.nii.gz")
    label_map = image.with_array(np.where(raw.array == 5, 7, 0).astype(np.uint8))  # editor value 7 = liver
    save_case(tmp_path / "cases" / "patient_a", image, label_map, {7: "liver"}, {7: (200, 70, 60)})
    dataset = open_dataset(tmp_path / "cases")
    assert dataset.labels == {0: "background", 1: "liver"}
    assert dataset.colors[1] == (200, 70, 60)
    (case,) = list(dataset.cases())
    assert np.count_nonzero(case.label_map.array == 1) == LIVER_VOXELS_SM


def test_fingerprint_of_real_cases(ct_dir: Path, tmp_path: Path) -> None:
    manifest = _write_manifest(tmp_path / "f.json", {
        "data_root": str(ct_dir / TS), "labels": ["liver"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label": "example_seg.nii.gz",
                   "label_values": {"5": "liver"}}]})
    fingerprint = fingerprint_cases(open_dataset(manifest).cases())
    assert fingerprint.spacings_zyx == [(3.0, 3.0, 3.0)]
    assert fingerprint.shapes_zyx == [(30, 101, 122)]
    stats = fingerprint.foreground_intensity
    assert 30 < stats["mean"] < 60  # README: liver mean about 45 HU
    assert stats["percentile_00_5"] < stats["mean"] < stats["percentile_99_5"]


def test_bad_inputs_name_the_file(tmp_path: Path, ct_dir: Path) -> None:
    with pytest.raises(DatasetError, match="not found"):
        open_dataset(tmp_path / "missing")
    manifest = _write_manifest(tmp_path / "m.json", {
        "data_root": str(ct_dir), "labels": ["liver"],
        "cases": [{"name": "x", "image": "nope.nii.gz", "label_rule": "starter"}]})
    with pytest.raises(DatasetError) as error:
        open_dataset(manifest)
    assert "nope.nii.gz" in str(error.value)
    region = tmp_path / "regions"
    (region / "imagesTr").mkdir(parents=True)
    (region / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"},
                                                     "labels": {"background": 0, "organ": [1, 2]}}))
    with pytest.raises(DatasetError, match="region-based"):
        open_dataset(region)
    assert label_table(["b", "a", "b"]) == {0: "background", 1: "b", 2: "a"}
