"""Small model packages with random weights, planned by medseg's planner, for tests that need a
model of several configurations (2D, thin- and thick-slice 3D) without training one."""

from __future__ import annotations

import dataclasses

import torch

from medseg.model.package import ModelPackage
from medseg.model.package_model import combine_packages
from medseg.model.plan import Plan
from medseg.model.planner import plan_from_spacing
from medseg.model.unet import build_network

NORMALIZATION = {"scheme": "CTNormalization", "mean": 0.0, "std": 300.0, "percentile_00_5": -1000.0,
                 "percentile_99_5": 1200.0}
LABELS = {0: "background", 1: "body", 2: "lungs", 3: "bones"}


def tiny_plan(normalization: dict | None = None) -> Plan:
    """A 2D plan small enough to train a few steps in seconds on the CPU."""
    return Plan(
        name="2d", dim=2, target_spacing_transposed=(3.0, 6.0, 6.0), patch_size=(48, 48),
        strides=[[1, 1], [2, 2], [2, 2]], kernel_sizes=[[3, 3]] * 3, features_per_stage=[8, 16, 32],
        n_conv_per_stage_encoder=[2, 2, 2], n_conv_per_stage_decoder=[2, 2], batch_size=4,
        normalization=normalization or dict(NORMALIZATION),
    )


def one_configuration(name: str, target: tuple[float, float, float], seed: int, labels=LABELS) -> ModelPackage:
    """A package of one small 3D configuration planned by medseg's planner for ``target``."""
    plan = plan_from_spacing(target, (40, 96, 96), 2e7, 3, num_classes=len(labels), normalization=NORMALIZATION,
                             target_spacing_transposed=target, name=name)
    plan = dataclasses.replace(plan, features_per_stage=[4] * plan.num_stages)
    torch.manual_seed(seed)
    return ModelPackage(name=f"starter-{name}", configurations={name: plan}, labels=dict(labels),
                        weights={name: [build_network(plan, len(labels)).state_dict()]},
                        provenance={"training_command": f"medseg train ... --configuration-name {name}"})


def two_d_configuration(seed: int = 2) -> ModelPackage:
    plan = plan_from_spacing((3.0, 2.0, 2.0), (40, 96, 96), 2e7, 2, num_classes=len(LABELS),
                             normalization=NORMALIZATION, target_spacing_transposed=(3.0, 2.0, 2.0), name="2d")
    plan = dataclasses.replace(plan, features_per_stage=[4] * plan.num_stages)
    torch.manual_seed(seed)
    return ModelPackage(name="starter-2d", configurations={"2d": plan}, labels=dict(LABELS),
                        weights={"2d": [build_network(plan, len(LABELS)).state_dict()]},
                        provenance={"training_command": "medseg train ... --configuration-name 2d"})


def starter_like_package() -> ModelPackage:
    """Body, lungs, bones in three configurations as the starter has them: 2d, 3d_thin, 3d_thick."""
    return combine_packages([two_d_configuration(), one_configuration("3d_thin", (1.5, 1.5, 1.5), 0),
                             one_configuration("3d_thick", (5.0, 1.5, 1.5), 1)], name="starter-like")
