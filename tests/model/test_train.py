"""Training engine on a real (small) CT: loss, augmentation geometry, sampling, checkpoints, resume, cancel."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from small_packages import tiny_plan

from medseg.errors import Cancelled, DatasetError
from medseg.model.augment import NO_AUGMENTATION, AugmentConfig, augment_intensity, augmented_patch, extract_patch
from medseg.model.datasets import open_dataset
from medseg.model.losses import DeepSupervisionLoss, DiceCELoss, deep_supervision_weights
from medseg.model.package import load_package
from medseg.model.train import (
    CHECKPOINT_LAST,
    DistributedContext,
    EpochEvent,
    IterationEvent,
    MessageEvent,
    TrainConfig,
    adapt_state_to_labels,
    draw_sample,
    load_checkpoint,
    pick_case,
    prepare_case,
    run_training,
    sample_rng,
    train,
)
from medseg.model.unet import build_network
from medseg.progress import CancelToken

TS = "totalsegmentator"


@pytest.fixture()
def small_dataset(ct_dir: Path, tmp_path: Path):
    manifest = tmp_path / "small.json"
    manifest.write_text(json.dumps({
        "name": "small", "data_root": str(ct_dir), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": f"{TS}/example_ct_sm.nii.gz", "label_rule": "starter"},
                  {"name": "ct3", "image": "dcmqi_ct3slice_masks/image", "label_rule": "starter"}],
        "validation": ["ct3"]}))
    return open_dataset(manifest)


# --- loss ---------------------------------------------------------------------------------------


def test_deep_supervision_weights_are_nnunets() -> None:
    assert deep_supervision_weights(4) == pytest.approx([1 / 1.75, 0.5 / 1.75, 0.25 / 1.75, 0.0])
    assert deep_supervision_weights(1) == [1.0]


def test_dice_ce_rewards_the_right_answer() -> None:
    target = torch.zeros(2, 1, 16, 16, dtype=torch.long)
    target[:, :, 4:12, 4:12] = 1
    target[1, :, 0:3, 0:3] = 2
    perfect = torch.nn.functional.one_hot(target[:, 0], 3).permute(0, 3, 1, 2).float() * 50
    wrong = perfect.roll(shifts=5, dims=2)
    loss = DiceCELoss()
    assert loss(perfect, target) < 0.01
    assert loss(wrong, target) > 1.0
    # with deep supervision the half-resolution output is scored against a nearest-downsampled target
    outputs = [perfect, perfect[:, :, ::2, ::2]]
    assert DeepSupervisionLoss()(outputs, target) < 0.02


# --- augmentation geometry ------------------------------------------------------------------------


def test_patch_extraction_conventions() -> None:
    image = torch.arange(20 * 30, dtype=torch.float32).reshape(1, 20, 30)
    label = (image > 300).to(torch.uint8)
    sliced, sliced_label = extract_patch(image, label, (10, 15), (8, 8), None, -1.0)
    assert torch.equal(sliced, image[:, 6:14, 11:19])
    # The interpolating path with an identity transform reads exactly the same voxels ...
    resampled, resampled_label = extract_patch(image, label, (10, 15), (8, 8), np.eye(2), -1.0)
    assert torch.allclose(resampled, sliced, atol=1e-3)
    assert torch.equal(resampled_label, sliced_label)
    # ... a 90 degree rotation is a rot90 of the patch, and outside the image reads the pad value.
    # The matrix maps patch offsets (dy, dx) to image offsets: output (i, j) reads the image at
    # centre + R @ (i - 3, j - 3) = centre + (-(j - 3), i - 3), i.e. out[i, j] = upright[6 - j, i],
    # which is numpy's rot90 by -1 (clockwise) over the (y, x) axes.
    rotation = np.array([[0.0, -1.0], [1.0, 0.0]])
    rotated, _ = extract_patch(image, label, (10, 15), (7, 7), rotation, -1.0)
    upright, _ = extract_patch(image, label, (10, 15), (7, 7), None, -1.0)
    expected = torch.stack([torch.stack([upright[0, 6 - j, i] for j in range(7)]) for i in range(7)])[None]
    assert torch.allclose(rotated, expected, atol=1e-3)
    assert not torch.allclose(rotated, torch.rot90(upright, 1, dims=(1, 2)), atol=1e-3)  # the direction matters
    corner, corner_label = extract_patch(image, label, (0, 0), (8, 8), None, -1.0)
    assert corner[0, 0, 0] == -1.0 and corner_label[0, 0, 0] == 0


def test_augmentation_is_reproducible_per_seed() -> None:
    image = torch.randn(1, 32, 32, 32)
    label = (image > 1).to(torch.uint8)
    config = AugmentConfig(p_rotation=1.0, p_scale=1.0, p_noise=1.0, p_gamma=1.0)
    first = augmented_patch(image, label, (16, 16, 16), (16, 16, 16), (3, 1, 1), -3.0,
                            np.random.default_rng([1, 2, 3]), config)
    again = augmented_patch(image, label, (16, 16, 16), (16, 16, 16), (3, 1, 1), -3.0,
                            np.random.default_rng([1, 2, 3]), config)
    other = augmented_patch(image, label, (16, 16, 16), (16, 16, 16), (3, 1, 1), -3.0,
                            np.random.default_rng([1, 2, 4]), config)
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])
    assert set(torch.unique(first[1]).tolist()) <= {0, 1}  # labels stay labels (nearest neighbour)


def test_tissue_shift_moves_soft_tissue_only() -> None:
    mean, std = -100.0, 400.0
    hu = torch.tensor([[-1000.0, -100.0, 50.0, 250.0, 1000.0]])
    config = AugmentConfig(p_noise=0, p_brightness=0, p_contrast=0, p_gamma=0, p_gamma_inverted=0,
                           p_tissue_shift=1.0, tissue_shift_hu=(40.0, 40.0), ct_mean_std=(mean, std))
    shifted = augment_intensity((hu - mean) / std, np.random.default_rng(0), config) * std + mean
    assert torch.allclose(shifted, torch.tensor([[-1000.0, -100.0, 90.0, 290.0, 1000.0]]), atol=1e-3)
    off = dataclasses.replace(config, p_tissue_shift=0.0)  # the default: nnU-Net's augmentation unchanged
    assert torch.equal(augment_intensity((hu - mean) / std, np.random.default_rng(0), off), (hu - mean) / std)


def test_foreground_oversampling_last_third(small_dataset) -> None:
    plan = tiny_plan()
    case = prepare_case(small_dataset.load(small_dataset.training_specs[0]), plan)
    config = TrainConfig(augmentation=NO_AUGMENTATION, seed=7)
    batch = 6  # indices 4 and 5 (the last third) are forced onto a labelled voxel
    for iteration in range(20):
        for index in (4, 5):
            _, label = draw_sample([case], plan, config, batch, 0, iteration, index)
            assert label[0, 24, 24] > 0  # the patch centre is foreground
    # and the sampled centre of a random patch is background some of the time (air around the body)
    centres = [int(draw_sample([case], plan, config, batch, 0, i, 0)[1][0, 24, 24]) for i in range(40)]
    assert 0 in centres


def test_case_weights_set_how_often_a_case_is_drawn(small_dataset, tmp_path: Path, ct_dir: Path) -> None:
    plan = tiny_plan()
    single = prepare_case(small_dataset.load(small_dataset.validation_specs[0]), plan, weight=1.0)  # 3 slices
    volume = prepare_case(small_dataset.load(small_dataset.training_specs[0]), plan, weight=4.0)  # 30 slices
    picks = [pick_case([single, volume], sample_rng(5, 0, i, 0)) for i in range(1000)]
    share = sum(case is volume for case in picks) / len(picks)
    assert 0.75 < share < 0.85, share  # 4 : 1 -> 80 %
    # Equal weights: uniform, as nnU-Net draws its cases; three weights: in their proportion. Counts of
    # 3000 draws against the binomial expectation (within 5 standard deviations).
    for weights in ((1.0, 1.0, 1.0), (1.0, 2.0, 5.0)):
        three = [dataclasses.replace(case, weight=w) for case, w in zip((single, volume, single), weights)]
        drawn = [pick_case(three, sample_rng(11, 0, i, 0)) for i in range(3000)]
        for case, weight in zip(three, weights):
            p = weight / sum(weights)
            count = sum(d is case for d in drawn)
            assert abs(count - 3000 * p) < 5 * math.sqrt(3000 * p * (1 - p)), (weights, weight, count)
    (tmp_path / "w.json").write_text(json.dumps({
        "data_root": str(ct_dir), "labels": ["body"],
        "cases": [{"name": "x", "image": f"{TS}/example_ct_sm.nii.gz", "label_rule": "starter", "weight": 0}]}))
    with pytest.raises(DatasetError, match="weight must be a positive number"):
        open_dataset(tmp_path / "w.json")


# --- the loop ----------------------------------------------------------------------------------------


def _events(dataset, out: Path, config: TrainConfig, **kwargs):
    return list(train(dataset, out, config, plan=tiny_plan(), **kwargs))


def test_training_learns_checkpoints_and_exports(small_dataset, tmp_path: Path) -> None:
    config = TrainConfig(epochs=3, iterations_per_epoch=8, batch_size=4, seed=3)
    events = _events(small_dataset, tmp_path / "model", config)
    iterations = [e for e in events if isinstance(e, IterationEvent)]
    epochs = [e for e in events if isinstance(e, EpochEvent)]
    assert len(iterations) == 24 and len(epochs) == 3
    assert np.mean([e.loss for e in iterations[-8:]]) < np.mean([e.loss for e in iterations[:8]])
    assert iterations[-1].learning_rate < iterations[0].learning_rate  # poly decay
    assert set(epochs[-1].validation_dice) == {"body", "lungs", "bones"}
    assert epochs[-1].validation_dice["body"] > 0.5  # sliding-window validation on the held-out case
    package = load_package(tmp_path / "model")
    assert package.names == {0: "background", 1: "body", 2: "lungs", 3: "bones"}
    assert package.provenance["dataset"]["validation_cases"] == ["ct3"]
    history = json.loads((tmp_path / "model.training" / "history.json").read_text())
    assert [h["epoch"] for h in history] == [0, 1, 2]


def test_resume_continues_exactly_and_cancel_keeps_last_checkpoint(small_dataset, tmp_path: Path) -> None:
    straight = TrainConfig(epochs=2, iterations_per_epoch=3, batch_size=4, seed=11)
    small_dataset.validation = []  # speed: no validation needed here
    _events(small_dataset, tmp_path / "a", straight)
    final_a, _, meta_a = load_checkpoint(tmp_path / "a.training" / CHECKPOINT_LAST)
    assert meta_a["epoch"] == 1

    # Run B is cancelled during its second epoch: the checkpoint of epoch 1 survives intact.
    cancel = CancelToken()
    seen = []
    with pytest.raises(Cancelled):
        for event in train(small_dataset, tmp_path / "b", straight, plan=tiny_plan(), cancel=cancel):
            seen.append(event)
            if isinstance(event, IterationEvent) and event.epoch == 1 and event.iteration == 1:
                cancel.cancel()
    after_cancel, _, meta_b = load_checkpoint(tmp_path / "b.training" / CHECKPOINT_LAST)
    assert meta_b["epoch"] == 0
    assert not list((tmp_path / "b.training").glob("*.tmp"))
    assert not (tmp_path / "b").exists()  # no half-made package

    # Resuming B finishes the run with the same weights as the uninterrupted run A.
    events = _events(small_dataset, tmp_path / "b", straight, resume=True)
    assert any(isinstance(e, MessageEvent) and "resumed" in e.text for e in events)
    final_b, _, _ = load_checkpoint(tmp_path / "b.training" / CHECKPOINT_LAST)
    for key in final_a:
        assert torch.allclose(final_a[key], final_b[key], atol=1e-6), key


def test_fine_tuning_with_a_new_label_replaces_the_heads(small_dataset, tmp_path: Path, ct_dir: Path) -> None:
    plan = tiny_plan()
    torch.manual_seed(0)
    base = build_network(plan, 4, deep_supervision=True)
    state = {k: v.clone() for k, v in base.state_dict().items()}
    new_labels = {0: "background", 1: "liver", 2: "body", 3: "bones"}
    target = build_network(plan, 4, deep_supervision=True)
    adapted, message = adapt_state_to_labels(state, target, {0: "background", 1: "body", 2: "lungs", 3: "bones"},
                                             new_labels)
    assert message is not None and "output heads replaced" in message and "liver" in message and "lungs" in message
    head = "decoder.seg_layers.1.weight"
    assert torch.equal(adapted[head][2], state[head][1])  # body keeps its trained row
    assert torch.equal(adapted[head][3], state[head][3])  # bones too
    assert not torch.equal(adapted[head][1], state[head][1])  # liver is new
    encoder = "encoder.stages.0.0.convs.0.conv.weight"
    assert torch.equal(adapted[encoder], state[encoder])
    same, none = adapt_state_to_labels(state, target, new_labels, new_labels)
    assert none is None and same.keys() == state.keys()

    # End to end: a package fine-tuned on a dataset with one more label says what it did.
    config = TrainConfig(epochs=1, iterations_per_epoch=2, batch_size=4, seed=1)
    small_dataset.validation = []
    run_training(small_dataset, tmp_path / "base", config, plan=plan)
    base_package = load_package(tmp_path / "base")
    manifest = tmp_path / "liver.json"
    manifest.write_text(json.dumps({
        "data_root": str(ct_dir / TS), "labels": ["body", "lungs", "bones", "liver"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label": "example_seg.nii.gz",
                   "label_values": {"5": "liver"}, "label_rule": "starter"}]}))
    result = run_training(open_dataset(manifest), tmp_path / "tuned", config, base_package=base_package)
    assert any("output heads replaced" in m for m in result.messages)
    tuned = load_package(tmp_path / "tuned")
    assert tuned.names[4] == "liver" and tuned.configurations["2d"].patch_size == (48, 48)
    assert math.isnan(result.best_mean_dice)  # no validation cases: the final weights are kept


def test_distributed_context_defaults_to_one_process() -> None:
    context = DistributedContext()
    assert context.is_main and not context.distributed


def test_medseg_plans_see_every_image_in_one_orientation(ct_dir: Path) -> None:
    """A RAS NIfTI and its LPS twin (same voxels, axes reversed) get the same segmentation."""
    from medseg.io import load
    from medseg.io.orientation import reorientation_to, reoriented
    from medseg.model.infer import segment
    from medseg.model.package import ModelPackage

    ras = load(ct_dir / TS / "example_ct_sm.nii.gz")
    change = reorientation_to(ras, "LPS")
    lps = reoriented(ras, change)
    assert not np.array_equal(lps.array, ras.array)
    results = {}
    for orientation in (None, "LPS"):
        plan = dataclasses.replace(tiny_plan(), orientation=orientation)
        torch.manual_seed(0)
        state = build_network(plan, 4, deep_supervision=False).state_dict()
        package = ModelPackage("random", {"2d": plan}, {0: "background", 1: "a", 2: "b", 3: "c"}, weights={"2d": [state]})
        on_ras = segment(ras, package, device="cpu").label_map
        on_lps = segment(lps, package, device="cpu").label_map
        assert on_ras.same_grid(ras) and on_lps.same_grid(lps)  # results are on each input's own grid
        results[orientation] = np.mean(change.apply(on_ras.array) == on_lps.array)
    assert results["LPS"] == 1.0
    assert results[None] < 0.99  # read as stored, the random network sees two different images


def test_fine_tuning_a_model_of_several_configurations_takes_the_one_named(small_dataset, tmp_path: Path) -> None:
    import dataclasses

    from medseg.errors import ModelError
    from medseg.model.package import ModelPackage

    first, second = tiny_plan(), dataclasses.replace(tiny_plan(), name="2d_wide", patch_size=(64, 64))
    torch.manual_seed(0)
    labels = {0: "background", 1: "body", 2: "lungs", 3: "bones"}
    base = ModelPackage(name="two", configurations={"2d": first, "2d_wide": second}, labels=labels,
                        weights={plan.name: [build_network(plan, 4).state_dict()] for plan in (first, second)})
    config = TrainConfig(epochs=1, iterations_per_epoch=1, batch_size=2, seed=1)
    small_dataset.validation = []
    result = run_training(small_dataset, tmp_path / "tuned", config, base_package=base,
                          plan_options={"name": "2d_wide"})
    assert any("configuration 2d_wide" in m for m in result.messages)
    assert list(load_package(tmp_path / "tuned").configurations) == ["2d_wide"]
    with pytest.raises(ModelError, match="no configuration '3d_thin'") as error:
        run_training(small_dataset, tmp_path / "none", config, base_package=base, plan_options={"name": "3d_thin"})
    assert "2d, 2d_wide" in str(error.value.hint)
    # nothing named (the CLI's default --configuration 3d_fullres is not one of them): the first
    result = run_training(small_dataset, tmp_path / "first", config, base_package=base,
                          plan_options={"configuration": "3d_fullres"})
    assert list(load_package(tmp_path / "first").configurations) == ["2d"]
