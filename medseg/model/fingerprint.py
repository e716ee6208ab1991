"""A dataset's fingerprint and the plan that follows from it (beside the planner, medseg.model.planner).

The fingerprint is what nnU-Net measures before planning: every case's spacing and shape
and the intensity statistics of the labelled voxels. :func:`plan_for_dataset` turns it
into a :class:`~medseg.model.plan.Plan` with CT normalisation. The training run and the
GUI's dataset panel both call these two functions, so what the panel shows is what
training will use.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

import numpy as np

from medseg.errors import DatasetError, ModelError
from medseg.model.plan import Plan
from medseg.model.planner import REFERENCE_VAL_3D, plan_from_fingerprint, plan_from_spacing

CANONICAL_ORIENTATION = "LPS"  # every medseg-trained plan (see medseg.io.orientation)


@dataclass
class Fingerprint:
    """What the planner and the CT normalisation need from a training set (nnU-Net's fingerprint)."""

    spacings_zyx: list[tuple[float, float, float]]
    shapes_zyx: list[tuple[int, int, int]]
    foreground_intensity: dict[str, float]  # mean, std, median, min, max, percentile_00_5, percentile_99_5

    def to_dict(self) -> dict[str, Any]:
        return {"spacings_zyx": [list(s) for s in self.spacings_zyx], "shapes_zyx": [list(s) for s in self.shapes_zyx],
                "foreground_intensity": self.foreground_intensity}


FOREGROUND_SAMPLES_PER_CASE = 10_000  # nnU-Net's num_foreground_voxels_for_intensitystats


def fingerprint_cases(cases: Iterable[Any], seed: int = 1234) -> Fingerprint:
    """Spacings, shapes and foreground intensity statistics, sampled as nnU-Net does.

    ``cases``: medseg.model.datasets.Case objects (image and label map on one grid).
    """
    rng = np.random.default_rng(seed)
    spacings, shapes, samples = [], [], []
    for case in cases:
        spacings.append(tuple(float(s) for s in case.image.spacing_zyx))
        shapes.append(case.image.shape_zyx)
        foreground = case.image.array[case.label_map.array > 0]
        if foreground.size:
            samples.append(rng.choice(foreground, size=min(FOREGROUND_SAMPLES_PER_CASE, foreground.size), replace=True))
    return fingerprint_from_samples(spacings, shapes, samples)


def fingerprint_from_samples(
    spacings_zyx: Sequence[Sequence[float]], shapes_zyx: Sequence[Sequence[int]], samples: Sequence[np.ndarray],
) -> Fingerprint:
    """The fingerprint from per-case spacing, shape and foreground intensity samples."""
    if not shapes_zyx:
        raise DatasetError("the dataset has no cases")
    samples = [s for s in samples if len(s)]
    values = np.concatenate(samples).astype(np.float64) if samples else np.zeros(1)
    stats = {
        "mean": float(values.mean()), "std": float(values.std()), "median": float(np.median(values)),
        "min": float(values.min()), "max": float(values.max()),
        "percentile_00_5": float(np.percentile(values, 0.5)), "percentile_99_5": float(np.percentile(values, 99.5)),
    }
    return Fingerprint([tuple(float(v) for v in s) for s in spacings_zyx], [tuple(int(v) for v in s) for s in shapes_zyx],
                       stats)


def plan_for_dataset(
    fingerprint: Fingerprint,
    num_classes: int,
    *,
    configuration: str = "3d_fullres",
    target_spacing_zyx: Sequence[float] | None = None,
    memory_reference: float | None = None,
    max_features: int | None = None,
    base_features: int | None = None,
    num_stages: int | None = None,
    name: str | None = None,
) -> Plan:
    """The plan for a dataset: nnU-Net's planner on the fingerprint, with CT normalisation.

    ``target_spacing_zyx`` plans at a chosen (e.g. coarser) spacing instead of the median;
    ``memory_reference`` shrinks the patch (nnU-Net's 560e6 fits 8 GB of GPU);
    ``base_features`` (nnU-Net: 32) sets the first stage's channels, doubling per stage,
    ``max_features`` caps them, and ``num_stages`` drops the deepest stages: all three keep
    a CPU-trainable model small. ``name`` names the configuration (default: ``configuration``),
    so that several 3D configurations of one model, each trained on its own, can be told apart.
    """
    normalization = {"scheme": "CTNormalization", **{k: fingerprint.foreground_intensity[k] for k in
                                                     ("mean", "std", "percentile_00_5", "percentile_99_5")}}
    reference = memory_reference or REFERENCE_VAL_3D
    if target_spacing_zyx is None:
        plans = plan_from_fingerprint(fingerprint.spacings_zyx, fingerprint.shapes_zyx, reference,
                                      num_classes=num_classes, normalization=normalization, suppress_transpose=True)
        if configuration not in plans:
            raise ModelError(f"the planner made no '{configuration}' configuration for this dataset "
                             f"(made: {sorted(plans)})")
        plan = plans[configuration]
    else:
        target = [float(s) for s in target_spacing_zyx]
        shapes = [[max(1, round(sp / t * sh)) for sp, t, sh in zip(spacing, target, shape)]
                  for spacing, shape in zip(fingerprint.spacings_zyx, fingerprint.shapes_zyx)]
        median = [int(v) for v in np.median(np.asarray(shapes, dtype=float), axis=0)]
        dim = 2 if configuration == "2d" else 3
        plan = plan_from_spacing(target, median, reference, dim, num_classes=num_classes,
                                 num_training_cases=len(shapes), normalization=normalization,
                                 target_spacing_transposed=target, name=configuration)
    # medseg-trained networks see every image in one orientation (medseg.io.orientation).
    plan = dataclasses.replace(plan, orientation=CANONICAL_ORIENTATION)
    if num_stages is not None and num_stages < plan.num_stages:
        plan = _truncate_stages(plan, num_stages)
    if base_features is not None or max_features is not None:
        base = base_features or plan.features_per_stage[0]
        features = [base * 2**i for i in range(plan.num_stages)]
        cap = max_features or max(plan.features_per_stage)
        plan = dataclasses.replace(plan, features_per_stage=[min(f, cap) for f in features])
    if name:
        plan = dataclasses.replace(plan, name=name)
    return plan


def _truncate_stages(plan: Plan, num_stages: int) -> Plan:
    divisor = [1] * plan.dim
    for stride in plan.strides[:num_stages]:
        divisor = [d * s for d, s in zip(divisor, stride)]
    patch = [max(d, (p // d) * d) for p, d in zip(plan.patch_size, divisor)]
    return dataclasses.replace(
        plan, strides=plan.strides[:num_stages], kernel_sizes=plan.kernel_sizes[:num_stages],
        features_per_stage=plan.features_per_stage[:num_stages],
        n_conv_per_stage_encoder=plan.n_conv_per_stage_encoder[:num_stages],
        n_conv_per_stage_decoder=plan.n_conv_per_stage_decoder[: num_stages - 1], patch_size=tuple(patch),
    )
