"""The device check (medseg devices, Help > About) against what torch and ONNX Runtime report
on whatever machine runs the tests (GPU or not)."""

from __future__ import annotations

import json
import os

import onnxruntime
import pytest
import torch

from medseg.cli import main
from medseg.model import backends
from medseg.model.devices import GIB, probe, report_lines


@pytest.fixture(scope="module")
def report():
    return probe()


def test_cuda_entries_match_torch(report):
    assert bool(report.cuda) == torch.cuda.is_available()
    assert len(report.cuda) == (torch.cuda.device_count() if torch.cuda.is_available() else 0)
    for gpu in report.cuda:
        props = torch.cuda.get_device_properties(gpu.index)
        assert gpu.name == torch.cuda.get_device_name(gpu.index)
        assert gpu.memory_bytes == props.total_memory
        assert gpu.compute_capability == f"{props.major}.{props.minor}"
    assert report.torch_cuda == torch.version.cuda
    assert ("cuda" in report.available) == torch.cuda.is_available()


def test_directml_mps_and_cpu_match_the_runtimes(report):
    providers = onnxruntime.get_available_providers()
    assert report.onnx_providers == providers
    assert report.directml == ("DmlExecutionProvider" in providers)
    assert report.mps == torch.backends.mps.is_available()
    assert report.mps_built == torch.backends.mps.is_built()
    assert report.cpu_logical_cores == os.cpu_count()
    assert report.torch_threads == torch.get_num_threads()
    assert report.onnxruntime == onnxruntime.__version__


def test_recommended_device_is_the_one_auto_uses(report):
    assert report.recommended == backends.resolve_device("auto")
    assert report.recommended in report.available
    assert report.available[-1] in ("cpu", "onnx-cpu")  # the CPU is always there, last
    assert report.variant == "source" and report.frozen is False and report.training is True


def test_text_report_names_each_device_kind(report):
    lines = report_lines(report)
    text = "\n".join(lines)
    assert f"Device used by 'auto': {report.recommended}" in text
    for gpu in report.cuda:
        assert f"CUDA GPU {gpu.index}: {gpu.name}, {gpu.memory_bytes / GIB:.1f} GiB" in text
    kinds = [next(i for i, line in enumerate(lines) if line.startswith(prefix))
             for prefix in ("CUDA", "DirectML:", "Apple MPS:", "CPU:", "Training:")]
    assert kinds == sorted(kinds)
    assert f"{report.cpu_logical_cores} logical cores" in text
    assert "Training: available" in lines


def test_cli_devices_json_and_text(capsys, report):
    assert main(["devices", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed == json.loads(json.dumps(report.to_dict()))
    assert main(["devices"]) == 0
    assert f"Device used by 'auto': {report.recommended}" in capsys.readouterr().out
