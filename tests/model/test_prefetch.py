"""Batches prepared ahead in worker threads are the in-loop sampler's batches (issue #27).

Real patches: example_ct_sm with the starter's rule labels, on a 3D plan, every
augmentation forced on (so each random decision of the sampler is exercised); then two
short trainings, in-loop against prefetched, must give the same losses and weights.
"""

from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path

import pytest
import torch
from infer_fixtures import small_model_folder
from small_packages import tiny_plan

from medseg.io import load
from medseg.model.augment import AugmentConfig
from medseg.model.datasets import Case, open_dataset
from medseg.model.nnunet_import import import_nnunet
from medseg.model.rule_labels import rule_label_map
from medseg.model.train import (
    CHECKPOINT_LAST,
    DistributedContext,
    IterationEvent,
    StartedEvent,
    TrainConfig,
    load_checkpoint,
    local_batch,
    prepare_case,
    train,
)
from medseg.model.training.prefetch import BatchPrefetcher
from medseg.model.training.sampling import host_batch

torch.set_num_threads(2)
EVERY_AUGMENTATION = AugmentConfig(p_rotation=1.0, p_scale=1.0, p_noise=1.0, p_brightness=1.0, p_contrast=1.0,
                                   p_gamma=1.0, p_gamma_inverted=0.5, p_mirror=0.5)


