"""What a training run is told (:class:`TrainConfig`) and what it tells (the events).

Every event is a frozen dataclass with a ``kind`` (its name in the JSON event stream of
``medseg train --json``, see :func:`event_to_json`) and plain fields.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from medseg.errors import ModelError
from medseg.model.augment import AugmentConfig

CHECKPOINT_LAST = "checkpoint_last.safetensors"
CHECKPOINT_BEST = "checkpoint_best.safetensors"
HISTORY_FILE = "history.json"
POLY_EXPONENT = 0.9


@dataclass
class TrainConfig:
    epochs: int = 50
    iterations_per_epoch: int = 250
    batch_size: int | None = None  # global batch (split over processes); None = the plan's
    optimizer: str = "sgd"  # "sgd" (nesterov) or "adamw"
    learning_rate: float | None = None  # None: 1e-2 for SGD, 1e-3 for AdamW
    weight_decay: float = 3e-5
    momentum: float = 0.99
    grad_clip: float = 12.0
    oversample_foreground: float = 0.33
    seed: int = 12345
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = True  # only takes effect on CUDA
    deep_supervision: bool = True
    validation_step: float = 0.5  # sliding-window step (fraction of the patch)
    validate_every: int = 1  # epochs between validations (the last epoch is always validated)
    # threads preparing batches ahead of the step (None: 2 feeding a GPU, 0 on the CPU; 0: in the loop)
    prefetch: int | None = None
    augmentation: AugmentConfig = field(default_factory=AugmentConfig)

    def __post_init__(self) -> None:
        """Refuse what no run can train with, before any work (``--lr nan`` wrote 16 M NaN weights, exit 0)."""
        def whole(name: str, value: Any, minimum: int) -> None:
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
                raise ModelError(f"{name} must be a whole number of at least {minimum}, not {value!r}")

        whole("the number of epochs", self.epochs, 1)
        whole("the iterations per epoch", self.iterations_per_epoch, 1)
        whole("the batch size", self.batch_size, 1)
        whole("the epochs between validations", self.validate_every, 1)
        whole("the prefetch threads", self.prefetch, 0)
        if self.learning_rate is not None and not (math.isfinite(self.learning_rate) and 0 < self.learning_rate <= 10):
            raise ModelError(f"the learning rate must be a number above 0 and at most 10, not {self.learning_rate!r} "
                             "(nnU-Net: 0.01 with SGD, 0.001 with AdamW)")
        for name in ("weight_decay", "momentum", "grad_clip", "oversample_foreground", "validation_step"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and math.isfinite(value) and value >= 0):
                raise ModelError(f"the training setting {name} must be a finite number of at least 0, not {value!r}")

    def resolved_learning_rate(self) -> float:
        if self.learning_rate is not None:
            return float(self.learning_rate)
        return 1e-2 if self.optimizer == "sgd" else 1e-3

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["learning_rate"] = self.resolved_learning_rate()
        return data



@dataclass(frozen=True)
class IterationEvent:
    kind: ClassVar[str] = "iteration"
    epoch: int  # 0-based
    iteration: int  # 0-based, within the epoch
    step: int  # global optimiser step
    total_steps: int
    loss: float
    learning_rate: float


@dataclass(frozen=True)
class EpochEvent:
    kind: ClassVar[str] = "epoch"
    epoch: int  # 0-based, the epoch just finished
    epochs: int
    train_loss: float
    validation_dice: dict[str, float]  # label name -> Dice (mean over held-out cases)
    mean_dice: float  # NaN without validation cases
    best_mean_dice: float
    is_best: bool
    seconds: float
    eta_seconds: float
    patches_per_second: float
    validation_loss: float = math.nan  # Dice+CE on the held-out cases (NaN when not validated)


@dataclass(frozen=True)
class MessageEvent:
    kind: ClassVar[str] = "message"
    text: str


@dataclass(frozen=True)
class FallbackEvent:
    """Something ran differently from what was asked (no GPU, no AMP on the CPU ...)."""

    kind: ClassVar[str] = "fallback"
    text: str


@dataclass(frozen=True)
class CheckpointEvent:
    kind: ClassVar[str] = "checkpoint"
    epoch: int  # 0-based, the epoch the checkpoint holds
    path: str
    best: bool


@dataclass(frozen=True)
class PreparingEvent:
    """Before the first iteration: the dataset being made ready, a step at a time (a case loaded, a case
    resampled for the network, the network built). ``done`` of ``total`` steps are finished; ``text`` says
    what runs now. On a CPU this takes from seconds (one small case) to minutes (several large CTs)."""

    kind: ClassVar[str] = "preparing"
    done: int
    total: int
    text: str


@dataclass(frozen=True)
class StartedEvent:
    """The run is set up: what it will do (the GUI sizes its progress bar from this)."""

    kind: ClassVar[str] = "started"
    total_steps: int
    start_step: int  # > 0 when resumed
    epochs: int
    iterations_per_epoch: int
    global_batch: int
    world_size: int
    device: str
    labels: dict[str, str]
    plan: dict[str, Any]
    amp: bool = False  # mixed precision in use (AMP asked for and the device is CUDA)
    prefetch_workers: int = 0  # threads preparing batches ahead (0: in the loop)


TrainEvent = (IterationEvent | EpochEvent | MessageEvent | FallbackEvent | CheckpointEvent | PreparingEvent
              | StartedEvent)


@dataclass
class TrainResult:
    package_path: Path | None  # the exported model package (rank 0), None on other ranks
    history: list[dict[str, Any]]
    best_epoch: int | None
    best_mean_dice: float
    messages: list[str]
    seconds: float = 0.0
    device: str = ""


def _json_value(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None  # JSON has no NaN: "not measured"
    if isinstance(value, dict):
        return {str(k): _json_value(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_json_value(v) for v in value]
    if isinstance(value, Path):
        return str(value)
    return value


def event_to_json(event: Any) -> dict[str, Any]:
    """One event as a JSON-ready dict: ``{"event": kind, ...fields}``; NaN becomes null."""
    return {"event": event.kind, **_json_value(dataclasses.asdict(event))}
