"""Plan a U-Net for a series (nnU-Net v2's rules), and say which configuration of a model it would use.

``medseg plan`` asks here: the series' spacing and shape (read from the image, or given), the
plans for a memory budget, the configuration those rules select, and — with a model — the
configuration the model's package chooses, why, its post-processing, and the CPU engine a run
with ``--device auto`` would use.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any

from medseg.errors import MedsegError

NNUNET_REFERENCE_GB = 8.0  # nnU-Net's reference activation counts correspond to an 8 GB GPU


@dataclass(frozen=True)
class PlanRequest:
    path: str | os.PathLike | None = None  # an image or a series (else spacing and shape)
    spacing_zyx: tuple[float, float, float] | None = None
    shape_zyx: tuple[int, int, int] | None = None
    memory_gb: float = NNUNET_REFERENCE_GB  # the budget the patch is sized for
    model: str | None = None  # also: the configuration this model would select for the series


@dataclass
class PlanResult:
    spacing_zyx: tuple
    shape_zyx: tuple
    configurations: dict[str, Any]  # name -> medseg.model.plan.Plan
    selected: Any  # the plan nnU-Net's rules select for this spacing
    model_choice: dict[str, Any] | None = None  # with a model: its choice, the candidates, why, the CPU engine
    package: Any = None  # the model's package (its configurations print themselves)
    notes: list[str] = field(default_factory=list)


def plan_series(request: PlanRequest) -> PlanResult:
    from medseg.model.configuration_choice import select_configuration
    from medseg.model.planner import REFERENCE_VAL_3D, plan_from_fingerprint

    if request.path is None and (request.spacing_zyx is None or request.shape_zyx is None):
        raise MedsegError("give a PATH to an image/series, or both --spacing Z Y X and --shape Z Y X")
    if request.memory_gb <= 0:
        raise MedsegError("--gpu-memory-gb must be positive")
    if request.path is not None:
        from medseg.workflows.studies import OpenStudyRequest, open_study

        volume = open_study(OpenStudyRequest(request.path)).volume
        spacing, shape = tuple(volume.spacing_zyx), tuple(volume.shape_zyx)
    else:
        spacing, shape = tuple(request.spacing_zyx or ()), tuple(request.shape_zyx or ())  # both given: checked above
    reference = REFERENCE_VAL_3D * request.memory_gb / NNUNET_REFERENCE_GB
    configurations = plan_from_fingerprint([spacing], [shape], reference)
    selected = select_configuration(configurations, spacing)
    if not request.model:
        return PlanResult(spacing, shape, configurations, selected)
    from medseg.workflows.models import open_model

    package = open_model(request.model).package
    choice = package.choose(spacing, shape)
    model_choice = {
        "model": package.name, "configuration": choice.chosen.name, "reason": choice.reason,
        "candidates": [{"configuration": name, "suits_series": suits, "target_spacing_zyx":
                        list(package.configurations[name].target_spacing_image_zyx), "log_distance": round(gap, 4)}
                       for name, suits, gap in choice.candidates],
        "plan": choice.chosen.to_dict(),
        "postprocessing": [step.describe(package.names) for step in package.postprocess_steps()],
        "cpu_engine": _cpu_engine(package, choice.chosen.name),
        "precision": _precision_line(package, choice.chosen.name),  # a faster tier verified here, or none
    }
    return PlanResult(spacing, shape, configurations, selected, model_choice, package)


def _precision_line(package: Any, configuration: str) -> str:
    from medseg.model.precision_tier import plan_line

    return plan_line(package, configuration)


def _cpu_engine(package: Any, configuration: str) -> dict:
    """The CPU engine a run with --device auto would use (medseg.model.cpu_runtime), and why."""
    from medseg import threads
    from medseg.model.cpu_runtime import planned_choice

    return planned_choice(package, configuration, threads.budget()).to_dict()


__all__ = ["NNUNET_REFERENCE_GB", "PlanRequest", "PlanResult", "plan_series"]
