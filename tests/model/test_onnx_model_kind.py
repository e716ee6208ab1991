"""An exported ONNX model is a model kind: `medseg export --format onnx` writes the network and its JSON sidecar,
and that pair segments a real CT through ONNX Runtime as the package it came from does through PyTorch.

The oracle is the package kind's own run of the same model (the shipped starter) on the same real series: the
ONNX file runs in another runtime (ONNX Runtime's CPU provider) with the sidecar's plan, labels and
post-processing, so equal labels mean the sidecar carries everything the network alone does not say.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from medseg.errors import ModelError
from medseg.io import load, read_image
from medseg.model.kinds import kind_of
from medseg.model.kinds.base import SegmentSettings
from medseg.model.kinds.onnx_kind import ONNX_MODEL
from medseg.workflows.model_export import ExportRequest, export_models
from medseg.workflows.models import open_model
from medseg.workflows.segment import SegmentRequest, segment_study

CT = "totalsegmentator/example_ct_dicom"  # a real abdomen series the starter was not trained on (its held-out case)


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("onnx") / "starter.onnx"
    export_models(ExportRequest(models=[None], format="onnx", output=out, check=False))
    return out


@pytest.fixture(scope="module")
def onnx_run(exported: Path, ct_dir: Path):
    """The real series, and the exported model's segmentation of it through the workflow every interface calls."""
    image = load(ct_dir / CT)
    return image, segment_study(SegmentRequest(image, open_model(exported), SegmentSettings(device="cpu")))


def test_the_export_writes_the_network_and_a_plain_json_sidecar(exported: Path) -> None:
    sidecar = json.loads(exported.with_name("starter.onnx.json").read_text())
    starter = open_model(None)
    assert sidecar["format"] == "medseg-onnx-model" and sidecar["onnx"] == "starter.onnx"
    assert {int(v): name for v, name in sidecar["labels"].items() if int(v)} == \
        {value: label.name for value, label in starter.card.labels.items() if value}
    (configuration,) = sidecar["configurations"].values()  # one configuration: the file holds one network
    plan = starter.package.configurations[sidecar["configuration"]]
    assert configuration["target_spacing_transposed"] == list(plan.target_spacing_transposed)
    assert configuration["normalization"] == plan.normalization
    assert sidecar["postprocessing"] == starter.package.postprocessing


def test_an_exported_onnx_model_segments_a_real_ct_as_its_package_does(exported: Path, onnx_run) -> None:
    image, ours = onnx_run
    assert ours.model.kind == ONNX_MODEL and ours.model.name == open_model(None).card.name
    theirs = segment_study(SegmentRequest(image, None, SegmentSettings(device="cpu")))
    assert ours.device == "onnx-cpu" and theirs.device == "cpu"  # ONNX Runtime ran one, PyTorch the other
    assert ours.fallbacks == []  # "cpu" asked for: ONNX Runtime's CPU provider, as asked, not a fallback
    assert len(np.unique(theirs.label_map.array)) >= 3  # the starter finds body and bones here: agreement means something
    agreement = float((ours.label_map.array == theirs.label_map.array).mean())
    assert agreement >= 0.999, f"{agreement:.5f} of voxels equal"
    assert ours.postprocessing == theirs.postprocessing  # the package's steps ran on both, from the sidecar on ours


def test_the_command_line_segments_with_the_onnx_file(exported: Path, onnx_run, ct_dir: Path, tmp_path: Path,
                                                      capsys) -> None:
    from medseg.cli import main

    out = tmp_path / "labels.nii.gz"
    assert main(["segment", str(ct_dir / CT), "--model", str(exported), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["event"] == "done"
    assert np.array_equal(read_image(out).array, onnx_run[1].label_map.array)


def test_a_folder_holding_the_pair_is_a_model_for_a_folder_picker(exported: Path) -> None:
    assert kind_of(exported.parent) is not None and open_model(exported.parent).card.kind == ONNX_MODEL


def test_an_onnx_file_without_its_sidecar_is_refused_naming_it(exported: Path, tmp_path: Path) -> None:
    alone = tmp_path / "alone.onnx"
    alone.write_bytes(exported.read_bytes())
    with pytest.raises(ModelError, match=r"without its sidecar alone\.onnx\.json"):
        open_model(alone)
