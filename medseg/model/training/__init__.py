"""Training engine: from scratch or fine-tuning, single process or DistributedDataParallel.

:func:`train` is a generator of events (:mod:`.config`): a :class:`StartedEvent`, an
:class:`IterationEvent` after every optimiser step (loss, learning rate), an
:class:`EpochEvent` after every epoch (mean loss, validation loss, per-label Dice, ETA),
:class:`CheckpointEvent` when a checkpoint is written, :class:`MessageEvent` and
:class:`FallbackEvent` for things the user must be told. Its return value is the
:class:`TrainResult`. The CLI prints the events (``--json``: one JSON object per line),
the GUI draws its curves from them.

What a run does, following nnU-Net v2's trainer where nothing else is said:

- cases are resampled once to the plan's spacing and normalised (CT: clip to the stored
  percentiles, z-score), kept in memory (:mod:`.sampling`);
- every sample is a patch centred on a random voxel, except that the last third of each
  batch (``oversample_foreground``) is centred on a voxel of a randomly chosen label
  present in the case; augmentation (``medseg.model.augment``) on the fly;
- loss Dice + CE with deep supervision; SGD (nesterov, momentum 0.99, lr 1e-2, weight
  decay 3e-5) or AdamW; poly learning rate ``lr0 * (1 - step/steps) ** 0.9`` (updated
  every step); gradient norm clipped at 12; AMP on CUDA (:mod:`.run`);
- after each epoch: sliding-window inference on the held-out cases (:mod:`.validation`);
  an atomic ``checkpoint_last`` (and ``checkpoint_best`` when the mean Dice improves,
  :mod:`.checkpoints`). A cancel or crash leaves the last completed epoch's checkpoint
  intact and ``resume=True`` continues from it;
- a changed label set replaces the output heads (:mod:`.heads`).

Distributed (:mod:`.distributed`): under ``torchrun`` each process takes a contiguous share
of the global batch; because the loss is a mean of per-sample terms, DDP's gradient average
equals the single-process gradient of the same global batch. Only rank 0 writes files.
"""

from __future__ import annotations

import importlib
from typing import Any

# public name -> the module that defines it, imported on first use (PEP 562): a module of this
# package (the run record the Train tab reads) must not pull PyTorch into the first window.
_EXPORTS = {
    "CANONICAL_ORIENTATION": "medseg.model.fingerprint",
    "CHECKPOINT_BEST": "medseg.model.training.config",
    "CHECKPOINT_LAST": "medseg.model.training.config",
    "CLASS_LOCATIONS_PER_LABEL": "medseg.model.training.sampling",
    "CheckpointEvent": "medseg.model.training.config",
    "DistributedContext": "medseg.model.training.distributed",
    "EpochEvent": "medseg.model.training.config",
    "FallbackEvent": "medseg.model.training.config",
    "HISTORY_FILE": "medseg.model.training.config",
    "IterationEvent": "medseg.model.training.config",
    "MessageEvent": "medseg.model.training.config",
    "POLY_EXPONENT": "medseg.model.training.config",
    "PreparedCase": "medseg.model.training.sampling",
    "PreparingEvent": "medseg.model.training.config",
    "StartedEvent": "medseg.model.training.config",
    "TrainConfig": "medseg.model.training.config",
    "TrainEvent": "medseg.model.training.config",
    "TrainResult": "medseg.model.training.config",
    "TrainingRun": "medseg.model.training.run",
    "adapt_state_to_labels": "medseg.model.training.heads",
    "default_work_dir": "medseg.model.training.schedule",
    "draw_sample": "medseg.model.training.sampling",
    "event_to_json": "medseg.model.training.config",
    "load_checkpoint": "medseg.model.training.checkpoints",
    "local_batch": "medseg.model.training.sampling",
    "package_from_checkpoint": "medseg.model.training.checkpoints",
    "pick_case": "medseg.model.training.sampling",
    "plan_for_dataset": "medseg.model.fingerprint",
    "poly_lr": "medseg.model.training.schedule",
    "prepare_case": "medseg.model.training.sampling",
    "run_training": "medseg.model.training.run",
    "sample_rng": "medseg.model.training.sampling",
    "save_checkpoint": "medseg.model.training.checkpoints",
    "setup_distributed": "medseg.model.training.distributed",
    "train": "medseg.model.training.run",
    "validate": "medseg.model.training.validation",
    "validate_with_loss": "medseg.model.training.validation",
}

__all__ = [
    "CANONICAL_ORIENTATION", "CHECKPOINT_BEST", "CHECKPOINT_LAST", "CLASS_LOCATIONS_PER_LABEL", "HISTORY_FILE",
    "POLY_EXPONENT", "CheckpointEvent", "DistributedContext", "EpochEvent", "FallbackEvent", "IterationEvent",
    "MessageEvent", "PreparedCase", "PreparingEvent", "StartedEvent", "TrainConfig", "TrainEvent", "TrainResult", "TrainingRun",
    "adapt_state_to_labels", "default_work_dir", "draw_sample", "event_to_json", "load_checkpoint", "local_batch",
    "package_from_checkpoint", "pick_case", "plan_for_dataset", "poly_lr", "prepare_case",
    "run_training", "sample_rng", "save_checkpoint", "setup_distributed", "train", "validate", "validate_with_loss",
]


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module_name), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})
