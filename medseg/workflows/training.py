"""Train or fine-tune a model on a labelled dataset: the configuration built once, the run started once.

``medseg train`` (its flags) and the Train tab (its form) both say what they want as
:class:`TrainingSettings` and :class:`PlanSettings`; :func:`train_config` and
:meth:`PlanSettings.options` turn them into the engine's ``TrainConfig`` and planning options, and
:func:`start_training` checks the build and the device, opens the dataset and the base model, and
returns the run's events (:mod:`medseg.model.training`).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

from medseg.errors import MedsegError
from medseg.model.training.config import (  # the run's events, as an interface shows them (light: no torch)
    CheckpointEvent,
    EpochEvent,
    FallbackEvent,
    IterationEvent,
    MessageEvent,
    PreparingEvent,
    StartedEvent,
)

SCRATCH_MEMORY_GB = 8.0  # nnU-Net's reference: the patch is sized for an 8 GB GPU


@dataclass(frozen=True)
class TrainingSettings:
    """How a run trains (``medseg train``'s flags, the Train tab's form)."""

    epochs: int = 50
    iterations: int = 250  # optimiser steps per epoch
    batch_size: int | None = None  # global; default: the plan's
    optimizer: str = "sgd"
    learning_rate: float | None = None  # default 1e-2 SGD, 1e-3 AdamW
    seed: int = 12345
    device: str = "auto"
    amp: bool = True
    validate_every: int = 1
    augment: bool = True
    mirror: bool = True  # False: no mirroring (labels that differ left and right)
    tissue_shift_hu: tuple[float, float] | None = None  # shift soft tissue by LOW..HIGH HU in half the patches
    prefetch: int | None = None


@dataclass(frozen=True)
class PlanSettings:
    """How a model trained from scratch is planned (ignored when fine-tuning: the base's plan is kept)."""

    configuration: str = "3d_fullres"
    target_spacing_zyx: tuple[float, float, float] | None = None
    memory_gb: float = SCRATCH_MEMORY_GB
    base_features: int | None = None
    max_features: int | None = None
    stages: int | None = None
    name: str | None = None

    def options(self) -> dict[str, Any]:
        """The engine's planning options."""
        from medseg.model.planner import REFERENCE_VAL_3D

        return {
            "configuration": self.configuration,
            "target_spacing_zyx": self.target_spacing_zyx,
            "memory_reference": REFERENCE_VAL_3D * self.memory_gb / SCRATCH_MEMORY_GB,
            "base_features": self.base_features,
            "max_features": self.max_features,
            "num_stages": self.stages,
            "name": self.name,
        }


def train_config(settings: TrainingSettings) -> Any:
    """The engine's TrainConfig (:class:`medseg.model.training.TrainConfig`) for ``settings``."""
    from medseg.model.augment import NO_AUGMENTATION, AugmentConfig
    from medseg.model.training import TrainConfig

    augmentation = AugmentConfig() if settings.augment else NO_AUGMENTATION
    if not settings.mirror:
        augmentation = dataclasses.replace(augmentation, p_mirror=0.0)
    if settings.tissue_shift_hu and settings.augment:
        augmentation = dataclasses.replace(augmentation, p_tissue_shift=0.5,
                                           tissue_shift_hu=tuple(settings.tissue_shift_hu))
    return TrainConfig(
        epochs=settings.epochs, iterations_per_epoch=settings.iterations, batch_size=settings.batch_size,
        optimizer=settings.optimizer, learning_rate=settings.learning_rate, seed=settings.seed,
        device=settings.device, amp=settings.amp, validate_every=settings.validate_every,
        augmentation=augmentation, prefetch=settings.prefetch,
    )


@dataclass(frozen=True)
class TrainRequest:
    dataset: str | os.PathLike  # nnU-Net raw folder, images/labels folder, editor cases, or a dataset .json
    out: str | os.PathLike  # the model package folder to write
    settings: TrainingSettings = TrainingSettings()
    plan: PlanSettings | dict[str, Any] | None = None  # from scratch: how to plan (a dict: the options as they are)
    base: str | os.PathLike | None = None  # fine-tune this model (open_model's reference)
    inflate_from: str | os.PathLike | None = None  # a 2D model whose kernels start the planned 3D configuration
    data_root: str | os.PathLike | None = None  # root for relative paths in a dataset .json
    resume: bool = False
    work_dir: str | os.PathLike | None = None
    profile: str | os.PathLike | None = None  # a torch.profiler trace and the phase table into this folder
    provenance: dict[str, Any] = field(default_factory=dict)


@dataclass
class TrainingRun:
    dataset: Any  # medseg.model.datasets.Dataset: its name, cases and labels
    config: Any  # the TrainConfig the run uses
    events: Iterator[Any]  # the engine's events; the generator's return value is the TrainResult


def start_training(request: TrainRequest, cancel: Any = None) -> TrainingRun:
    """Check (a build that can train, the device, the counts), open the dataset and the models, start."""
    from medseg.build_info import require_training
    from medseg.model.backends import TRAINING, resolve_device
    from medseg.model.datasets import open_dataset
    from medseg.model.training import train
    from medseg.workflows.models import open_model

    require_training()  # before the dataset is read: the DirectML build cannot train
    settings = request.settings
    resolve_device(settings.device, TRAINING)
    if settings.epochs < 1 or settings.iterations < 1:
        raise MedsegError("--epochs and --iterations must be at least 1")
    dataset = open_dataset(request.dataset, request.data_root)
    base = open_model(request.base).package if request.base else None
    flat = open_model(request.inflate_from).package if request.inflate_from else None
    plan = request.plan.options() if isinstance(request.plan, PlanSettings) else request.plan
    config = train_config(settings)
    events = train(dataset, Path(request.out), config, base_package=base, inflate_from=flat, resume=request.resume,
                   plan_options=plan, work_dir=request.work_dir, provenance=dict(request.provenance),
                   profile=request.profile, cancel=cancel)
    return TrainingRun(dataset, config, events)


def event_record(event: Any) -> dict:
    """An event as the JSON record ``medseg train --json`` prints."""
    from medseg.model.training import event_to_json

    return event_to_json(event)


__all__ = ["TrainingSettings", "PlanSettings", "train_config", "TrainRequest", "TrainingRun", "start_training",
           "event_record", "CheckpointEvent", "EpochEvent", "FallbackEvent", "IterationEvent", "MessageEvent",
           "PreparingEvent", "StartedEvent"]
