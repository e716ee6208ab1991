"""Scores a segmentation against a reference: per-case, per-label Dice and volume difference.

(Segmenting a dataset's cases and scoring them is the use case :func:`medseg.workflows.evaluate.evaluate`.)"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Mapping

import numpy as np

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import GeometryError


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
    prediction: Volume, reference: Volume, labels: Mapping[int, Label], case: str = "case"
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
                name=labels[value].name,
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
