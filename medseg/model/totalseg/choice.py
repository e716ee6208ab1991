"""Which of TotalSegmentator's three resolutions suits a series on this device, and why.

The network's resolution should follow the series': five 1.5 mm networks over a series whose
slices are 5 mm apart mostly segment interpolated voxels, and on a CPU they cost half an hour.
The rule: the 1.5 mm parts when the series' coarsest spacing is at most 2.25 mm (1.5 x their
spacing), else 3 mm; then, when the device's estimate for that choice exceeds the time budget,
the finest configuration that fits it (or the fastest). The estimate is tiles x convolution work
per tile / the device's measured convolution speed (a short calibration run, once per process).
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np
import torch

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model.plan import Plan
from medseg.model.tiling import compute_steps
from medseg.model.totalseg.convert import TotalSegModel
from medseg.model.totalseg.geometry import header_zooms, resampled_shape

FINE_SPACING_LIMIT_MM = 2.25
DEFAULT_BUDGET_S = {"cpu": 15 * 60.0}  # other devices: no budget (a GPU runs the 1.5 mm parts in minutes)


@dataclass
class ConfigurationChoice:
    name: str
    reason: str
    estimates_s: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        estimates = ", ".join(f"{name} ~{_duration(s)}" for name, s in self.estimates_s.items())
        return f"{self.name}: {self.reason}" + (f" (estimates: {estimates})" if estimates else "")


def choose_configuration(model: TotalSegModel, volume: Volume, device: str = "cpu", forced: str | None = None,
                         budget_s: float | None = None) -> ConfigurationChoice:
    """The configuration to run, with the reason and every configuration's estimate; ``forced`` (the user
    named one) is taken as it is, without measuring the device."""
    if forced is not None:
        if forced not in model.configurations:
            raise ModelError(f"{model.name} has no configuration {forced!r} installed",
                             hint=f"installed: {', '.join(model.configurations)}")
        return ConfigurationChoice(forced, "asked for")
    estimates = {name: estimate_seconds(model, name, volume, device) for name in model.configurations}
    by_spacing = sorted(model.configurations, key=lambda n: model.configurations[n].spacing_mm)
    coarsest = max(volume.spacing_mm)
    if coarsest <= FINE_SPACING_LIMIT_MM:
        preferred = by_spacing[0]
        reason = f"the series' voxels are at most {coarsest:.2g} mm"
    else:
        preferred = next((n for n in by_spacing if model.configurations[n].spacing_mm > FINE_SPACING_LIMIT_MM / 1.5),
                         by_spacing[-1])
        reason = f"the series' slices are {coarsest:.2g} mm apart, so finer networks would segment interpolated voxels"
    budget = budget_s if budget_s is not None else DEFAULT_BUDGET_S.get(device)
    if budget is not None and estimates[preferred] > budget:
        fitting = [n for n in by_spacing[by_spacing.index(preferred):] if estimates[n] <= budget]
        chosen = fitting[0] if fitting else by_spacing[-1]
        if chosen != preferred:
            return ConfigurationChoice(chosen, f"{preferred} would take ~{_duration(estimates[preferred])} on {device}, "
                                               f"over the budget of {_duration(budget)}", estimates)
    return ConfigurationChoice(preferred, reason, estimates)


def estimate_seconds(model: TotalSegModel, configuration: str, volume: Volume, device: str) -> float:
    config = model.configurations[configuration]
    work = 0.0
    for part in config.parts:
        plan = part.plan
        # without a resampling of its own the task's network sees nnU-Net's, to the plans' spacing
        spacing = config.resample or tuple(reversed(plan.target_spacing_image_zyx))
        shape = resampled_shape(volume.size_xyz, header_zooms(volume), spacing)
        padded = [max(n, p) for n, p in zip(shape[::-1], plan.patch_size)]
        tiles = math.prod(len(axis) for axis in compute_steps(padded, plan.patch_size, config.step))
        work += tiles * convolution_flops(plan, part.num_classes)
    return work / device_flops_per_second(device)


def convolution_flops(plan: Plan, num_classes: int) -> float:
    """Multiply-adds x 2 of one tile through a plain nnU-Net U-Net (convolutions and transposed ones)."""
    voxels = float(np.prod(plan.patch_size))
    features = list(plan.features_per_stage)
    flops, channels, scale = 0.0, 1, 1.0
    resolution = []
    for stage, (stride, kernel) in enumerate(zip(plan.strides, plan.kernel_sizes)):
        scale *= float(np.prod(stride))
        out_voxels = voxels / scale
        resolution.append(out_voxels)
        for conv in range(plan.n_conv_per_stage_encoder[stage]):
            flops += 2 * np.prod(kernel) * (channels if conv == 0 else features[stage]) * features[stage] * out_voxels
        channels = features[stage]
    for stage in range(len(features) - 2, -1, -1):
        out_voxels = resolution[stage]
        flops += 2 * np.prod(plan.strides[stage + 1]) * features[stage + 1] * features[stage] * out_voxels
        for conv in range(plan.n_conv_per_stage_decoder[stage]):
            flops += 2 * np.prod(plan.kernel_sizes[stage]) * (2 if conv == 0 else 1) * features[stage] ** 2 * out_voxels
    return flops + 2 * features[0] * num_classes * voxels


@lru_cache(maxsize=4)
def device_flops_per_second(device: str) -> float:
    """The device's speed at a 3D convolution like the networks' (measured once per process)."""
    target = torch.device(device if device in ("cuda", "mps") else "cpu")
    conv = torch.nn.Conv3d(32, 32, 3, padding=1).to(target).eval()
    tile = torch.zeros(1, 32, 48, 48, 48, device=target)
    with torch.inference_mode():
        conv(tile)  # the first call pays for the kernels' setup
        started = time.perf_counter()
        conv(tile)
        if target.type == "cuda":
            torch.cuda.synchronize()
        seconds = max(time.perf_counter() - started, 1e-6)
    return 2 * 27 * 32 * 32 * 48**3 / seconds


def _duration(seconds: float) -> str:
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
