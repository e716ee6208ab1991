"""One device choice (medseg.model.backends) for segmenting, training, the CLI and the report
(the GUI's menus: tests/gui/test_about_devices.py).

The machine is faked (the ``fake_machine`` fixture): torch's and ONNX Runtime's availability
functions are replaced, so every kind of machine (CUDA, Apple MPS, DirectML, CPU only) is tried
on whatever runs the tests.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from medseg.cli import main
from medseg.errors import DeviceError
from medseg.model.backends import (
    DEVICES,
    TENSOR_DEVICE,
    TRAINING,
    available_devices,
    device_choices,
    resolve_device,
    torch_device,
)

PACKAGE = Path(__file__).resolve().parents[2] / "medseg"


# --- the rule, machine by machine -----------------------------------------------------------------


def test_cuda_machine_segments_and_trains_on_cuda(fake_machine):
    fake_machine(cuda=2, mps=False)
    assert resolve_device("auto") == "cuda" and resolve_device("auto", TRAINING) == "cuda"
    assert available_devices() == ["cuda", "cpu", "onnx-cpu"]
    assert available_devices(TRAINING) == ["cuda", "cpu"]
    assert resolve_device("cuda:1", TRAINING) == "cuda:1"  # one GPU of several, for training
    with pytest.raises(DeviceError, match="no CUDA GPU '2'"):
        resolve_device("cuda:2", TRAINING)
    labels = {c.device: c.label for c in device_choices()}
    assert labels["cuda"] == "CUDA: Fake GPU 0, 24 GB (+1 more)"
    assert labels["auto"] == "Automatic (CUDA: Fake GPU 0, 24 GB (+1 more))"


def test_mac_offers_mps_for_segmenting_but_never_picks_it_alone(fake_machine):
    fake_machine(cuda=0, mps=True)
    assert resolve_device("auto") == "cpu"  # ConvTranspose3d differs between PyTorch versions on MPS
    assert resolve_device("mps") == "mps"
    assert [c.device for c in device_choices()] == ["auto", "mps", "cpu", "onnx-cpu"]
    assert [c.device for c in device_choices(TRAINING)] == ["auto", "cpu"]
    with pytest.raises(DeviceError, match="training runs on CUDA or the CPU, not 'mps'"):
        resolve_device("mps", TRAINING)


def test_cpu_only_machine_refuses_absent_devices_by_name(fake_machine):
    fake_machine(cuda=0, mps=False)
    assert resolve_device("auto") == "cpu" and resolve_device("auto", TRAINING) == "cpu"
    assert [c.device for c in device_choices()] == ["auto", "cpu", "onnx-cpu"]
    for device, message in (("cuda", "no CUDA GPU is usable"), ("mps", "Apple MPS was requested"),
                            ("directml", "DmlExecutionProvider is not installed"), ("tpu", "unknown device 'tpu'")):
        with pytest.raises(DeviceError, match=message):
            resolve_device(device)
    with pytest.raises(DeviceError, match="no CUDA GPU is usable"):
        resolve_device("cuda:0", TRAINING)
    with pytest.raises(DeviceError, match="unknown device 'cuda:0'"):  # segmenting takes "cuda", not one GPU
        resolve_device("cuda:0")


def test_windows_directml_is_the_automatic_choice_without_cuda(fake_machine):
    fake_machine(cuda=0, providers=["DmlExecutionProvider", "CPUExecutionProvider"])
    assert resolve_device("auto") == "directml" and resolve_device("auto", TRAINING) == "cpu"
    assert available_devices() == ["directml", "cpu", "onnx-cpu"]
    with pytest.raises(DeviceError, match="'directml' is for segmenting|directml is for segmenting"):
        resolve_device("directml", TRAINING)


# --- every caller goes through it ----------------------------------------------------------------------


def test_training_setup_uses_the_choice(fake_machine):
    from medseg.model.training import setup_distributed

    fake_machine(cuda=1)
    assert setup_distributed("auto").device == torch.device("cuda")
    fake_machine(cuda=0, mps=True)
    assert setup_distributed("auto").device == torch.device("cpu")
    with pytest.raises(DeviceError, match="not 'mps'"):
        setup_distributed("mps")


def test_device_report_agrees_with_the_choice(fake_machine):
    from medseg.model.devices import probe

    fake_machine(cuda=1, mps=True)
    report = probe()
    assert (report.recommended, report.available, report.mps) == ("cuda", ["cuda", "mps", "cpu", "onnx-cpu"], True)
    assert [(g.name, g.memory_bytes) for g in report.cuda] == [("Fake GPU 0", 24 * 2**30)]


@pytest.mark.parametrize("argv", [
    ["segment", "/nonexistent/ct.nrrd", "-o", "{tmp}/seg.nii.gz", "--device", "mps"],
    ["evaluate", "/nonexistent/model", "/nonexistent/dataset", "--device", "mps"],
    ["train", "/nonexistent/dataset", "--out", "{tmp}/model", "--device", "mps"],
    ["batch", "/nonexistent/archive", "-o", "{tmp}/out", "--device", "mps"],  # it picked CUDA itself before
])
def test_cli_refuses_an_absent_device_before_reading_anything(fake_machine, argv, tmp_path, capsys):
    fake_machine(cuda=0, mps=False)
    assert main([a.replace("{tmp}", str(tmp_path)) for a in argv]) == 1
    error = capsys.readouterr().err
    expected = "training runs on CUDA or the CPU, not 'mps'" if argv[0] == "train" else "Apple MPS was requested"
    assert expected in error and "nonexistent" not in error


def test_no_module_asks_torch_or_onnxruntime_for_devices_itself():
    """Availability is asked in backends.py only: a second chooser would drift (the GUI once offered no MPS)."""
    asks = {"is_available", "get_available_providers"}
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "backends.py" and path.parent.name == "model":
            continue
        for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
            if isinstance(node, ast.Attribute) and node.attr in asks and \
                    ast.unparse(node.value).split(".")[0] in ("torch", "onnxruntime"):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {ast.unparse(node)}")
    assert offenders == []


def test_one_table_says_where_each_device_computes():
    """ONNX Runtime's devices work in host memory; the torch devices in their own (infer had a second map)."""
    assert set(TENSOR_DEVICE) == set(DEVICES) - {"auto"}
    assert [torch_device(d).type for d in ("cuda", "mps", "cpu", "directml", "onnx-cpu")] == \
        ["cuda", "mps", "cpu", "cpu", "cpu"]
    assert torch_device("cuda:1") == torch.device("cuda", 1)
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        torch_device("tpu")


def test_purpose_is_checked():
    with pytest.raises(ValueError):
        resolve_device("auto", "painting")
