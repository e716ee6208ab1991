"""The U-Net, built at run time from a :class:`~medseg.model.plan.Plan`.

Per stage: n x (conv -> InstanceNorm(affine, eps 1e-5) -> LeakyReLU(0.01)); the first conv
of a stage carries the stride (no pooling layers); the decoder upsamples with a
transposed conv whose kernel equals the stride, concatenates the skip (upsampled first,
skip second) and applies its own conv stack; 1x1 heads give the logits, one per decoder
stage so deep supervision can be switched on for training.

The module tree mirrors nnU-Net v2's PlainConvUNet and ResidualEncoderUNet (BasicBlockD
blocks; dynamic_network_architectures), so its parameter names are nnU-Net's names
minus two kinds of alias that nnU-Net's tree
registers twice: ``...all_modules.{0,1}`` (the same conv and norm again) and
``decoder.encoder.*`` (the whole encoder again). :func:`canonical_state_dict` drops
those aliases after checking that they really hold the same values, and ``UNet`` does
that itself on ``load_state_dict``, so a checkpoint's ``network_weights`` loads strictly.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import torch
from torch import nn

from medseg.errors import ModelError
from medseg.model.plan import Plan

INSTANCE_NORM_EPS = 1e-5
LEAKY_RELU_SLOPE = 0.01
_WRAPPER_PREFIXES = ("module.", "_orig_mod.")  # DistributedDataParallel, torch.compile


def _conv_class(dim: int) -> type[nn.Module]:
    return nn.Conv3d if dim == 3 else nn.Conv2d


class ConvNormAct(nn.Module):
    """conv -> InstanceNorm(affine) -> LeakyReLU, with "same" padding for odd kernels.

    ``activation=False`` leaves out the LeakyReLU (second conv and projection of a
    residual block); ``bias=False`` is the residual projection's bias-free conv.
    """

    def __init__(self, dim: int, in_channels: int, out_channels: int, kernel: list[int], stride: list[int],
                 activation: bool = True, bias: bool = True):
        super().__init__()
        conv = _conv_class(dim)
        norm = nn.InstanceNorm3d if dim == 3 else nn.InstanceNorm2d
        self.conv = conv(in_channels, out_channels, kernel, stride, padding=[(k - 1) // 2 for k in kernel], bias=bias)
        self.norm = norm(out_channels, eps=INSTANCE_NORM_EPS, affine=True)
        self.nonlin = nn.LeakyReLU(LEAKY_RELU_SLOPE, inplace=True) if activation else nn.Identity()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nonlin(self.norm(self.conv(x)))


class ConvStack(nn.Module):
    """n ConvNormAct blocks; only the first one strides."""

    def __init__(self, dim: int, n_convs: int, in_channels: int, out_channels: int, kernel: list[int], stride: list[int]):
        super().__init__()
        blocks = [ConvNormAct(dim, in_channels, out_channels, kernel, stride)]
        blocks += [ConvNormAct(dim, out_channels, out_channels, kernel, [1] * dim) for _ in range(n_convs - 1)]
        self.convs = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.convs(x)


class Encoder(nn.Module):
    def __init__(self, plan: Plan):
        super().__init__()
        stages = []
        in_channels = plan.num_input_channels
        for s in range(plan.num_stages):
            stack = ConvStack(
                plan.dim, plan.n_conv_per_stage_encoder[s], in_channels, plan.features_per_stage[s],
                plan.kernel_sizes[s], plan.strides[s],
            )
            # The one-element Sequential reproduces nnU-Net's "stages.{s}.0." key level.
            stages.append(nn.Sequential(stack))
            in_channels = plan.features_per_stage[s]
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        skips = []
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        return skips


class ResidualBlock(nn.Module):
    """ResNet-D basic block as nnU-Net's ResEnc: conv-norm-act, conv-norm, + skip, act.

    The skip average-pools when the block strides and projects with a bias-free 1x1 conv
    + norm when the channel count changes.
    """

    def __init__(self, dim: int, in_channels: int, out_channels: int, kernel: list[int], stride: list[int]):
        super().__init__()
        self.conv1 = ConvNormAct(dim, in_channels, out_channels, kernel, stride)
        self.conv2 = ConvNormAct(dim, out_channels, out_channels, kernel, [1] * dim, activation=False)
        strided = any(s != 1 for s in stride)
        skip_ops: list[nn.Module] = []
        if strided:
            pool = nn.AvgPool3d if dim == 3 else nn.AvgPool2d
            skip_ops.append(pool(stride, stride))
        if in_channels != out_channels:
            skip_ops.append(ConvNormAct(dim, in_channels, out_channels, [1] * dim, [1] * dim,
                                        activation=False, bias=False))
        self.skip = nn.Sequential(*skip_ops) if skip_ops else nn.Identity()
        self.nonlin2 = nn.LeakyReLU(LEAKY_RELU_SLOPE, inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        residual = self.skip(x)
        return self.nonlin2(self.conv2(self.conv1(x)) + residual)


class ResidualStage(nn.Module):
    def __init__(self, dim: int, n_blocks: int, in_channels: int, out_channels: int, kernel: list[int],
                 stride: list[int]):
        super().__init__()
        blocks = [ResidualBlock(dim, in_channels, out_channels, kernel, stride)]
        blocks += [ResidualBlock(dim, out_channels, out_channels, kernel, [1] * dim) for _ in range(n_blocks - 1)]
        self.blocks = nn.Sequential(*blocks)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.blocks(x)


class ResidualEncoder(nn.Module):
    """nnU-Net's ResidualEncoder: a one-conv stem, then residual stages (first block strides)."""

    def __init__(self, plan: Plan):
        super().__init__()
        features = plan.features_per_stage
        self.stem = ConvStack(plan.dim, 1, plan.num_input_channels, features[0], plan.kernel_sizes[0], [1] * plan.dim)
        stages = []
        in_channels = features[0]
        for s in range(plan.num_stages):
            stages.append(ResidualStage(plan.dim, plan.n_conv_per_stage_encoder[s], in_channels, features[s],
                                        plan.kernel_sizes[s], plan.strides[s]))
            in_channels = features[s]
        self.stages = nn.ModuleList(stages)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        x = self.stem(x)
        skips = []
        for stage in self.stages:
            x = stage(x)
            skips.append(x)
        return skips


