"""The training run as an object with steps (after MONAI Label's BasicTrainTask).

:class:`TrainingRun` does, in order: :meth:`~TrainingRun.load_cases` (the training cases,
from disk), :meth:`~TrainingRun.choose_plan` (the base model's, or one planned from the
dataset's fingerprint), :meth:`~TrainingRun.prepare_cases` (resampled and normalised as
inference does), :meth:`~TrainingRun.build` (network, heads adapted to the label set,
optimiser, DDP), :meth:`~TrainingRun.restore` (resume from the last checkpoint), then per
epoch :meth:`~TrainingRun.train_epoch` and :meth:`~TrainingRun.finish_epoch` (validation,
checkpoints, history) and finally :meth:`~TrainingRun.export` (the model package).

Each step is a generator of events (medseg.model.training.config); :meth:`TrainingRun.events`
chains them and returns the :class:`TrainResult`. Cancellation is checked between units of
work: a cancel leaves the last completed epoch's checkpoint intact, and ``resume=True``
continues from it exactly.
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping

import numpy as np
import torch
import torch.distributed as dist

from medseg import threads as medseg_threads
from medseg.build_info import require_training
from medseg.errors import DatasetError, ModelError
from medseg.io.atomic import atomic_write_text
from medseg.model.datasets import Case, Dataset
from medseg.model.fingerprint import CANONICAL_ORIENTATION, Fingerprint, fingerprint_cases, plan_for_dataset
from medseg.model.losses import DeepSupervisionLoss, DiceCELoss
from medseg.model.plan import Plan
from medseg.model.profiling import TRAIN_PHASES, Profiling, phase
from medseg.model.training.checkpoints import load_checkpoint, save_checkpoint
from medseg.model.training.config import (
    CHECKPOINT_BEST,
    CHECKPOINT_LAST,
    HISTORY_FILE,
    CheckpointEvent,
    EpochEvent,
    FallbackEvent,
    IterationEvent,
    MessageEvent,
    PreparingEvent,
    StartedEvent,
    TrainConfig,
    TrainEvent,
    TrainResult,
)
from medseg.model.training.distributed import DistributedContext, setup_distributed
from medseg.model.training.heads import adapt_state_to_labels
from medseg.model.training.inflate import check_inflatable, inflate_state
from medseg.model.training.package_out import write_package
from medseg.model.training.prefetch import BatchPrefetcher, default_workers
from medseg.model.training.sampling import PreparedCase, host_batch, prepare_case
from medseg.model.training.schedule import default_work_dir, diverged, format_seconds, make_optimizer, poly_lr
from medseg.model.training.validation import validate_with_loss
from medseg.model.unet import build_network
from medseg.progress import CancelToken, ProgressCallback, report

# Losses that are not a number, in a row, that mixed precision's scaler may skip before the run is stopped.
NON_FINITE_LOSS_PATIENCE = 20

Events = Iterator[TrainEvent]


class TrainingRun:
    """One training (or fine-tuning) run of ``dataset`` into the package folder ``out_dir``.

    ``base_package`` (a ModelPackage) fine-tunes: its plan and weights are the start point.
    ``plan`` fixes the plan; otherwise the dataset's fingerprint is planned with
    ``plan_options`` (see :func:`medseg.model.fingerprint.plan_for_dataset`). Checkpoints go
    to ``work_dir`` (default: ``<out_dir>.training``). ``provenance`` adds entries to the
    package's provenance (the CLI records its command line there). ``profile``: a folder for
    a torch.profiler trace of a few iterations and the run's phase table (medseg.model.profiling).
    """

    def __init__(
        self, dataset: Dataset, out_dir: str | Path, config: TrainConfig | None = None, *,
        plan: Plan | None = None, base_package: Any = None, inflate_from: Any = None, resume: bool = False,
        plan_options: Mapping[str, Any] | None = None, work_dir: str | Path | None = None,
        progress: ProgressCallback | None = None, cancel: CancelToken | None = None,
        provenance: Mapping[str, Any] | None = None, profile: str | Path | None = None,
    ) -> None:
        require_training()  # the DirectML build has no PyTorch device to train on
        self.dataset = dataset
        self.out_dir = Path(out_dir)
        self.config = config or TrainConfig()
        self.plan = plan
        self.base_package = base_package
        self.inflate_from = inflate_from
        if base_package is not None and inflate_from is not None:
            raise ModelError("fine-tune from a model (--from) or start a 3D plan from a 2D model "
                             "(--inflate-from), not both")
        self.resume = resume
        self.plan_options = dict(plan_options or {})
        self.work_dir = Path(work_dir) if work_dir is not None else default_work_dir(self.out_dir)
        self.progress = progress
        self.cancel = cancel
        self.extra_provenance = dict(provenance or {})
        self.profile = Path(profile) if profile is not None else None
        self.profiling: Profiling | None = None
        self.batches: BatchPrefetcher | None = None
        self.labels = dict(dataset.labels)
        self.messages: list[str] = []
        self.history: list[dict[str, Any]] = []
        self.ctx = DistributedContext()
        self.raw_cases: list[Case] = []
        self.cases: list[PreparedCase] = []
        self.validation_cases: list[PreparedCase] = []
        self.fingerprint: Fingerprint | None = None
        self.base_labels: dict[int, str] | None = None
        self.base_state: dict[str, torch.Tensor] | None = None
        self.inflate_state: dict[str, torch.Tensor] | None = None
        self.start_epoch = 0
        self.best_dice = -math.inf
        self._prepared = 0  # preparation steps begun (PreparingEvent)
        self.best_epoch: int | None = None
        self.run_started = 0.0
        self.epochs_done_here = 0

    # --- helpers -------------------------------------------------------------------------------
    def _preparing(self, text: str) -> PreparingEvent:
        """The next step before the first iteration: cases loaded and resampled (two steps each), the
        cases measured, the network built."""
        cases = len(self.dataset.training_specs) + len(self.dataset.validation_specs)
        total = 2 * cases + 2
        event = PreparingEvent(min(self._prepared, total), total, text)
        self._prepared += 1
        return event

    def message(self, text: str) -> MessageEvent:
        self.messages.append(text)
        return MessageEvent(text)

    def _fallback(self, text: str) -> FallbackEvent:
        self.messages.append(text)
        return FallbackEvent(text)

    def _check_cancel(self) -> None:
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()

    @property
    def total_steps(self) -> int:
        return self.config.epochs * self.config.iterations_per_epoch

    # --- the whole run -----------------------------------------------------------------------------
    def events(self) -> Iterator[TrainEvent]:
        """Every step in order; the generator's return value is the :class:`TrainResult`."""
        with medseg_threads.job("training"):  # this process's threads, shared with its other medseg jobs
            return (yield from self._events())

    def _events(self) -> Iterator[TrainEvent]:
        self.ctx = setup_distributed(self.config.device)
        profile = self.profile if self.ctx.is_main else None  # one trace: rank 0's
        self.profiling = Profiling(profile, self.ctx.device, stepped=True, order=TRAIN_PHASES,
                                   title="medseg train: where the time went") if profile is not None else None
        try:
            if self.profiling is not None:
                self.profiling.__enter__()
            yield from self.check_device()
            with phase("load"):
                yield from self.load_cases()
                yield from self.choose_plan()
            with phase("preprocess"):
                yield from self.prepare_cases()
            yield from self.build()
            yield from self.restore()
            self.batches = self.make_prefetcher()
            yield self.message(
                f"{len(self.cases)} training and {len(self.validation_cases)} validation cases; global batch "
                f"{self.global_batch} over {self.ctx.world_size} process(es) on {self.ctx.device}; "
                f"{self.precision}; {self.feeding}")
            yield self.started_event()
            self.run_started = time.monotonic()
            for epoch in range(self.start_epoch, self.config.epochs):
                losses = yield from self.train_epoch(epoch)
                yield from self.finish_epoch(epoch, losses)
            with phase("write"):
                package_path = yield from self.export()
            if self.profiling is not None:
                self.profiling.__exit__(None, None, None)
                yield self.message(self.profiling.table())
                traces = self.profiling.trace_files()
                yield self.message(f"profile: {traces[-1] if traces else self.profile} (open in Perfetto, "
                                    f"ui.perfetto.dev, or tensorboard --logdir {self.profile})")
                self.profiling = None
        finally:
            if self.batches is not None:
                self.batches.close()
            if self.profiling is not None:
                self.profiling.__exit__(None, None, None)
            if self.ctx.initialized_here and dist.is_initialized():
                dist.destroy_process_group()
        return TrainResult(package_path, self.history, self.best_epoch,
                           self.best_dice if self.best_epoch is not None else math.nan, self.messages,
                           time.monotonic() - self.run_started if self.run_started else 0.0, str(self.ctx.device))

    @property
    def precision(self) -> str:
        return "mixed precision (AMP: float16 autocast, GradScaler)" if self.use_amp else "full precision (float32)"

    @property
    def feeding(self) -> str:
        workers = self.batches.workers if self.batches is not None else 0
        return (f"batches prepared ahead by {workers} thread(s)" if workers
                else "batches prepared in the loop")

    def make_prefetcher(self) -> BatchPrefetcher:
        config = self.config
        workers = default_workers(self.ctx.device) if config.prefetch is None else int(config.prefetch)
        keys = ((epoch, iteration) for epoch in range(self.start_epoch, config.epochs)
                for iteration in range(config.iterations_per_epoch))
        cases, plan, batch, ctx = self.cases, self.plan, self.global_batch, self.ctx
        return BatchPrefetcher(lambda epoch, iteration: host_batch(cases, plan, config, batch, epoch, iteration, ctx),
                               keys, ctx.device, workers)

    # --- steps ---------------------------------------------------------------------------------------
    def check_device(self) -> Events:
        if self.ctx.is_main:
            self.work_dir.mkdir(parents=True, exist_ok=True)
        if self.config.device == "auto" and self.ctx.device.type == "cpu":
            yield self._fallback("no CUDA GPU found: training on the CPU (slow; fine for a short fine-tune)")
        if self.config.amp and self.ctx.device.type == "cpu" and self.config.device != "auto":
            yield self._fallback("mixed precision (AMP) runs only on CUDA: training in full precision")

    def load_cases(self) -> Events:
        if not self.dataset.training_specs:
            raise DatasetError("the dataset has no training cases (all are held out for validation)")
        report(self.progress, 0.0, "loading cases", "load")
        for spec in self.dataset.training_specs:
            self._check_cancel()
            yield self._preparing(f"loading {spec.name}")
            case = self.dataset.load(spec)
            for note in case.notes:
                if "resampled" in note or "no name" in note or "not chosen for training" in note:
                    yield self.message(f"{case.name}: {note}")
            self.raw_cases.append(case)

    def _base_configuration(self, base: Any) -> str:
        """Which of the base model's configurations to fine-tune: the one named by the plan
        options (``--configuration-name`` or ``--configuration``), else its first."""
        for wanted in (self.plan_options.get("name"), self.plan_options.get("configuration")):
            if wanted and wanted in base.configurations:
                return wanted
        named = self.plan_options.get("name")
        if named:
            raise ModelError(f"the base model '{base.name}' has no configuration {named!r}",
                             hint=f"it has {', '.join(base.configurations)}")
        return next(iter(base.configurations))

    def choose_plan(self) -> Events:
        base = self.base_package
        if base is not None:
            configuration = self.plan.name if self.plan is not None else self._base_configuration(base)
            self.plan = base.configurations[configuration]
            self.base_labels = base.names
            self.base_state = dict(base.weights[configuration][0])
            yield self.message(f"fine-tuning from '{base.name}' (configuration {configuration})")
            if self.plan.orientation is None:
                self.plan = dataclasses.replace(self.plan, orientation=CANONICAL_ORIENTATION)
                yield self.message(
                    f"the base model reads arrays as stored; the fine-tuned model reads every image in "
                    f"{CANONICAL_ORIENTATION} orientation (a RAS NIfTI and an LPS DICOM then look the same to it)")
        yield self._preparing("measuring the cases (intensities, spacing)")
        self.fingerprint = fingerprint_cases(self.raw_cases, seed=self.config.seed)
        if self.plan is None:
            self.plan = plan_for_dataset(self.fingerprint, len(self.labels), **self.plan_options)
        if self.inflate_from is not None:
            yield from self._choose_inflation(self.inflate_from)

    def _choose_inflation(self, source: Any) -> Events:
        """Check that ``source``'s 2D configuration fits the 3D plan; keep its weights for build()."""
        assert self.plan is not None
        flat = [c for c in source.configurations.values() if c.dim == 2]
        if not flat:
            raise ModelError(f"'{source.name}' has no 2D configuration to start from",
                             hint=f"it has {', '.join(source.configurations)}")
        own = [self.labels[k] for k in sorted(self.labels)]
        theirs = [source.names[k] for k in sorted(source.labels)]
        if own != theirs:
            raise ModelError(f"'{source.name}' has the labels {', '.join(theirs)}; this dataset has {', '.join(own)}",
                             hint="start from a 2D model of the same labels")
        check_inflatable(flat[0], self.plan)
        self.inflate_state = dict(source.weights[flat[0].name][0])
        same_norm = flat[0].normalization == self.plan.normalization
        yield self.message(
            f"3D configuration '{self.plan.name}' starts from the 2D configuration '{flat[0].name}' of "
            f"'{source.name}' (its kernels as the centre slice)"
            + ("" if same_norm else "; note: the intensity normalisation differs from the 2D model's"))

    def prepare_cases(self) -> Events:
        assert self.plan is not None
        self.global_batch = int(self.config.batch_size or self.plan.batch_size)
        if self.global_batch % self.ctx.world_size:
            raise DatasetError(f"the global batch size {self.global_batch} does not split evenly over "
                               f"{self.ctx.world_size} processes")
        self.cases = []
        for case, spec in zip(self.raw_cases, self.dataset.training_specs):
            self._check_cancel()
            yield self._preparing(f"resampling {spec.name} for the network")
            self.cases.append(prepare_case(case, self.plan, seed=self.config.seed, weight=spec.weight))
        self.raw_cases = []
        for spec in self.dataset.validation_specs:
            self._check_cancel()
            yield self._preparing(f"loading {spec.name} (validation)")
            case = self.dataset.load(spec)
            for note in case.notes:
                if "resampled" in note:
                    yield self.message(f"{case.name} (validation): {note}")
            yield self._preparing(f"resampling {spec.name} (validation) for the network")
            self.validation_cases.append(prepare_case(case, self.plan, seed=self.config.seed))

    def build(self) -> Events:
        assert self.plan is not None
        yield self._preparing("building the network")
        config, ctx = self.config, self.ctx
        torch.manual_seed(config.seed)
        self.network = build_network(self.plan, len(self.labels), deep_supervision=config.deep_supervision).to(ctx.device)
        if self.base_state is not None:
            state, message = adapt_state_to_labels(self.base_state, self.network, self.base_labels or {}, self.labels)
            self.network.load_state_dict(state, strict=True)
            if message:
                yield self.message(message)
        elif self.inflate_state is not None:
            self.network.load_state_dict(inflate_state(self.inflate_state, self.network), strict=True)
        self.optimizer = make_optimizer(self.network, config)
        self.model: torch.nn.Module = self.network
        if ctx.distributed:
            self.model = torch.nn.parallel.DistributedDataParallel(
                self.network, device_ids=[ctx.device.index] if ctx.device.type == "cuda" else None,
                find_unused_parameters=not config.deep_supervision)
        self.use_amp = bool(config.amp and ctx.device.type == "cuda")
        self.scaler = torch.amp.GradScaler("cuda", enabled=self.use_amp)
        self.loss_fn = DeepSupervisionLoss(DiceCELoss())
        self.initial_lr = config.resolved_learning_rate()

    def restore(self) -> Events:
        if not self.resume:
            return
        last_path = self.work_dir / CHECKPOINT_LAST
        if not last_path.is_file():
            raise ModelError("nothing to resume: no checkpoint from an earlier run", path=last_path)
        state, optimizer_state, meta = load_checkpoint(last_path)
        self.network.load_state_dict(state, strict=True)
        if optimizer_state is not None:
            self.optimizer.load_state_dict(optimizer_state)
        self.start_epoch = int(meta["epoch"]) + 1
        self.history = list(meta.get("history", []))
        self.best_dice = float(meta["best_mean_dice"]) if meta.get("best_mean_dice") is not None else -math.inf
        self.best_epoch = meta.get("best_epoch")
        yield self.message(f"resumed after epoch {self.start_epoch} of {meta.get('epochs')}")

    def started_event(self) -> StartedEvent:
        return StartedEvent(self.total_steps, self.start_epoch * self.config.iterations_per_epoch, self.config.epochs,
                            self.config.iterations_per_epoch, self.global_batch, self.ctx.world_size,
                            str(self.ctx.device), {str(k): v for k, v in self.labels.items()}, self.plan.to_dict(),
                            amp=self.use_amp, prefetch_workers=self.batches.workers if self.batches else 0)

    def train_epoch(self, epoch: int) -> Iterator[TrainEvent]:
        """The optimiser steps of one epoch; returns the per-iteration losses."""
        config, ctx = self.config, self.ctx
        self.epoch_started = time.monotonic()
        self.network.train()
        losses: list[float] = []
        for iteration in range(config.iterations_per_epoch):
            self._check_cancel()
            medseg_threads.refresh()  # another medseg job started or ended: this one's share changed
            step = epoch * config.iterations_per_epoch + iteration
            lr = poly_lr(self.initial_lr, step, self.total_steps)
            for group in self.optimizer.param_groups:
                group["lr"] = lr
            assert self.batches is not None
            images, targets = self.batches.get(epoch, iteration)
            with phase("network"):
                self.optimizer.zero_grad(set_to_none=True)
                with torch.autocast(ctx.device.type, enabled=self.use_amp):
                    outputs = self.model(images)
                loss = self.loss_fn(outputs, targets)
                self._check_finite(loss, epoch, iteration)
                self.scaler.scale(loss).backward()
                self.scaler.unscale_(self.optimizer)
                torch.nn.utils.clip_grad_norm_(self.network.parameters(), config.grad_clip)
                self.scaler.step(self.optimizer)
                self.scaler.update()
                value = loss.detach()
                if ctx.distributed:
                    dist.all_reduce(value)
                    value = value / ctx.world_size
                losses.append(float(value))
            if self.profiling is not None:
                self.profiling.step()
            done = step + 1 - self.start_epoch * config.iterations_per_epoch
            elapsed = time.monotonic() - self.run_started
            remaining = (self.total_steps - step - 1) * elapsed / max(done, 1)
            report(self.progress, (step + 1) / self.total_steps,
                   f"epoch {epoch + 1}/{config.epochs} iteration {iteration + 1}/{config.iterations_per_epoch} "
                   f"loss {losses[-1]:.4f} ETA {format_seconds(remaining)}", "train")
            self.last_lr = lr
            yield IterationEvent(epoch, iteration, step, self.total_steps, losses[-1], lr)
        return losses

    def _check_finite(self, loss: torch.Tensor, epoch: int, iteration: int) -> None:
        """Stop at a loss that is not a number, before the step writes it into the weights.

        With mixed precision the scaler skips the step of an overflowing batch and lowers its scale,
        so a few such losses in a row are normal there; a run of them is divergence."""
        if bool(torch.isfinite(loss.detach()).all()):
            self.non_finite_losses = 0
            return
        self.non_finite_losses = getattr(self, "non_finite_losses", 0) + 1
        if self.use_amp and self.non_finite_losses < NON_FINITE_LOSS_PATIENCE:
            return
        raise diverged(float(loss.detach().float().mean()), epoch, iteration, self.work_dir / CHECKPOINT_LAST)

    def finish_epoch(self, epoch: int, losses: list[float]) -> Events:
        """Validation, checkpoints (last, and best when the mean Dice improved), history."""
        config, ctx = self.config, self.ctx
        train_seconds = time.monotonic() - self.epoch_started
        dice: dict[str, float] = {}
        validation_loss = math.nan
        due = (epoch + 1) % max(1, config.validate_every) == 0 or epoch == config.epochs - 1
        if self.validation_cases and ctx.is_main and due:
            report(self.progress, (epoch + 1) * config.iterations_per_epoch / self.total_steps, "validating", "validate")
            with phase("validation"):
                dice, validation_loss = validate_with_loss(self.network, self.validation_cases, self.plan,
                                                           self.labels, ctx.device, config.validation_step,
                                                           self.use_amp, self.cancel)
        scored = [v for v in dice.values() if not math.isnan(v)]
        mean = float(np.mean(scored)) if scored else math.nan
        is_best = not math.isnan(mean) and mean > self.best_dice
        if is_best:
            self.best_dice, self.best_epoch = mean, epoch
        self.epochs_done_here += 1
        seconds = time.monotonic() - self.epoch_started
        per_epoch = (time.monotonic() - self.run_started) / self.epochs_done_here
        record = {"epoch": epoch, "train_loss": float(np.mean(losses)), "validation_dice": dice,
                  "mean_dice": None if math.isnan(mean) else mean,
                  "validation_loss": None if math.isnan(validation_loss) else validation_loss, "seconds": seconds,
                  "learning_rate": self.last_lr, "iteration_losses": losses,
                  "patches_per_second": self.global_batch * config.iterations_per_epoch / max(train_seconds, 1e-9)}
        self.history.append(record)
        if ctx.is_main:
            meta = {"epoch": epoch, "epochs": config.epochs, "history": self.history, "plan": self.plan.to_dict(),
                    "labels": {str(k): v for k, v in self.labels.items()}, "config": config.to_dict(),
                    "best_mean_dice": self.best_dice if self.best_epoch is not None else None,
                    "best_epoch": self.best_epoch}
            last_path, best_path = self.work_dir / CHECKPOINT_LAST, self.work_dir / CHECKPOINT_BEST
            with phase("write"):
                save_checkpoint(last_path, self.network, self.optimizer, meta)
                if is_best:
                    save_checkpoint(best_path, self.network, self.optimizer, meta)
                atomic_write_text(self.work_dir / HISTORY_FILE, json.dumps(self.history, indent=1))
            yield CheckpointEvent(epoch, str(last_path), False)
            if is_best:
                yield CheckpointEvent(epoch, str(best_path), True)
        if ctx.distributed:
            dist.barrier()
        yield EpochEvent(epoch, config.epochs, record["train_loss"], dice, mean,
                         self.best_dice if self.best_epoch is not None else math.nan, is_best, seconds,
                         per_epoch * (config.epochs - epoch - 1), record["patches_per_second"], validation_loss)

    def export(self) -> Iterator[TrainEvent]:
        """Rank 0 writes the model package (best weights when validated); returns its path."""
        return (yield from write_package(self))


def train(
    dataset: Dataset, out_dir: str | Path, config: TrainConfig | None = None, *,
    result: list[TrainResult] | None = None, **kwargs: Any,
) -> Iterator[TrainEvent]:
    """A :class:`TrainingRun`'s events (a generator whose return value is the TrainResult).

    ``result``, if given, also receives the TrainResult (for callers that iterate with ``for``).
    Other keywords: see :class:`TrainingRun`.
    """
    outcome = yield from TrainingRun(dataset, out_dir, config, **kwargs).events()
    if result is not None:
        result.append(outcome)
    return outcome


def run_training(
    dataset: Dataset, out_dir: str | Path, config: TrainConfig | None = None,
    on_event: Callable[[TrainEvent], None] | None = None, **kwargs: Any,
) -> TrainResult:
    """Run :func:`train` to the end, passing each event to ``on_event``; returns the result."""
    result: list[TrainResult] = []
    for event in train(dataset, out_dir, config, result=result, **kwargs):
        if on_event is not None:
            on_event(event)
    return result[0]
