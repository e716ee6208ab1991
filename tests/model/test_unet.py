"""medseg's UNet against nnU-Net v2's PlainConvUNet with identical weights."""

from __future__ import annotations

import io

import numpy as np
import onnxruntime
import pytest
import torch
from dynamic_network_architectures.architectures.unet import PlainConvUNet

from medseg.errors import ModelError
from medseg.model.plan import Plan
from medseg.model.planner import estimate_feature_map_size, plan_from_spacing
from medseg.model.unet import UNet, build_network, canonical_state_dict

torch.set_num_threads(2)


def small_plan(dim: int) -> Plan:
    if dim == 3:
        # Thick-slice topology: z kept at stage 1, kernel 1 along z at stage 0.
        return Plan(
            name="3d_small", dim=3, target_spacing_transposed=(3.0, 1.5, 1.5), patch_size=(16, 32, 32),
            strides=[[1, 1, 1], [1, 2, 2], [2, 2, 2], [2, 2, 2]],
            kernel_sizes=[[1, 3, 3], [3, 3, 3], [3, 3, 3], [3, 3, 3]],
            features_per_stage=[8, 16, 24, 32], n_conv_per_stage_encoder=[2, 2, 2, 2],
            n_conv_per_stage_decoder=[2, 2, 2],
        )
    return Plan(
        name="2d_small", dim=2, target_spacing_transposed=(3.0, 0.8, 0.8), patch_size=(64, 48),
        strides=[[1, 1], [2, 2], [2, 2], [2, 1]], kernel_sizes=[[3, 3]] * 4,
        features_per_stage=[8, 16, 32, 32], n_conv_per_stage_encoder=[1, 2, 2, 3],
        n_conv_per_stage_decoder=[1, 2, 1],
    )


def nnunet_network(plan: Plan, num_classes: int, deep_supervision: bool = False) -> PlainConvUNet:
    conv, norm = (torch.nn.Conv3d, torch.nn.InstanceNorm3d) if plan.dim == 3 else (torch.nn.Conv2d, torch.nn.InstanceNorm2d)
    torch.manual_seed(0)
    net = PlainConvUNet(
        plan.num_input_channels, plan.num_stages, plan.features_per_stage, conv, plan.kernel_sizes, plan.strides,
        plan.n_conv_per_stage_encoder, num_classes, plan.n_conv_per_stage_decoder, conv_bias=True, norm_op=norm,
        norm_op_kwargs={"eps": 1e-5, "affine": True}, nonlin=torch.nn.LeakyReLU, nonlin_kwargs={"inplace": True},
        deep_supervision=deep_supervision,
    )
    net.apply(net.initialize)
    # Non-trivial norm parameters, so that a swapped norm/conv mapping would show.
    with torch.no_grad():
        for name, parameter in net.named_parameters():
            if ".norm." in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return net.eval()


@pytest.mark.parametrize("dim", [3, 2])
def test_same_output_as_plainconvunet_with_same_weights(dim):
    plan = small_plan(dim)
    reference = nnunet_network(plan, num_classes=3)
    ours = build_network(plan, num_classes=3).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)  # nnU-Net keys, aliases included
    torch.manual_seed(1)
    x = torch.randn(2, 1, *plan.patch_size)
    with torch.no_grad():
        expected = reference(x)
        got = ours(x)
    assert got.shape == (2, 3, *plan.patch_size)
    assert torch.max(torch.abs(got - expected)) < 1e-5


def test_state_dict_is_nnunet_minus_aliases():
    plan = small_plan(3)
    reference_keys = set(nnunet_network(plan, 4).state_dict())
    ours = set(UNet(plan, 4).state_dict())
    assert ours < reference_keys
    dropped = reference_keys - ours
    assert dropped and all(k.startswith("decoder.encoder.") or ".all_modules." in k for k in dropped)
    assert "encoder.stages.0.0.convs.0.conv.weight" in ours
    assert "decoder.seg_layers.2.weight" in ours


def test_deep_supervision_outputs_match():
    plan = small_plan(3)
    reference = nnunet_network(plan, num_classes=2, deep_supervision=True)
    ours = UNet(plan, num_classes=2, deep_supervision=True).eval()
    ours.load_state_dict(reference.state_dict())
    x = torch.randn(1, 1, *plan.patch_size)
    with torch.no_grad():
        expected, got = reference(x), ours(x)
    assert len(got) == len(expected) == plan.num_stages - 1
    for a, b in zip(got, expected):
        assert a.shape == b.shape
        assert torch.max(torch.abs(a - b)) < 1e-5
    assert got[0].shape[2:] == plan.patch_size  # highest resolution first


