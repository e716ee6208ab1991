"""A model's output that cannot be a segmentation is an error, not a result (issue 43): NaN logits (a
package whose weights are NaN gave a label map with 34 % agreement), every voxel one structure; a NaN
normalisation is refused when the package is read; nothing found is said. Training refuses NaN learning
rates and stops at a loss that is not a number. The packages are the built-in starter model with its
weights or model.json changed here; the image is the real 3-slice GE series, cropped."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from probes import rewrite_series, run_medseg
from safetensors.numpy import load_file, save_file

from medseg.errors import ModelError
from medseg.io import load
from medseg.model.infer import segment
from medseg.model.package import load_package, starter_model_path


@pytest.fixture(scope="module")
def small(three_slices: Path, tmp_path_factory) -> Path:
    return rewrite_series(three_slices, tmp_path_factory.mktemp("small") / "series", crop=160)


def _package(tmp_path: Path, change_weights=None, change_manifest=None) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(starter_model_path(), folder)
    if change_weights is not None:
        path = folder / "weights.safetensors"
        tensors = load_file(str(path))
        save_file({key: change_weights(key, value) for key, value in tensors.items()}, str(path))
    if change_manifest is not None:
        manifest = json.loads((folder / "model.json").read_text())
        change_manifest(manifest)
        (folder / "model.json").write_text(json.dumps(manifest))
    return folder


def test_nan_weights_are_an_error_and_no_file_is_written(small, tmp_path) -> None:
    model = _package(tmp_path, lambda key, value: np.full_like(value, np.nan) if value.dtype.kind == "f" else value)
    run = run_medseg("segment", small, "--model", model, "-o", tmp_path / "seg.nii.gz")
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
    assert "the network's output is not a number (NaN)" in run.stderr
    assert not (tmp_path / "seg.nii.gz").exists()


def _constant_output(winner: int):
    """Every weight 0 and the finest output layer's bias favouring ``winner``: the same logits everywhere."""
    def change(key: str, value: np.ndarray) -> np.ndarray:
        if value.dtype.kind != "f":
            return value
        if key.endswith("decoder.seg_layers.4.bias"):
            bias = np.zeros_like(value)
            bias[winner] = 10.0
            return bias
        return np.zeros_like(value)
    return change


def test_every_voxel_one_structure_is_an_error(small, tmp_path) -> None:
    package = load_package(_package(tmp_path, _constant_output(1)))
    with pytest.raises(ModelError, match="labelled every voxel of the image 'body'"):
        segment(load(small), package, device="cpu")


def test_every_voxel_background_is_a_result_with_a_note(small, tmp_path) -> None:
    package = load_package(_package(tmp_path, _constant_output(0)))
    result = segment(load(small), package, device="cpu")
    assert not result.label_map.array.any()
    assert result.notes == ["the model found no structure in this image: every voxel is background"]


@pytest.mark.parametrize("field, value", [("mean", float("nan")), ("std", 0.0), ("std", float("nan"))])
def test_a_normalisation_that_is_not_a_number_is_refused_with_the_package(tmp_path, field, value) -> None:
    def change(manifest: dict) -> None:
        for configuration in manifest["configurations"].values():
            configuration["normalization"][field] = value
    folder = _package(tmp_path, change_manifest=change)
    with pytest.raises(ModelError, match="normalization") as caught:
        load_package(folder)
    assert str(folder) in str(caught.value)


@pytest.fixture(scope="module")
def pairs(ct_dir: Path, tmp_path_factory) -> Path:
    """Two small image/label cases cut from the TotalSegmentator CT and its liver."""
    import SimpleITK as sitk

    folder = tmp_path_factory.mktemp("pairs")
    (folder / "images").mkdir()
    (folder / "labels").mkdir()
    image = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"))
    labels = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_seg.nii.gz"))
    for index, start in enumerate((0, 10)):
        size, corner = [64, 64, 12], [30, 30, start]
        sitk.WriteImage(sitk.RegionOfInterest(image, size, corner), str(folder / "images" / f"case{index}.nii.gz"))
        sitk.WriteImage(sitk.Cast(sitk.RegionOfInterest(labels, size, corner) == 5, sitk.sitkUInt8),
                        str(folder / "labels" / f"case{index}.nii.gz"))
    return folder


def test_training_that_reaches_a_nan_loss_stops_in_words_and_writes_no_package(pairs, tmp_path) -> None:
    base = _package(tmp_path, lambda key, value: np.full_like(value, np.nan) if value.dtype.kind == "f" else value)
    run = run_medseg("train", pairs, "--out", tmp_path / "tuned", "--from", base, "--epochs", "1", "--iterations", "2",
                     "--device", "cpu", "--no-augment", timeout=600)
    assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr[-3000:]
    assert "training diverged: the loss is nan at epoch 1, iteration 1" in run.stderr
    assert "no epoch was completed, so there is no checkpoint" in run.stderr
    assert not (tmp_path / "tuned").exists()