@pytest.fixture(scope="module")
def case_and_plan(ct_dir, tmp_path_factory):
    plan = import_nnunet(small_model_folder(tmp_path_factory.mktemp("nnunet"))).configurations["3d_fullres"]
    image = load(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    return prepare_case(Case("sm", image, rule_label_map(image)), plan), plan


def test_prefetched_batches_equal_the_in_loop_batches(case_and_plan):
    case, plan = case_and_plan
    config = TrainConfig(seed=4, augmentation=EVERY_AUGMENTATION)
    ctx = DistributedContext(0, 1, torch.device("cpu"))
    keys = [(epoch, iteration) for epoch in range(2) for iteration in range(4)]
    in_loop = [local_batch([case], plan, config, 3, epoch, iteration, ctx) for epoch, iteration in keys]
    with BatchPrefetcher(lambda e, i: host_batch([case], plan, config, 3, e, i, ctx), keys, ctx.device,
                         workers=2, depth=4) as prefetcher:
        ahead = [prefetcher.get(*key) for key in keys]
    assert len({float(images.sum()) for images, _ in in_loop}) == len(keys)  # every batch differs
    for (images, labels), (expected_images, expected_labels) in zip(ahead, in_loop):
        assert torch.equal(images, expected_images) and torch.equal(labels, expected_labels)


def test_batches_are_asked_for_in_order(case_and_plan):
    case, plan = case_and_plan
    config = TrainConfig(seed=4)
    ctx = DistributedContext(0, 1, torch.device("cpu"))
    with BatchPrefetcher(lambda e, i: host_batch([case], plan, config, 2, e, i, ctx), [(0, 0), (0, 1)], ctx.device,
                         workers=1) as prefetcher:
        with pytest.raises(RuntimeError, match="out of order"):
            prefetcher.get(0, 1)


@pytest.fixture()
def small_dataset(ct_dir: Path, tmp_path: Path):
    manifest = tmp_path / "small.json"
    manifest.write_text(json.dumps({
        "name": "small", "data_root": str(ct_dir / "totalsegmentator"), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label_rule": "starter"}]}))
    return open_dataset(manifest)


def _budget_of(count: int, monkeypatch):
    from medseg import threads

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # put back after configure() writes them
    before, torch_before = threads.budget_count(), torch.get_num_threads()
    threads.configure(count, threads.FROM_SETTING)
    yield
    threads.BUDGET.set_count(before)
    torch.set_num_threads(torch_before)


@pytest.fixture
def one_thread_budget(monkeypatch):
    """medseg's thread budget at one thread for one test, then put back: the step computes with one thread
    with or without prefetch workers beside it (which hold a thread each of a larger budget), so the two
    runs compared below round their reductions the same way."""
    yield from _budget_of(1, monkeypatch)


@pytest.fixture
def two_thread_budget(monkeypatch):
    yield from _budget_of(2, monkeypatch)


def test_training_with_prefetching_equals_training_in_the_loop(small_dataset, tmp_path, one_thread_budget):
    base = TrainConfig(epochs=2, iterations_per_epoch=3, batch_size=3, seed=9, augmentation=EVERY_AUGMENTATION)
    runs = {}
    for workers in (0, 2):
        events = list(train(small_dataset, tmp_path / f"w{workers}", dataclasses.replace(base, prefetch=workers),
                            plan=tiny_plan()))
        started = next(e for e in events if isinstance(e, StartedEvent))
        assert started.prefetch_workers == workers and not started.amp  # the CPU: full precision
        runs[workers] = ([e.loss for e in events if isinstance(e, IterationEvent)],
                         load_checkpoint(tmp_path / f"w{workers}.training" / CHECKPOINT_LAST)[0])
    (losses, weights), (losses_ahead, weights_ahead) = runs[0], runs[2]
    assert len(losses) == 6 and losses_ahead == losses
    for key in weights:
        assert torch.equal(weights_ahead[key], weights[key]), key


def test_medseg_train_uses_amp_and_prefetching_unless_told_not_to():
    from medseg.cli import build_parser
    from medseg.cli.train import run_settings

    config, _ = run_settings(build_parser().parse_args(["train", "set.json", "--out", "model", "--device", "cuda"]))
    assert config.amp and config.prefetch is None  # AMP on CUDA; 2 prefetch threads feeding a GPU
    config, _ = run_settings(build_parser().parse_args(["train", "set.json", "--out", "model", "--device", "cuda",
                                                        "--no-amp", "--prefetch", "0"]))
    assert not config.amp and config.prefetch == 0


def test_training_with_prefetching_repeats_bit_for_bit(small_dataset, tmp_path, two_thread_budget):
    """Two threads, one prefetch worker: the worker's thread is taken from the step for the whole run, not
    per batch, so the step computes with the same count at every step and the run repeats exactly (with the
    thread taken per batch, the count followed the timing of the batches and the losses drifted)."""
    config = TrainConfig(epochs=2, iterations_per_epoch=3, batch_size=3, seed=9, augmentation=EVERY_AUGMENTATION,
                         prefetch=1)
    runs = []
    for attempt in range(2):
        events = list(train(small_dataset, tmp_path / f"run{attempt}", config, plan=tiny_plan()))
        runs.append(([e.loss for e in events if isinstance(e, IterationEvent)],
                     load_checkpoint(tmp_path / f"run{attempt}.training" / CHECKPOINT_LAST)[0]))
    (losses, weights), (again, weights_again) = runs
    assert len(losses) == 6 and again == losses
    for key in weights:
        assert torch.equal(weights_again[key], weights[key]), key


def test_a_cpu_run_draws_its_batches_in_the_loop_and_steps_with_the_whole_budget(small_dataset, tmp_path,
                                                                                  two_thread_budget):
    """On the CPU no prefetch worker by default: one would hold a thread of the budget for the whole run, and
    the step (computed in this thread, between the events) would have one thread of two at every step; the
    liver fine-tune took 1.7x as long so, for a sampler that costs about 2 % of a CPU step."""
    config = TrainConfig(epochs=1, iterations_per_epoch=3, batch_size=3, seed=9, device="cpu")
    workers, step_threads = None, []
    for event in train(small_dataset, tmp_path / "run", config, plan=tiny_plan()):
        if isinstance(event, StartedEvent):
            workers = event.prefetch_workers
        elif isinstance(event, IterationEvent):
            step_threads.append(torch.get_num_threads())
    assert workers == 0 and step_threads == [2, 2, 2]