class Decoder(nn.Module):
    def __init__(self, plan: Plan, num_classes: int, deep_supervision: bool):
        super().__init__()
        self.deep_supervision = deep_supervision
        transposed = nn.ConvTranspose3d if plan.dim == 3 else nn.ConvTranspose2d
        conv = _conv_class(plan.dim)
        features = plan.features_per_stage
        n = plan.num_stages
        stages, transpconvs, seg_layers = [], [], []
        for d in range(n - 1):  # d = 0 is the deepest decoder stage
            below, skip = n - 1 - d, n - 2 - d
            stride = plan.strides[below]
            transpconvs.append(transposed(features[below], features[skip], stride, stride, bias=True))
            stages.append(
                ConvStack(plan.dim, plan.n_conv_per_stage_decoder[d], 2 * features[skip], features[skip],
                          plan.kernel_sizes[skip], [1] * plan.dim)
            )
            # Every decoder stage gets a head, so weights trained with deep supervision load.
            seg_layers.append(conv(features[skip], num_classes, 1, 1, 0, bias=True))
        self.stages = nn.ModuleList(stages)
        self.transpconvs = nn.ModuleList(transpconvs)
        self.seg_layers = nn.ModuleList(seg_layers)

    def forward(self, skips: list[torch.Tensor]) -> list[torch.Tensor]:
        x = skips[-1]
        outputs: list[torch.Tensor] = []
        last = len(self.stages) - 1
        for d, (up, stack, head) in enumerate(zip(self.transpconvs, self.stages, self.seg_layers)):
            x = torch.cat((up(x), skips[-(d + 2)]), dim=1)
            x = stack(x)
            if self.deep_supervision or d == last:
                outputs.append(head(x))
        return outputs[::-1]  # highest resolution first


