"""The pieces of a training run that need no run: the learning-rate schedule, the optimiser, where
checkpoints go, how a duration is written, and each trained label's coded concept."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

import torch

from medseg.errors import ModelError
from medseg.model.datasets import Dataset
from medseg.model.training.config import POLY_EXPONENT, TrainConfig


def poly_lr(initial: float, step: int, total: int, exponent: float = POLY_EXPONENT) -> float:
    return initial * (1.0 - min(step, total) / max(total, 1)) ** exponent


def make_optimizer(network: torch.nn.Module, config: TrainConfig) -> torch.optim.Optimizer:
    lr = config.resolved_learning_rate()
    if config.optimizer == "sgd":
        return torch.optim.SGD(network.parameters(), lr=lr, momentum=config.momentum, nesterov=True,
                               weight_decay=config.weight_decay)
    if config.optimizer == "adamw":
        return torch.optim.AdamW(network.parameters(), lr=lr, weight_decay=config.weight_decay)
    raise ModelError(f"unknown optimizer '{config.optimizer}' (use sgd or adamw)")


def default_work_dir(out_dir: Path) -> Path:
    """Checkpoints live next to the package folder, which is replaced whole when it is written."""
    return out_dir.with_name(out_dir.name + ".training")


def format_seconds(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def label_codes(dataset: Dataset, labels: dict[int, str], started_from: Iterable[Any]) -> dict[int, tuple[Any, Any]]:
    """Each trained label's coded concept: as its data coded it, else as the model it started from
    (``started_from``: the packages, None where there is none) coded the label of that name; a label neither
    coded has none."""
    described = dataset.label_table()
    by_name = {label.name: label for p in started_from if p is not None for label in p.labels.values()}
    codes = {}
    for value, name in labels.items():
        label = described.get(value)
        if label is None or not label.coded:
            label = by_name.get(name)
        if label is not None and label.coded:
            codes[value] = (label.category, label.type)
    return codes


def diverged(loss: float, epoch: int, iteration: int, last: Path) -> ModelError:
    """The error that stops a run whose loss is not a number; ``last``: the checkpoint it would resume from."""
    kept = (f"the last good checkpoint is kept ({last}, after epoch {epoch})" if last.is_file() and epoch > 0
            else "no epoch was completed, so there is no checkpoint")
    return ModelError(f"training diverged: the loss is {loss} at epoch {epoch + 1}, iteration {iteration + 1}; "
                      f"the run stops here and {kept}",
                      hint="lower the learning rate (--lr), or check the dataset's images and labels; "
                           "--resume continues from the checkpoint")
