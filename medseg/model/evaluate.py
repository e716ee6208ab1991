"""Scores a segmentation against a reference: per-case, per-label Dice and volume difference."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

from medseg.errors import DatasetError, GeometryError
from medseg.core.volume import Volume
from medseg.progress import CancelToken, ProgressCallback, report


@dataclass(frozen=True)
class LabelScore:
    label: int
    name: str
    dice: float  # NaN when the label is absent from both prediction and reference
    reference_ml: float
    predicted_ml: float

    @property
    def volume_difference_ml(self) -> float:
        return self.predicted_ml - self.reference_ml

    @property
    def volume_difference_percent(self) -> float:
        if self.reference_ml == 0:
            return math.nan
        return 100.0 * self.volume_difference_ml / self.reference_ml

    def to_dict(self) -> dict[str, Any]:
        record = asdict(self)
        record["volume_difference_ml"] = self.volume_difference_ml
        record["volume_difference_percent"] = self.volume_difference_percent
        return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in record.items()}


@dataclass
class CaseScore:
    case: str
    labels: list[LabelScore] = field(default_factory=list)
    configuration: str = ""  # the model configuration that segmented the case (when a model did)

    def dice(self, name: str) -> float:
        for score in self.labels:
            if score.name == name:
                return score.dice
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        record: dict[str, Any] = {"case": self.case, "labels": [s.to_dict() for s in self.labels]}
        if self.configuration:
            record["configuration"] = self.configuration
        return record


def confusion_counts(prediction: np.ndarray, reference: np.ndarray, n_labels: int) -> np.ndarray:
    """(n_labels, n_labels) voxel counts [reference, prediction]; values ≥ n_labels count as background."""
    pred = np.where(prediction < n_labels, prediction, 0).astype(np.int64, copy=False)
    ref = np.where(reference < n_labels, reference, 0).astype(np.int64, copy=False)
    return np.bincount((ref * n_labels + pred).ravel(), minlength=n_labels * n_labels).reshape(n_labels, n_labels)


def dice_per_label(prediction: np.ndarray, reference: np.ndarray, labels: Iterable[int]) -> dict[int, float]:
    """Dice for each label value; NaN where the label is in neither map."""
    labels = list(labels)
    n_labels = max([*labels, 0]) + 1
    counts = confusion_counts(prediction, reference, n_labels)
    result = {}
    for label in labels:
        overlap = counts[label, label]
        total = counts[label, :].sum() + counts[:, label].sum()
        result[label] = math.nan if total == 0 else float(2.0 * overlap / total)
    return result


def score_case(
    prediction: Volume, reference: Volume, labels: Mapping[int, str], case: str = "case"
) -> CaseScore:
    """Dice and volumes for every foreground label; both maps must be on the same grid."""
    if not prediction.same_grid(reference):
        raise GeometryError(
            f"{case}: the prediction and the reference label map are on different grids",
            hint="resample the reference onto the image grid first (nearest neighbour)",
        )
    foreground = [value for value in labels if value != 0]
    dices = dice_per_label(prediction.array, reference.array, foreground)
    voxel_ml = prediction.voxel_volume_ml
    scores = []
    for value in foreground:
        scores.append(
            LabelScore(
                label=int(value),
                name=labels[value],
                dice=dices[value],
                reference_ml=float(np.count_nonzero(reference.array == value) * voxel_ml),
                predicted_ml=float(np.count_nonzero(prediction.array == value) * voxel_ml),
            )
        )
    return CaseScore(case, scores)


def mean_dice(scores: Iterable[CaseScore]) -> dict[str, float]:
    """Mean Dice per label name over cases, ignoring cases where the label is absent (NaN)."""
    collected: dict[str, list[float]] = {}
    for case in scores:
        for label in case.labels:
            collected.setdefault(label.name, [])
            if not math.isnan(label.dice):
                collected[label.name].append(label.dice)
    return {name: (float(np.mean(values)) if values else math.nan) for name, values in collected.items()}


def evaluate_model(
    package: Any,
    dataset: Any,
    *,
    specs: Sequence[Any] | None = None,
    device: str = "auto",
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    predictions: dict[str, Volume] | None = None,
    configuration: str | None = None,
) -> list[CaseScore]:
    """Segment every case of ``dataset`` (or ``specs``) with ``package`` and score it.

    ``predictions``, when given, receives each case's label map (the model's values) by case name,
    so a caller can show the outputs it scored without segmenting again. ``configuration``
    forces one of the model's configurations (default: chosen per case by its spacing).

    Labels are matched by name: a label the model has and the dataset does not is not
    scored, and the reverse raises (the model cannot be judged on a label it never makes).
    """
    from medseg.model.infer import segment

    model_index = {name: value for value, name in package.labels.items() if value != 0}
    dataset_names = {value: name for value, name in dataset.labels.items() if value != 0}
    missing = sorted(set(dataset_names.values()) - set(model_index))
    if missing:
        raise DatasetError(f"the model does not segment {missing} (it knows {sorted(model_index)})")
    specs = list(specs) if specs is not None else list(dataset.specs)
    scores = []
    for number, spec in enumerate(specs):
        if cancel is not None:
            cancel.raise_if_cancelled()
        report(progress, number / max(len(specs), 1), f"case {number + 1} of {len(specs)}: {spec.name}", "evaluate")
        case = dataset.load(spec)
        result = segment(case.image, package, device=device, cancel=cancel, configuration=configuration)
        if predictions is not None:
            predictions[spec.name] = result.label_map
        reference = np.zeros(case.label_map.shape_zyx, dtype=np.uint16)
        for value, name in dataset_names.items():
            reference[case.label_map.array == value] = model_index[name]
        scored = {model_index[name]: name for name in dataset_names.values()}
        score = score_case(result.label_map, case.label_map.with_array(reference), scored, spec.name)
        score.configuration = result.configuration
        scores.append(score)
    report(progress, 1.0, "evaluated", "evaluate")
    return scores
