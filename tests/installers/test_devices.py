"""The device check (medseg devices, Help > About) on each kind of machine: CUDA, Apple MPS,
DirectML and CPU only are faked (``fake_machine``), so every branch runs on whatever runs the tests."""

from __future__ import annotations

import json
import os

import onnxruntime
import pytest

from medseg.cli import main
from medseg.model.devices import GIB, probe, report_lines


@pytest.fixture(scope="module")
def report():
    return probe()


def test_gpus_of_a_cuda_machine_are_listed_with_their_memory(fake_machine):
    fake_machine(cuda=2, mps=False)
    report = probe()
    assert [(g.index, g.name, g.memory_bytes, g.compute_capability) for g in report.cuda] == [
        (0, "Fake GPU 0", 24 * GIB, "8.9"), (1, "Fake GPU 1", 32 * GIB, "8.9")]
    assert (report.recommended, report.available) == ("cuda", ["cuda", "cpu", "onnx-cpu"])
    assert (report.mps, report.directml, report.notes) == (False, False, [])
    lines = report_lines(report)
    assert any(line.startswith("CUDA GPU 1: Fake GPU 1, 32.0 GiB, compute capability 8.9") for line in lines)


def test_a_mac_reports_mps_and_why_auto_does_not_pick_it(fake_machine):
    fake_machine(cuda=0, mps=True)
    report = probe()
    assert report.cuda == [] and report.mps
    assert (report.recommended, report.available) == ("cpu", ["mps", "cpu", "onnx-cpu"])
    assert report.notes == ["MPS is offered but not chosen automatically (3D transposed convolutions differ "
                            "between PyTorch versions); pick it with --device mps"]
    assert "Apple MPS: available" in report_lines(report)


def test_directml_machine_reports_directml_as_the_automatic_choice(fake_machine):
    fake_machine(cuda=0, providers=("DmlExecutionProvider", "CPUExecutionProvider"))
    report = probe()
    assert report.directml and report.onnx_providers == ["DmlExecutionProvider", "CPUExecutionProvider"]
    assert (report.recommended, report.available) == ("directml", ["directml", "cpu", "onnx-cpu"])
    assert any(line.startswith("DirectML: available through ONNX Runtime") for line in report_lines(report))


def test_cpu_only_machine(fake_machine):
    fake_machine(cuda=0, mps=False)
    report = probe()
    assert (report.cuda, report.mps, report.directml) == ([], False, False)
    assert (report.recommended, report.available) == ("cpu", ["cpu", "onnx-cpu"])
    assert report.cpu_logical_cores == os.cpu_count()
    assert report.onnxruntime == onnxruntime.__version__
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
