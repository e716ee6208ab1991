"""``medseg train DATASET --out MODEL [--from BASE] [--epochs N] [--device ...] [--resume]``.

Trains (or fine-tunes) a model package on a dataset (nnU-Net raw folder, image/label
folder, editor cases, or a dataset manifest .json) and prints progress with an ETA.
Runs unchanged under ``torchrun --nproc_per_node N -m medseg train ...`` (DDP; only rank 0
prints and writes).
"""

from __future__ import annotations

import argparse
import math
import os
import shlex
import time
from pathlib import Path
from typing import Any

from medseg.cli._console import add_threads_option, device_name, number, whole_number


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train", help="train or fine-tune a model on a labelled dataset",
        description="Train a resolution-adaptive U-Net (nnU-Net v2 recipe) on DATASET and write a medseg "
                    "model package to --out. With --from, fine-tune an existing package (a changed label "
                    "set replaces the output heads). Works under torchrun for multi-GPU/multi-process DDP.")
    parser.add_argument("dataset", help="nnU-Net raw folder, images/labels folder, editor cases, or a dataset .json")
    parser.add_argument("--out", required=True, help="model package folder to write")
    parser.add_argument("--from", dest="base", help="fine-tune from this model (an installed catalogue model, a "
                                                      "medseg package, an nnU-Net v2 result folder, or 'starter')")
    parser.add_argument("--epochs", type=whole_number(1), default=50)
    parser.add_argument("--iterations", type=whole_number(1), default=250, help="optimiser steps per epoch (default 250)")
    parser.add_argument("--batch-size", type=whole_number(1), help="global batch size (default: the plan's)")
    parser.add_argument("--device", default="auto", type=device_name,
                        help="auto (CUDA when present, the default), cuda, cuda:N or cpu; `medseg devices` lists them")
    parser.add_argument("--resume", action="store_true", help="continue from the last checkpoint")
    parser.add_argument("--data-root", help="root for relative paths in a dataset .json")
    parser.add_argument("--work-dir", help="checkpoint folder (default: OUT.training)")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    parser.add_argument("--lr", type=number(above=0, high=10), help="initial learning rate (default 1e-2 SGD, 1e-3 AdamW)")
    parser.add_argument("--seed", type=int, default=12345)
    parser.add_argument("--validate-every", type=whole_number(1), default=1, help="epochs between validations (default 1)")
    parser.add_argument("--no-augment", action="store_true", help="turn augmentation off")
    parser.add_argument("--tissue-shift", type=number(-1000, 1000), nargs=2, metavar=("LOW", "HIGH"),
                        help="augment: shift soft tissue (0-300 HU) by a random LOW..HIGH HU in half of the patches, "
                             "as contrast enhancement does (e.g. -20 60 to train on non-contrast CT for contrast CT)")
    parser.add_argument("--no-mirror", action="store_true",
                        help="no mirroring augmentation (for labels that differ left and right, e.g. liver vs spleen)")
    parser.add_argument("--no-amp", action="store_true",
                        help="full precision on CUDA (default there: mixed precision, float16 autocast with GradScaler)")
    parser.add_argument("--prefetch", type=whole_number(0), metavar="N",
                        help="threads preparing batches ahead of the step (default: 2 feeding a GPU, 0 on the CPU, "
                             "where the step uses every core; 0: in the loop); the batches are the same either way")
    parser.add_argument("--profile", metavar="DIR",
                        help="write a torch.profiler trace of a few iterations (Perfetto or TensorBoard) and the "
                             "run's phase table (load, preprocess, batches, network, validation, write) to DIR")
    add_threads_option(parser)  # per process
    plan = parser.add_argument_group("planning (ignored with --from: the base model's plan is kept)")
    plan.add_argument("--configuration", choices=("3d_fullres", "2d"), default="3d_fullres")
    plan.add_argument("--configuration-name", metavar="NAME",
                      help="name of the trained configuration (default: --configuration), e.g. 3d_thin")
    plan.add_argument("--target-spacing", nargs=3, type=number(0.05, 50), metavar=("Z", "Y", "X"),
                      help="plan at this spacing (mm) instead of the dataset's median")
    plan.add_argument("--memory-gb", type=number(above=0, high=4096), default=8.0, help="memory the patch is sized for (default 8)")
    plan.add_argument("--base-features", type=whole_number(1), help="channels of the first stage (nnU-Net: 32)")
    plan.add_argument("--max-features", type=whole_number(1), help="cap on channels per stage (nnU-Net: 320)")
    plan.add_argument("--stages", type=whole_number(1), help="at most this many resolution stages")
    plan.add_argument("--inflate-from", metavar="MODEL2D",
                      help="start the planned 3D configuration from this model's 2D configuration: its kernels "
                           "become the centre slice of the 3D kernels (same labels, features and in-plane strides)")
    parser.add_argument("--json", action="store_true",
                        help="print the event stream, one JSON object per line (schema: README, 'Machine-readable "
                             "progress'): started, iteration, epoch, checkpoint, message, fallback, done/failed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.cli._events import EventStream

    is_main = int(os.environ.get("RANK", "0")) == 0
    events = EventStream(bool(args.json) and is_main)
    with events.failures():
        return _train(args, is_main, events)


def _train(args: argparse.Namespace, is_main: bool, events) -> int:
    from medseg.workflows.training import (
        EpochEvent,
        FallbackEvent,
        IterationEvent,
        MessageEvent,
        PreparingEvent,
        TrainRequest,
        event_record,
        start_training,
    )

    settings, plan = run_request_settings(args)
    command = "medseg " + shlex.join(args.argv)
    run = start_training(TrainRequest(args.dataset, args.out, settings, plan, base=args.base,
                                      inflate_from=args.inflate_from, data_root=args.data_root, resume=args.resume,
                                      work_dir=args.work_dir, profile=args.profile,
                                      provenance={"training_command": command}))
    dataset, config = run.dataset, run.config
    say = (lambda text: None) if args.json or not is_main else (lambda text: print(text, flush=True))
    say(f"dataset {dataset.name!r}: {len(dataset.training_specs)} training, {len(dataset.validation_specs)} "
        f"validation cases; labels {', '.join(n for v, n in sorted(dataset.labels.items()) if v)}")
    started = time.monotonic()
    first_step: tuple[float, int] | None = None  # ETA from the training steps only (not the loading)
    last_print = 0.0
    generator = run.events
    result = None
    while True:
        try:
            event = next(generator)
        except StopIteration as stop:
            result = stop.value
            break
        if not is_main:
            continue
        events.emit_record(event_record(event))
        if isinstance(event, (MessageEvent, FallbackEvent)):
            say(event.text)
        elif isinstance(event, PreparingEvent):
            say(f"preparing the dataset ({event.done}/{event.total}): {event.text}")
        elif isinstance(event, IterationEvent):
            now = time.monotonic()
            if first_step is None:
                first_step = (now, event.step)
            if now - last_print >= 10 or event.step == first_step[1]:
                last_print = now
                done = event.step - first_step[1]
                eta = (now - first_step[0]) / done * (event.total_steps - event.step - 1) if done else math.nan
                say(f"  epoch {event.epoch + 1} step {event.iteration + 1}/{config.iterations_per_epoch} "
                    f"loss {event.loss:.4f} lr {event.learning_rate:.2e} ETA "
                    f"{_hms(eta) if not math.isnan(eta) else '...'}")
        elif isinstance(event, EpochEvent):
            dice = " ".join(f"{k} {v:.3f}" for k, v in event.validation_dice.items())
            say(f"epoch {event.epoch + 1}/{event.epochs}: loss {event.train_loss:.4f}"
                f"{'  dice ' + dice if dice else ''}{'  (best)' if event.is_best else ''}  "
                f"{event.seconds:.0f} s, {event.patches_per_second:.2f} patches/s, ETA {_hms(event.eta_seconds)}")
    if is_main:
        seconds = time.monotonic() - started
        events.emit("done", package=str(result.package_path) if result.package_path else None,
                    best_epoch=result.best_epoch, best_mean_dice=result.best_mean_dice, seconds=seconds,
                    device=result.device, command=command)
        say(f"done in {_hms(seconds)}: model package {Path(args.out)}")
    return 0


def run_request_settings(args: argparse.Namespace) -> tuple[Any, Any]:
    """The TrainingSettings and PlanSettings (medseg.workflows.training) that ``medseg train``'s arguments say."""
    from medseg.workflows.training import PlanSettings, TrainingSettings

    settings = TrainingSettings(
        epochs=args.epochs, iterations=args.iterations, batch_size=args.batch_size, optimizer=args.optimizer,
        learning_rate=args.lr, seed=args.seed, device=args.device, amp=not args.no_amp,
        validate_every=args.validate_every, augment=not args.no_augment, mirror=not args.no_mirror,
        tissue_shift_hu=tuple(args.tissue_shift) if args.tissue_shift else None, prefetch=args.prefetch)
    plan = PlanSettings(configuration=args.configuration, target_spacing_zyx=args.target_spacing,
                        memory_gb=args.memory_gb, base_features=args.base_features, max_features=args.max_features,
                        stages=args.stages, name=args.configuration_name)
    return settings, plan


def run_settings(args: argparse.Namespace) -> tuple[Any, dict[str, Any]]:
    """The TrainConfig and the planning options that ``medseg train``'s arguments say (also for scripts that
    run the same recipe on other data, e.g. benchmarks/starter_v2_gpu.py)."""
    from medseg.workflows.training import train_config

    settings, plan = run_request_settings(args)
    return train_config(settings), plan.options()


def _hms(seconds: float) -> str:
    seconds = max(0, int(seconds))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}"
