"""A hostile or damaged model package is a ModelError naming it, never a traceback, a hang or
an exhausted machine: model.json's values are bounded and type-checked, and the weights may
not be larger than the networks it lists."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest
from probes import run_medseg, write_zip

from medseg.errors import ModelError
from medseg.model.package import load_package, starter_model_path

STARTER = json.loads((starter_model_path() / "model.json").read_text())


def _first(manifest: dict) -> dict:
    return next(iter(manifest["configurations"].values()))


def _set(path: str, value):
    def change(manifest: dict) -> None:
        target = _first(manifest)
        target[path] = value
    return change


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


HOSTILE = {
    "patch 1e9": (_set("patch_size", [1_000_000_000, 1_000_000_000]), "patch_size"),
    "features 1e9": (_set("features_per_stage", [1_000_000_000] * 6), "features_per_stage"),
    "spacing 1e-6": (_set("target_spacing_zyx", [1e-6, 1e-6, 1e-6]), "target_spacing"),
    "5000 stages": (lambda m: _first(m).update(strides=[[2, 2]] * 5000, kernel_sizes=[[3, 3]] * 5000,
                                               features_per_stage=[32] * 5000, n_conv_per_stage_encoder=[2] * 5000,
                                               n_conv_per_stage_decoder=[2] * 4999), "5000 stages"),
    "string patch": (_set("patch_size", "160x160"), "patch_size"),
    "normalization list": (_set("normalization", ["CT"]), "normalization"),
    "configuration list": (lambda m: m.update(configurations={"2d": [1, 2]}), "2d"),
    "labels with a bad key": (lambda m: m.update(labels={"zero": "background", "1": "body"}), "labels"),
    "label name a number": (lambda m: m["labels"].update({"1": 7}), "labels"),
    "colours a string": (lambda m: m.update(colors="red"), "colors"),
    "colour out of range": (lambda m: m["colors"].update({"1": [300, 0, 0]}), "colours"),
    "folds a number": (lambda m: m.update(folds={"2d": 5}), "folds"),
    "name an object": (lambda m: m.update(name={"a": 1}), "name"),
}


@pytest.fixture
def package_copy(tmp_path: Path) -> Path:
    folder = tmp_path / "model"
    shutil.copytree(starter_model_path(), folder)
    return folder


@pytest.mark.parametrize("case", list(HOSTILE))
def test_a_hostile_model_json_is_a_model_error_naming_the_package(package_copy: Path, case: str) -> None:
    change, words = HOSTILE[case]
    manifest = copy.deepcopy(STARTER)
    change(manifest)
    (package_copy / "model.json").write_text(json.dumps(manifest))
    with pytest.raises(ModelError) as caught:
        load_package(package_copy)
    assert str(package_copy) in str(caught.value) and words in str(caught.value), str(caught.value)


def test_model_json_nested_100000_deep_is_refused(package_copy: Path) -> None:
    (package_copy / "model.json").write_text(_deep(100_000))
    with pytest.raises(ModelError, match="nested too deeply"):
        load_package(package_copy)


def test_the_cli_says_so_without_a_traceback(package_copy: Path, three_slices: Path, tmp_path: Path) -> None:
    manifest = copy.deepcopy(STARTER)
    _set("patch_size", [1_000_000_000, 1_000_000_000])(manifest)
    (package_copy / "model.json").write_text(json.dumps(manifest))
    run = run_medseg("segment", three_slices, "--model", package_copy, "-o", tmp_path / "seg.nii.gz")
    assert run.returncode == 1 and "Traceback" not in run.stderr and "patch_size" in run.stderr, run.stderr


def test_a_model_zip_with_a_2_gb_weights_member_is_refused_unread(three_slices: Path, tmp_path: Path) -> None:
    archive = write_zip(tmp_path / "model.zip", [("model.json", json.dumps(STARTER).encode()),
                                                 ("weights.safetensors", 2_000_000_000)], true_crc=False)
    assert archive.stat().st_size < 4_000_000
    run = run_medseg("segment", three_slices, "--model", archive, "-o", tmp_path / "seg.nii.gz",
                     memory_bytes=3 << 30)
    assert run.returncode == 1, run.stderr[-2000:]
    assert "Traceback" not in run.stderr and "weights.safetensors" in run.stderr and "MiB" in run.stderr
