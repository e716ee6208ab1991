"""Exports (ONNX, TorchScript, package) verified against torch on a real CT."""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
import torch

from medseg.cli import main
from medseg.errors import ModelError
from medseg.io import load
from medseg.model.export import PARITY_REQUIRED, export_onnx, load_torchscript
from medseg.model.export_formats import check_parity, export_model
from medseg.model.package import build_networks, load_package
from medseg.model.preprocess import preprocess


@pytest.fixture(scope="module")
def starter():
    return load_package(Path(str(resources.files("medseg.resources") / "models" / "starter")))


@pytest.fixture(scope="module")
def chest_ct(ct_dir: Path):
    return load(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")  # real chest CT, 512 x 512 x 48


def test_onnx_export_computes_what_torch_computes_on_real_ct(starter, chest_ct, tmp_path: Path) -> None:
    configuration = next(iter(starter.configurations))
    plan = starter.configurations[configuration]
    result = export_model(starter, "onnx", tmp_path / "starter.onnx", chest_ct, "lung1")
    (parity,) = result.parity
    assert parity.voxels == int(np.prod(chest_ct.shape_zyx))
    model = onnx.load(str(tmp_path / "starter.onnx"))
    assert max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx")) == 17
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "tiles"  # batch axis dynamic
    assert [d.dim_value for d in dims[2:]] == list(plan.patch_size)
    # The written file, run here by ONNX Runtime itself, against the package's torch network, on
    # tiles of the real CT (lung, mediastinum, bone) as the sliding window cuts them.
    data = preprocess(chest_ct, plan).data
    assert plan.dim == 2
    slices = np.stack([data[:, z] for z in (8, 24, 40)])  # (3, 1, y, x)
    pads = [(0, 0), (0, 0)] + [(max(0, p - n) // 2, max(0, p - n) - max(0, p - n) // 2)
                               for n, p in zip(slices.shape[2:], plan.patch_size)]
    tiles = np.ascontiguousarray(np.pad(slices, pads)[:, :, : plan.patch_size[0], : plan.patch_size[1]], np.float32)
    session = onnxruntime.InferenceSession(str(tmp_path / "starter.onnx"), providers=["CPUExecutionProvider"])
    (exported,) = session.run(None, {session.get_inputs()[0].name: tiles})
    with torch.no_grad():
        reference = build_networks(starter, configuration)[0](torch.from_numpy(tiles)).numpy()
    assert exported.shape == reference.shape == (3, len(starter.labels), *plan.patch_size)
    assert np.abs(exported - reference).max() < 1e-3 * np.abs(reference).max()
    agree = float(np.mean(exported.argmax(1) == reference.argmax(1)))
    assert agree >= PARITY_REQUIRED, agree
    assert len(np.unique(reference.argmax(1))) == len(starter.labels)  # every label is in these tiles


def test_torchscript_export_passes_parity_and_takes_any_batch(starter, chest_ct, tmp_path: Path) -> None:
    configuration = next(iter(starter.configurations))
    plan = starter.configurations[configuration]
    result = export_model(starter, "torchscript", tmp_path / "starter.pt", chest_ct, "lung1")
    assert result.parity[0].passed and result.parity[0].runtime == "torchscript"
    module = load_torchscript(tmp_path / "starter.pt")
    tiles = torch.randn(3, 1, *plan.patch_size)
    with torch.no_grad():
        expected = build_networks(starter, configuration)[0](tiles)
        assert torch.allclose(module(tiles), expected, atol=1e-4)


def test_package_export_carries_onnx_that_matches_torch(starter, chest_ct, tmp_path: Path) -> None:
    out = tmp_path / "exported_package"
    result = export_model(starter, "package", out, chest_ct, "lung1")
    assert all(report.passed for report in result.parity)
    reloaded = load_package(out)
    assert set(reloaded.onnx) == set(starter.configurations)
    assert reloaded.labels == starter.labels  # names, colours, codes


def test_a_wrong_export_fails_the_check_and_writes_nothing(starter, chest_ct, tmp_path: Path) -> None:
    configuration = next(iter(starter.configurations))
    other = build_networks(starter, configuration)[0]
    with torch.no_grad():
        for parameter in other.parameters():
            parameter.add_(0.5 * torch.randn_like(parameter))  # a different network
    buffer = io.BytesIO()
    export_onnx(other, starter.configurations[configuration], buffer)
    report = check_parity(starter, configuration, chest_ct, "onnx", buffer.getvalue(), "lung1")
    assert not report.passed and "FAIL" in str(report)
    with pytest.raises(ModelError, match="unknown export format"):
        export_model(starter, "tflite", tmp_path / "x.tflite", chest_ct)
    assert not (tmp_path / "x.tflite").exists()


def test_cli_prints_the_parity_check(starter, ct_dir: Path, tmp_path: Path, capsys) -> None:
    model_dir = str(resources.files("medseg.resources") / "models" / "starter")
    code = main(["export", model_dir, "--format", "onnx", "-o", str(tmp_path / "m.onnx"),
                 "--check-image", str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")])
    out = capsys.readouterr().out
    assert code == 0
    assert "parity onnxruntime-cpu vs torch" in out and "PASS" in out
    assert (tmp_path / "m.onnx").stat().st_size > 100_000