class UNet(nn.Module):
    """U-Net for a Plan; input (B, C, *patch), output logits (B, num_classes, *patch).

    The encoder is plain (nnU-Net's PlainConvUNet) or residual (its ResidualEncoderUNet)
    as ``plan.architecture`` says; the decoder is the same for both.
    """

    def __init__(self, plan: Plan, num_classes: int, deep_supervision: bool = False):
        super().__init__()
        if num_classes < 1:
            raise ModelError(f"a network needs at least one output class, not {num_classes}")
        if plan.num_stages < 2:
            raise ModelError(f"plan {plan.name!r} has {plan.num_stages} stage(s); a U-Net needs at least 2")
        self.plan = plan
        self.num_classes = num_classes
        self.encoder = ResidualEncoder(plan) if plan.architecture == "ResidualEncoderUNet" else Encoder(plan)
        self.decoder = Decoder(plan, num_classes, deep_supervision)
        self.register_load_state_dict_pre_hook(_drop_nnunet_aliases)

    @property
    def deep_supervision(self) -> bool:
        return self.decoder.deep_supervision

    @deep_supervision.setter
    def deep_supervision(self, value: bool) -> None:
        self.decoder.deep_supervision = bool(value)

    def forward(self, x: torch.Tensor):  # -> Tensor, or list[Tensor] with deep supervision
        outputs = self.decoder(self.encoder(x))
        return outputs if self.decoder.deep_supervision else outputs[0]


def build_network(plan: Plan, num_classes: int, deep_supervision: bool = False) -> UNet:
    """The U-Net for a plan (weights freshly initialised by torch's defaults)."""
    return UNet(plan, num_classes, deep_supervision)


def canonical_state_dict(state_dict: Mapping[str, torch.Tensor], source: str = "state dict") -> OrderedDict:
    """nnU-Net PlainConvUNet weights -> medseg UNet keys.

    Strips ``module.``/``_orig_mod.`` wrappers and drops the ``all_modules`` and
    ``decoder.encoder`` aliases, after checking that each alias equals the tensor it
    aliases (a file where they differ is corrupt or was edited, and is refused).
    """
    cleaned: OrderedDict[str, torch.Tensor] = OrderedDict()
    for key, value in state_dict.items():
        for prefix in _WRAPPER_PREFIXES:
            if key.startswith(prefix):
                key = key[len(prefix):]
        cleaned[key] = value
    canonical: OrderedDict[str, torch.Tensor] = OrderedDict()
    aliases: dict[str, str] = {}
    for key in cleaned:
        target = _alias_target(key)
        if target is None:
            canonical[key] = cleaned[key]
        else:
            aliases[key] = target
    for alias, target in aliases.items():
        if target not in cleaned:
            # The alias is the only copy (unusual but harmless): keep its value under the real name.
            canonical[target] = cleaned[alias]
        elif not _same_tensor(cleaned[alias], cleaned[target]):
            raise ModelError(f"{source}: weights {alias!r} and {target!r} should be the same tensor but differ")
    return canonical


def _alias_target(key: str) -> str | None:
    """The canonical name a key aliases, or None when the key is canonical itself."""
    target = key
    if target.startswith("decoder.encoder."):
        target = target[len("decoder."):]
    target = target.replace(".all_modules.0.", ".conv.").replace(".all_modules.1.", ".norm.")
    return None if target == key else target


def _same_tensor(a: torch.Tensor, b: torch.Tensor) -> bool:
    if a.shape != b.shape:
        return False
    if a.data_ptr() == b.data_ptr() and a.stride() == b.stride():
        return True
    return bool(torch.equal(a, b))


def _drop_nnunet_aliases(module, state_dict, prefix, local_metadata, strict, missing, unexpected, errors) -> None:
    """load_state_dict pre-hook: accept nnU-Net's aliased keys (state_dict is a private copy)."""
    relevant = {k[len(prefix):]: v for k, v in state_dict.items() if k.startswith(prefix)}
    if not any(_alias_target(k) is not None or k.startswith(_WRAPPER_PREFIXES) for k in relevant):
        return
    try:
        canonical = canonical_state_dict(relevant)
    except ModelError as error:
        errors.append(str(error))
        return
    for key in relevant:
        del state_dict[prefix + key]
    for key, value in canonical.items():
        state_dict[prefix + key] = value
