"""Evaluate a model on labelled cases: each case segmented as ``medseg segment`` would, then scored.

``medseg evaluate`` and the Train & Export tab's comparison call :func:`evaluate`. Every case goes
through :class:`medseg.workflows.segment.Segmenter` (the same checks, the one device choice);
:mod:`medseg.model.evaluate` scores it (Dice, volumes). Labels are matched by name: a label the
model has and the dataset does not is not scored, and the reverse is refused (a model cannot be
judged on a label it never makes).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.errors import DatasetError
from medseg.progress import CancelToken, ProgressCallback, report
from medseg.workflows.models import ModelCard, OpenedModel
from medseg.workflows.segment import Segmenter, SegmentSettings


@dataclass(frozen=True)
class EvaluateRequest:
    model: OpenedModel | str | os.PathLike | None  # None: the built-in starter
    dataset: Any  # a medseg.model.datasets.Dataset, or what open_dataset opens (folder, manifest)
    data_root: str | os.PathLike | None = None  # for relative paths in a manifest
    held_out: bool = False  # only the dataset's validation cases
    specs: Sequence[Any] | None = None  # exactly these cases (default: by ``held_out``)
    settings: SegmentSettings = field(default_factory=SegmentSettings)
    keep_predictions: bool = False  # keep each case's label map (the model's values), e.g. to show it


@dataclass
class Evaluation:
    model: ModelCard
    dataset: str
    cases: list[Any]  # medseg.model.evaluate.CaseScore, one per case
    mean_dice: dict[str, float]
    predictions: dict[str, Volume] = field(default_factory=dict)  # case name -> label map, when kept
    opened: OpenedModel | None = None  # the model as opened (record_evaluation keeps the scores with it)


def evaluate(request: EvaluateRequest, progress: ProgressCallback | None = None,
             cancel: CancelToken | None = None) -> Evaluation:
    from medseg.model.datasets import Dataset, open_dataset
    from medseg.model.evaluate import mean_dice, score_case

    segmenter = Segmenter(request.model, request.settings)  # the device first: an absent one fails at once
    package = segmenter.model.package
    dataset = request.dataset if isinstance(request.dataset, Dataset) else open_dataset(request.dataset,
                                                                                          request.data_root)
    model_index = {name: value for value, name in package.names.items() if value != 0}
    dataset_names = {value: name for value, name in dataset.labels.items() if value != 0}
    missing = sorted(set(dataset_names.values()) - set(model_index))
    if missing:
        raise DatasetError(f"the model does not segment {missing} (it knows {sorted(model_index)})")
    if request.specs is not None:
        specs = list(request.specs)
    else:
        specs = list(dataset.validation_specs if request.held_out else dataset.specs)
    scored = {model_index[name]: package.labels[model_index[name]] for name in dataset_names.values()}
    cases, predictions = [], {}
    for number, spec in enumerate(specs):
        if cancel is not None:
            cancel.raise_if_cancelled()
        report(progress, number / max(len(specs), 1), f"case {number + 1} of {len(specs)}: {spec.name}", "evaluate")
        case = dataset.load(spec)
        result = segmenter.segment(case.image, cancel=cancel)
        if request.keep_predictions:
            predictions[spec.name] = result.label_map
        reference = np.zeros(case.label_map.shape_zyx, dtype=np.uint16)
        for value, name in dataset_names.items():
            reference[case.label_map.array == value] = model_index[name]
        score = score_case(result.label_map, case.label_map.with_array(reference), scored, spec.name)
        score.configuration = result.configuration
        cases.append(score)
    report(progress, 1.0, "evaluated", "evaluate")
    return Evaluation(segmenter.card, dataset.name, cases, mean_dice(cases), predictions, segmenter.model)


def record_evaluation(model: OpenedModel, evaluation: Evaluation, *, held_out: bool, configuration: str | None,
                      command: str) -> None:
    """Keep the scores with the model (``provenance["evaluations"]``, one entry per dataset and scope), for its
    card; the package folder is rewritten whole (an atomic folder replace)."""
    import math

    from medseg.errors import MedsegError
    from medseg.model.package import save_package
    package = model.package
    if not model.capabilities.rewritable:
        raise MedsegError("recording the scores needs a medseg model package folder (a .zip package or an nnU-Net "
                          "folder is not rewritten)", path=package.source_path,
                          hint="unzip it or export it as a package folder, or run without --record")

    def rounded(value: float, digits: int) -> float | None:
        return None if math.isnan(value) else round(value, digits)

    entry = {
        "dataset": evaluation.dataset, "held_out_only": bool(held_out), "configuration": configuration,
        "command": command,
        "mean_dice": {k: rounded(v, 4) for k, v in evaluation.mean_dice.items()},
        "configuration_per_case": {case.case: case.configuration for case in evaluation.cases},
        "cases": {case.case: {label.name: {"dice": rounded(label.dice, 4),
                                           "reference_ml": round(label.reference_ml, 1),
                                           "predicted_ml": round(label.predicted_ml, 1)}
                              for label in case.labels}
                  for case in evaluation.cases},
    }
    evaluations = [e for e in package.provenance.get("evaluations", [])
                   if (e.get("dataset"), e.get("held_out_only"), e.get("configuration"))
                   != (entry["dataset"], entry["held_out_only"], entry["configuration"])]
    package.provenance["evaluations"] = [*evaluations, entry]
    save_package(package, package.source_path)


__all__ = ["EvaluateRequest", "Evaluation", "evaluate", "record_evaluation"]