def test_inconsistent_alias_is_refused():
    plan = small_plan(3)
    state = nnunet_network(plan, 2).state_dict()
    key = "decoder.encoder.stages.1.0.convs.0.all_modules.0.weight"
    state[key] = state[key].clone() + 1.0
    with pytest.raises(ModelError, match="differ"):
        canonical_state_dict(state)
    with pytest.raises(RuntimeError, match="differ"):
        UNet(plan, 2).load_state_dict(state)


def test_feature_map_estimate_matches_dynamic_network_architectures():
    plan = plan_from_spacing((2.5, 0.78, 0.78), (200, 512, 512), num_classes=5)
    reference = PlainConvUNet(
        1, plan.num_stages, plan.features_per_stage, torch.nn.Conv3d, plan.kernel_sizes, plan.strides,
        plan.n_conv_per_stage_encoder, 5, plan.n_conv_per_stage_decoder, conv_bias=True,
    )
    for patch in [plan.patch_size, (64, 160, 160), (33, 95, 97)]:
        ours = estimate_feature_map_size(patch, plan.strides, plan.features_per_stage, plan.n_conv_per_stage_encoder,
                                         plan.n_conv_per_stage_decoder, 5)
        assert ours == int(reference.compute_conv_feature_map_size(patch))


def test_trace_and_onnx_export_match_eager():
    plan = small_plan(3)
    net = UNet(plan, num_classes=3).eval()
    net.load_state_dict(nnunet_network(plan, 3).state_dict())
    x = torch.randn(1, 1, *plan.patch_size)
    with torch.no_grad():
        eager = net(x)
        traced = torch.jit.trace(net, x, check_trace=False)  # compared below instead
        assert torch.max(torch.abs(traced(x) - eager)) < 1e-5
    buffer = io.BytesIO()
    torch.onnx.export(net, (x,), buffer, dynamo=False, opset_version=17, input_names=["image"],
                      output_names=["logits"], dynamic_axes={"image": {0: "batch"}, "logits": {0: "batch"}})
    session = onnxruntime.InferenceSession(buffer.getvalue(), providers=["CPUExecutionProvider"])
    x2 = torch.randn(2, 1, *plan.patch_size)
    (onnx_out,) = session.run(None, {"image": x2.numpy()})
    with torch.no_grad():
        expected = net(x2).numpy()
    assert np.max(np.abs(onnx_out - expected)) < 1e-4


def test_network_needs_two_stages():
    plan = Plan(name="flat", dim=2, target_spacing_transposed=(1, 1, 1), patch_size=(8, 8), strides=[[1, 1]],
                kernel_sizes=[[3, 3]], features_per_stage=[4], n_conv_per_stage_encoder=[1], n_conv_per_stage_decoder=[])
    with pytest.raises(ModelError, match="at least 2"):
        UNet(plan, 2)


def nnunet_resenc_network(plan: Plan, num_classes: int) -> torch.nn.Module:
    from dynamic_network_architectures.architectures.unet import ResidualEncoderUNet

    conv, norm = (torch.nn.Conv3d, torch.nn.InstanceNorm3d) if plan.dim == 3 else (torch.nn.Conv2d, torch.nn.InstanceNorm2d)
    torch.manual_seed(2)
    net = ResidualEncoderUNet(
        plan.num_input_channels, plan.num_stages, plan.features_per_stage, conv, plan.kernel_sizes, plan.strides,
        plan.n_conv_per_stage_encoder, num_classes, plan.n_conv_per_stage_decoder, conv_bias=True, norm_op=norm,
        norm_op_kwargs={"eps": 1e-5, "affine": True}, nonlin=torch.nn.LeakyReLU, nonlin_kwargs={"inplace": True},
    )
    net.apply(net.initialize)
    with torch.no_grad():  # ResEnc zero-inits the last norm of each block; make every path count
        for name, parameter in net.named_parameters():
            if ".norm." in name:
                parameter.copy_(torch.randn_like(parameter) * 0.2 + (1.0 if name.endswith("weight") else 0.0))
    return net.eval()


@pytest.mark.parametrize("dim", [3, 2])
def test_residual_encoder_matches_nnunet_resenc(dim):
    plan = small_plan(dim)
    plan.architecture = "ResidualEncoderUNet"
    plan.n_conv_per_stage_encoder = [1, 3, 2, 2]  # residual blocks per stage, as the ResEnc presets
    plan.n_conv_per_stage_decoder = [1] * (plan.num_stages - 1)
    reference = nnunet_resenc_network(plan, num_classes=3)
    ours = build_network(plan, 3).eval()
    ours.load_state_dict(reference.state_dict(), strict=True)
    assert any(".skip.1.conv.weight" in k for k in ours.state_dict())  # strided + projected skip
    x = torch.randn(2, 1, *plan.patch_size)
    with torch.no_grad():
        assert torch.max(torch.abs(ours(x) - reference(x))) < 1e-5
