"""Instance norms exported as short reductions (medseg.model.exact_norm): the same function as PyTorch's
nn.InstanceNorm3d, and an ONNX runtime computes it from the export as exactly as PyTorch does.

Input: a crop of the real lung1 CT in Hounsfield units (mostly air and soft tissue: a convolution's output
has a mean far from zero against its spread, the case where a one-pass E[x^2] - E[x]^2 loses digits). The
oracle is PyTorch's own InstanceNorm3d in float64. ONNX Runtime (a core dependency) and OpenVINO (the
optional extra the interactive runtimes use) run the export.
"""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime
import pytest
import SimpleITK as sitk
import torch
from torch import nn

from medseg.model.exact_norm import ExactInstanceNorm, with_exact_norms
from medseg.model.onnx_graph import export_onnx


class _Plan:
    num_input_channels = 1
    patch_size = (24, 64, 64)


def _network() -> nn.Module:
    torch.manual_seed(0)
    network = nn.Sequential(nn.Conv3d(1, 16, 3, padding=1), nn.InstanceNorm3d(16, affine=True),
                            nn.LeakyReLU(0.01), nn.Conv3d(16, 16, 3, padding=1), nn.InstanceNorm3d(16, affine=True))
    for module in network:
        if isinstance(module, nn.InstanceNorm3d):
            module.weight.data.uniform_(0.5, 1.5)
            module.bias.data.normal_()
    return network.eval()


@pytest.fixture(scope="module")
def ct_patch(shared_data) -> torch.Tensor:
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(shared_data / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd")))
    return torch.from_numpy(image[16:40, 300:364, 180:244].astype(np.float32))[None, None]


def test_the_copy_computes_what_pytorchs_instance_norm_computes(ct_patch):
    network = _network()
    exact, replaced = with_exact_norms(network)
    assert replaced == 2
    assert isinstance(exact[1], ExactInstanceNorm) and isinstance(network[1], nn.InstanceNorm3d)  # a copy
    with torch.no_grad():
        reference = network.double()(ct_patch.double())
        ours = exact.double()(ct_patch.double())
    assert torch.allclose(ours, reference, rtol=0, atol=1e-9)


def _onnx_runtime(path, x: np.ndarray) -> np.ndarray:
    session = onnxruntime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, {session.get_inputs()[0].name: x})[0]


def _openvino(path, x: np.ndarray) -> np.ndarray:
    # an optional extra (medseg[openvino], installed by make setup): on a machine without it only ONNX Runtime runs.
    # Its InstanceNormalization (MVN) is 7x PyTorch's float32 error on this input, the exact export ~1x.
    openvino = pytest.importorskip("openvino")
    compiled = openvino.Core().compile_model(str(path), "CPU", {"INFERENCE_PRECISION_HINT": "f32"})
    return compiled({0: x})[0]


@pytest.mark.parametrize("run", [_onnx_runtime, _openvino], ids=["onnxruntime", "openvino"])
def test_the_export_runs_as_exactly_as_pytorch(ct_patch, tmp_path, run):
    network = _network()
    path = export_onnx(network, _Plan(), tmp_path / "exact.onnx", exact_norm=True)
    operators = {node.op_type for node in onnx.load(str(path)).graph.node}
    assert "InstanceNormalization" not in operators and {"ReduceSum", "ReduceMean"} <= operators
    exported = run(path, ct_patch.numpy())
    with torch.no_grad():
        reference = network.double()(ct_patch.double()).numpy()
        pytorch_error = np.abs(network.float()(ct_patch).numpy() - reference).max()
    # the export's error is PyTorch's float32 error, give or take a small factor (not InstanceNormalization's)
    assert np.abs(exported - reference).max() <= max(4 * pytorch_error, 1e-5)
