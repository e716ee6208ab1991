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

from medseg.model.fingerprint import CANONICAL_ORIENTATION, plan_for_dataset
from medseg.model.training.checkpoints import load_checkpoint, package_from_checkpoint, save_checkpoint
from medseg.model.training.config import (
    CHECKPOINT_BEST, CHECKPOINT_LAST, HISTORY_FILE, POLY_EXPONENT, CheckpointEvent, EpochEvent, FallbackEvent,
    IterationEvent, MessageEvent, StartedEvent, TrainConfig, TrainEvent, TrainResult, event_to_json,
)
from medseg.model.training.distributed import DistributedContext, setup_distributed
from medseg.model.training.heads import adapt_state_to_labels
from medseg.model.training.run import TrainingRun, default_work_dir, poly_lr, run_training, train
from medseg.model.training.sampling import (
    CLASS_LOCATIONS_PER_LABEL, PreparedCase, draw_sample, local_batch, pick_case, prepare_case, sample_rng,
)
from medseg.model.training.validation import validate, validate_with_loss

__all__ = [
    "CANONICAL_ORIENTATION", "CHECKPOINT_BEST", "CHECKPOINT_LAST", "CLASS_LOCATIONS_PER_LABEL", "HISTORY_FILE",
    "POLY_EXPONENT", "CheckpointEvent", "DistributedContext", "EpochEvent", "FallbackEvent", "IterationEvent",
    "MessageEvent", "PreparedCase", "StartedEvent", "TrainConfig", "TrainEvent", "TrainResult", "TrainingRun",
    "adapt_state_to_labels", "default_work_dir", "draw_sample", "event_to_json", "load_checkpoint", "local_batch",
    "package_from_checkpoint", "pick_case", "plan_for_dataset", "poly_lr", "prepare_case",
    "run_training", "sample_rng", "save_checkpoint", "setup_distributed", "train", "validate", "validate_with_loss",
]
