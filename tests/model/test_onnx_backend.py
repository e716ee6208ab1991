"""ONNX export and the ONNX Runtime path against the PyTorch path; device selection."""

from __future__ import annotations

import io

import numpy as np
import onnx
import onnxruntime
import pytest
import torch
from infer_fixtures import ABDOMEN_WIDER, CHEST, crop_volume, small_model_folder

from medseg.errors import DeviceError
from medseg.model import backends
from medseg.model.export import ONNX_OPSET, add_onnx_to_package, export_onnx
from medseg.model.infer import segment
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks, load_package, save_package

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def package(tmp_path_factory):
    return import_nnunet(small_model_folder(tmp_path_factory.mktemp("nnunet")))


def test_export_is_opset_17_with_a_dynamic_tile_batch(package, tmp_path):
    plan = package.configurations["3d_fullres"]
    network = build_networks(package, "3d_fullres")[0]
    path = export_onnx(network, plan, tmp_path / "net.onnx")
    model = onnx.load(str(path))
    onnx.checker.check_model(model)
    assert model.opset_import[0].version == ONNX_OPSET
    dims = model.graph.input[0].type.tensor_type.shape.dim
    assert dims[0].dim_param == "tiles" and [d.dim_value for d in dims[2:]] == list(plan.patch_size)
    tiles = torch.randn(2, 1, *plan.patch_size, generator=torch.Generator().manual_seed(0))
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    (onnx_logits,) = session.run(None, {"image": tiles.numpy()})
    with torch.inference_mode():
        torch_logits = network(tiles).numpy()
    assert onnx_logits.shape == torch_logits.shape == (2, 3, *plan.patch_size)
    assert np.abs(onnx_logits - torch_logits).max() < 1e-3


def test_onnx_runtime_labels_match_torch(package, ct_dir):
    volume = crop_volume(ct_dir, ABDOMEN_WIDER)
    torch_result = segment(volume, package, device="cpu")
    onnx_result = segment(volume, package, device="onnx-cpu")
    assert onnx_result.device_used == "onnx-cpu" and onnx_result.fallbacks == []
    assert np.bincount(torch_result.label_map.array.ravel(), minlength=3).min() > 0.05 * volume.array.size
    agreement = (onnx_result.label_map.array == torch_result.label_map.array).mean()
    assert agreement >= 0.9999, f"voxel agreement {agreement:.6f}"
    # the CPU engine ran the exact-norm export, made once and kept in the cache folder for the next run
    from medseg.app_dirs import cache_dir
    from medseg.model import cpu_runtime

    kept = cache_dir() / cpu_runtime.EXPORT_FOLDER / f"{cpu_runtime.model_digest(package, '3d_fullres')}.onnx"
    assert kept.is_file()


def test_onnx_runtime_differs_from_torch_only_at_near_ties(package, ct_dir):
    """The random-weight test model splits the chest into three noisy classes, so label
    boundaries are everywhere; upsampling 1.5 mm -> 0.57 mm repeats each network voxel about
    7 times. The two runtimes' float32 convolutions differ by ~1e-5, which may flip a voxel
    only where two classes are practically tied."""
    volume = crop_volume(ct_dir, CHEST)
    torch_result = segment(volume, package, device="cpu", return_probabilities=True)
    onnx_labels = segment(volume, package, device="onnx-cpu").label_map.array
    differ = onnx_labels != torch_result.label_map.array
    assert differ.mean() <= 2e-4, f"{differ.sum()} of {differ.size} voxels differ"
    top_two = np.sort(torch_result.probabilities[:, differ], axis=0)[-2:]
    assert np.all(top_two[1] - top_two[0] < 0.01)


def test_onnx_model_travels_with_a_saved_package(package, tmp_path):
    data = add_onnx_to_package(package, "3d_fullres")
    saved = save_package(package, tmp_path / "model.medseg")
    loaded = load_package(saved)
    stored = loaded.onnx["3d_fullres"]
    stored = stored if isinstance(stored, bytes) else open(stored, "rb").read()
    assert stored == data
    onnx.checker.check_model(onnx.load(io.BytesIO(stored)))


# (fake machine, what auto picks, every device offered for segmenting, best first): each machine set up by
# fake_machine, so every branch runs whatever machine runs the test.
MACHINES = {
    "cpu only": (dict(), "cpu", ["cpu", "onnx-cpu"]),
    "DirectML and OpenVINO": (dict(providers=("DmlExecutionProvider", "CPUExecutionProvider"), openvino=True),
                              "directml", ["directml", "cpu", "onnx-cpu", "openvino-cpu"]),
    "CUDA and DirectML": (dict(cuda=1, providers=("DmlExecutionProvider", "CPUExecutionProvider")),
                          "cuda", ["cuda", "directml", "cpu", "onnx-cpu"]),
}


@pytest.mark.parametrize("machine", list(MACHINES))
def test_device_resolution(fake_machine, machine):
    """On each kind of machine: auto picks the best device there is, a missing one is refused by name."""
    settings, auto, offered = MACHINES[machine]
    fake_machine(**settings)
    assert backends.resolve_device("cpu") == "cpu"
    assert backends.resolve_device("onnx-cpu") == "onnx-cpu"
    assert backends.resolve_device("auto") == auto
    assert backends.available_devices() == offered
    if "cuda" in offered:
        assert backends.resolve_device("cuda") == "cuda"
    else:
        with pytest.raises(DeviceError, match="CUDA was requested"):
            backends.resolve_device("cuda")
    if "directml" in offered:
        assert backends.resolve_device("directml") == "directml"
    else:
        with pytest.raises(DeviceError, match="DmlExecutionProvider is not installed"):
            backends.resolve_device("directml")
    with pytest.raises(DeviceError, match="unknown device 'tpu'"):
        backends.resolve_device("tpu")


def test_auto_takes_pytorch_when_there_is_no_gpu(monkeypatch):
    """ONNX Runtime lost voxel agreement with nnU-Net on the real-size network (bench_infer.py)."""
    monkeypatch.setattr(backends, "cuda_available", lambda: False)
    monkeypatch.setattr(backends, "directml_available", lambda: False)
    assert backends.resolve_device("auto") == "cpu"
    monkeypatch.setattr(backends, "directml_available", lambda: True)
    assert backends.resolve_device("auto") == "directml"


def test_out_of_memory_recognized_from_both_runtimes():
    assert backends.is_out_of_memory(torch.OutOfMemoryError("CUDA out of memory"))
    assert backends.is_out_of_memory(RuntimeError("out of memory in ONNX Runtime: E_OUTOFMEMORY"))
    assert not backends.is_out_of_memory(RuntimeError("shape mismatch"))
