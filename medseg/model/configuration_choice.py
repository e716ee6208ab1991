"""Which of a model's configurations (plans) suits a series, and why.

A thick-slice series prefers configurations made for anisotropic data, a near-isotropic one
isotropic 3D configurations, a series of very few slices a 2D configuration; among those the
nearest target spacing wins. The reason is kept for the user (``ConfigurationChoice.reason``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

from medseg.errors import ModelError
from medseg.model.plan import ANISOTROPY_THRESHOLD, Plan, is_anisotropic

MIN_SLICES_3D = 3  # a series with fewer slices gets a model's 2D configuration when it has one


@dataclass(frozen=True)
class ConfigurationChoice:
    """Which configuration a series gets and why: each candidate's target against the series."""

    chosen: Plan
    series_spacing_zyx: tuple[float, float, float]
    series_anisotropic: bool
    candidates: tuple[tuple[str, bool, float], ...]  # (name, suits the series' kind, log-distance of targets)
    few_slices: bool = False  # fewer than MIN_SLICES_3D slices: 2D configurations preferred

    @property
    def reason(self) -> str:
        if self.few_slices and self.chosen.dim == 2 and len(self.candidates) > 1:
            return (f"the series has fewer than {MIN_SLICES_3D} slices: no 3D context for a 3D configuration, "
                    f"so the 2D configuration {self.chosen.name}")
        kind = "thick-slice" if self.series_anisotropic else "near-isotropic"
        ratio = max(self.series_spacing_zyx) / min(self.series_spacing_zyx)
        series = " × ".join(f"{s:.3g}" for s in self.series_spacing_zyx)
        if len(self.candidates) == 1:
            return f"the model's only configuration (series {series} mm)"
        suited = [name for name, suits, _ in self.candidates if suits]
        text = (f"series {series} mm is {kind} (coarsest/finest axis {ratio:.1f}, threshold "
                f"{ANISOTROPY_THRESHOLD:g}); ")
        if suited:
            text += f"configurations made for {kind} data: {', '.join(suited)}; "
        else:
            text += f"no configuration is made for {kind} data, so all compete; "
        return text + f"nearest target spacing: {self.chosen.name}"


def choose_configuration(configs: dict[str, Plan], spacing_zyx: Sequence[float],
                         shape_zyx: Sequence[int] | None = None) -> ConfigurationChoice:
    """Pick the configuration that suits a series of this spacing (and shape), with the reasons.

    A series of fewer than three slices (``shape_zyx``) gets a 2D configuration when the model
    has one: a 3D network would see mostly padding. Otherwise a thick-slice series (coarsest
    axis > 3x the finest) prefers configurations made for anisotropic data (2D, or 3D with an
    anisotropic target spacing or a first stage that does not convolve along one axis, as the
    planner makes for slices over twice the pixel size), a near-isotropic one prefers isotropic
    3D configurations; among those, the one whose target spacing is nearest in log scale wins,
    and 3D wins a tie.
    """
    if not configs:
        raise ModelError("the model has no configurations to choose from")
    if len(spacing_zyx) != 3 or any(not s > 0 for s in spacing_zyx):
        raise ModelError(f"cannot choose a configuration for spacing {tuple(spacing_zyx)}")
    series_aniso = is_anisotropic(spacing_zyx)

    def suits_anisotropic(plan: Plan) -> bool:
        # e.g. 5 x 2 x 2 mm is under the threshold of 3, yet its plan keeps z flat (kernel 1)
        # until in-plane catches up: it was made for thick slices
        flat_axis = plan.dim == 3 and 1 in plan.kernel_sizes[0]
        return plan.dim == 2 or flat_axis or is_anisotropic(plan.target_spacing_transposed, plan.anisotropy_threshold)

    def distance(plan: Plan) -> tuple[float, int, str]:
        # The full target (also for 2D, whose axis 0 is the 3D target) so that a 2D and a
        # 3D plan of the same spacing tie and the 3D one wins. Targets are stored in the
        # plan's transposed axis order.
        target = plan.target_spacing_transposed
        series = [spacing_zyx[axis] for axis in plan.transpose_forward]
        log_gap = sum(abs(math.log(s / t)) for s, t in zip(series, target))
        return (round(log_gap, 9), 0 if plan.dim == 3 else 1, plan.name)

    few_slices = shape_zyx is not None and min(shape_zyx) < MIN_SLICES_3D
    if few_slices and any(plan.dim == 2 for plan in configs.values()):
        suits = {name: plan.dim == 2 for name, plan in configs.items()}
    else:
        suits = {name: suits_anisotropic(plan) == series_aniso for name, plan in configs.items()}
    candidates = [p for name, p in configs.items() if suits[name]] or list(configs.values())
    chosen = min(candidates, key=distance)
    rows = tuple((name, suits[name], distance(plan)[0]) for name, plan in configs.items())
    return ConfigurationChoice(chosen, tuple(float(s) for s in spacing_zyx), series_aniso, rows,  # type: ignore[arg-type]
                               few_slices)


def select_configuration(configs: dict[str, Plan], spacing_zyx: Sequence[float],
                         shape_zyx: Sequence[int] | None = None) -> Plan:
    """The configuration :func:`choose_configuration` picks for a series of this spacing (and shape)."""
    return choose_configuration(configs, spacing_zyx, shape_zyx).chosen
