"""Start a 3D configuration from a trained 2D one ("inflation", as I3D did for video networks).

A 2D model of the same labels and the same stages in-plane (features, kernels, in-plane
strides) already knows what body, lungs and bones look like slice by slice. Its kernels
become the centre slice of the 3D kernels, the other slices zero, so the 3D network starts
close to the 2D network applied to every slice (exactly so on a single slice when no stage
pools along z; over several slices instance normalisation sees them all, and a stage that
strides along z starts by reading every other slice). Transposed convolutions get the
2D kernel at every z position: upsampling along z starts as repetition. Training then
learns the through-plane part. A 3D plan with fewer stages than the 2D one (a 3D patch is
smaller in-plane) takes the 2D model's top stages: encoder stages by index, decoder stages
by the skip level they join (so the 3D bottleneck feeds the decoder that the 2D model's
deeper stages fed; that start is approximate, and training adapts it).

Why: on a 2-core CPU a 3D configuration trained from random weights for an hour never found
the lungs of an unseen chest, while a 2D one trained in 15 minutes did (the starter model
card, 'Starter v2'); started from the 2D weights, the 3D run only has to learn what the
slices above and below add.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Mapping

import torch

from medseg.errors import ModelError
from medseg.model.plan import Plan
from medseg.model.unet import UNet


def check_inflatable(plan_2d: Plan, plan_3d: Plan) -> None:
    """Raise ModelError unless ``plan_3d`` is ``plan_2d`` with a z axis added."""
    if plan_2d.dim != 2 or plan_3d.dim != 3:
        raise ModelError(f"inflation starts a 3D configuration from a 2D one; got {plan_2d.dim}D -> {plan_3d.dim}D")
    problems = []
    n = len(plan_3d.features_per_stage)
    if len(plan_2d.features_per_stage) < n:
        problems.append(f"the 2D configuration has {len(plan_2d.features_per_stage)} stages, the 3D one {n} "
                        f"(limit the 3D plan with --stages {len(plan_2d.features_per_stage)})")
    else:
        if list(plan_2d.features_per_stage[:n]) != list(plan_3d.features_per_stage):
            problems.append(f"features {list(plan_2d.features_per_stage[:n])} vs {list(plan_3d.features_per_stage)}")
        flat_strides = [list(s) for s in plan_2d.strides[:n]]
        in_plane_strides = [list(s[1:]) for s in plan_3d.strides]
        if flat_strides != in_plane_strides:
            problems.append(f"in-plane strides {flat_strides} vs {in_plane_strides}")
        flat_kernels = [list(k) for k in plan_2d.kernel_sizes[:n]]
        in_plane_kernels = [list(k[1:]) for k in plan_3d.kernel_sizes]
        if flat_kernels != in_plane_kernels:
            problems.append(f"in-plane kernels {flat_kernels} vs {in_plane_kernels}")
    if plan_2d.architecture != plan_3d.architecture:
        problems.append(f"architecture {plan_2d.architecture} vs {plan_3d.architecture}")
    if problems:
        raise ModelError(f"the 2D configuration '{plan_2d.name}' cannot start the 3D configuration "
                         f"'{plan_3d.name}': " + "; ".join(problems),
                         hint="plan the 3D configuration with the 2D one's --base-features, --max-features and "
                              "in-plane spacing")


def _source_key(key: str, depth_offset: int) -> str:
    """The 2D key for a 3D key: decoder parts shift by the extra 2D stages (same skip level)."""
    parts = key.split(".")
    if depth_offset and parts[0] == "decoder" and len(parts) > 2 and parts[2].isdigit():
        parts[2] = str(int(parts[2]) + depth_offset)
    return ".".join(parts)


def _count_stages(state: Mapping[str, torch.Tensor]) -> int:
    return 1 + max(int(k.split(".")[2]) for k in state if k.startswith("encoder.stages."))


def inflate_state(state_2d: Mapping[str, torch.Tensor], network_3d: UNet) -> OrderedDict[str, torch.Tensor]:
    """The 2D weights laid into ``network_3d``'s state (see the module docstring)."""
    target_state = network_3d.state_dict()
    depth_offset = _count_stages(state_2d) - _count_stages(target_state)
    transposed = {f"{name}.weight" for name, module in network_3d.named_modules()
                  if isinstance(module, torch.nn.ConvTranspose3d)}
    inflated: OrderedDict[str, torch.Tensor] = OrderedDict()
    for key, target in target_state.items():
        source = state_2d.get(_source_key(key, depth_offset))
        if source is None:
            raise ModelError(f"the 2D weights have no {key!r}: not the same network in-plane")
        if source.shape == target.shape:
            inflated[key] = source.detach().clone().to(target.dtype)
            continue
        fits = source.dim() + 1 == target.dim() and target.shape[:2] == source.shape[:2]
        if not fits or target.shape[3:] != source.shape[2:]:
            raise ModelError(f"{key}: 2D weights {tuple(source.shape)} do not fit the 3D {tuple(target.shape)}")
        weight = torch.zeros_like(target)
        if key in transposed:
            weight[:] = source.to(target.dtype)[:, :, None]  # every output slice: repetition along z
        else:
            weight[:, :, target.shape[2] // 2] = source.to(target.dtype)  # the centre slice of the kernel
        inflated[key] = weight
    return inflated
