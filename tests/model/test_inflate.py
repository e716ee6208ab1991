"""Starting a 3D configuration from a trained 2D one (``medseg train --inflate-from``).

The oracle is the 2D network itself: inflated, a 3D network that never pools along z must
give the 2D network's answer on a single slice (here: the shipped starter on a real chest CT
slice), and a 3D run started from a trained 2D model must start from a lower loss than one
started from random weights.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
import torch
from small_packages import tiny_plan

from medseg.cli import main
from medseg.errors import ModelError
from medseg.io.image_files import read_image
from medseg.model.datasets import open_dataset
from medseg.model.package import ModelPackage, load_package, save_package
from medseg.model.plan import Plan
from medseg.model.training import IterationEvent, TrainConfig, train
from medseg.model.training.inflate import check_inflatable, inflate_state
from medseg.model.unet import build_network

STARTER = Path(__file__).resolve().parents[2] / "resources" / "models" / "starter"
LABELS = {0: "background", 1: "body", 2: "lungs", 3: "bones"}


def with_z(plan: Plan, z_kernels: list[int], z_strides: list[int], patch_z: int, name: str = "3d") -> Plan:
    """``plan`` (2D) with a z axis: the given kernels and strides along z, in-plane unchanged."""
    return dataclasses.replace(
        plan, name=name, dim=3, patch_size=(patch_z, *plan.patch_size),
        strides=[[sz, *s] for sz, s in zip(z_strides, plan.strides)],
        kernel_sizes=[[kz, *k] for kz, k in zip(z_kernels, plan.kernel_sizes)],
        target_spacing_transposed=(5.0, *plan.target_spacing_transposed[1:]), mirror_axes=[0, 1, 2],
    )


def normalised_slice(plan: Plan, hu: np.ndarray) -> torch.Tensor:
    norm = plan.normalization
    clipped = np.clip(hu, norm["percentile_00_5"], norm["percentile_99_5"])
    return torch.from_numpy(((clipped - norm["mean"]) / norm["std"]).astype(np.float32))


def test_inflated_starter_gives_the_2d_answer_on_a_real_chest_slice(ct_dir: Path) -> None:
    starter = load_package(STARTER)
    flat = next(iter(starter.configurations.values()))
    state = starter.weights[flat.name][0]
    n = flat.num_stages
    # z kernels of 3 everywhere, no pooling along z: the off-centre taps start at zero
    deep = with_z(flat, [3] * n, [1] * n, 1)
    check_inflatable(flat, deep)
    net_2d = build_network(flat, len(starter.labels)).eval()
    net_2d.load_state_dict(state)
    net_3d = build_network(deep, len(starter.labels)).eval()
    net_3d.load_state_dict(inflate_state(state, net_3d), strict=True)

    chest = read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    hu = np.asarray(chest.array[24], dtype=np.float32)[::4, ::4]  # the whole slice at 2.3 mm, 128 x 128
    x = normalised_slice(flat, hu)
    with torch.no_grad():
        flat_logits = net_2d(x[None, None])
        deep_logits = net_3d(x[None, None, None])[:, :, 0]
    assert torch.allclose(flat_logits, deep_logits, atol=1e-4)
    labels = flat_logits.argmax(1)[0].numpy()
    assert np.array_equal(labels, deep_logits.argmax(1)[0].numpy())
    assert (labels == 2).mean() > 0.1  # the answer compared is a real one: the slice's lungs are found


def test_a_shallower_3d_plan_takes_the_2d_decoder_by_skip_level() -> None:
    starter = load_package(STARTER)
    flat = next(iter(starter.configurations.values()))
    state = starter.weights[flat.name][0]
    n = flat.num_stages
    # as the planner gives a thick-slice plan: z unpooled at first (kernel 1), one stage fewer
    shallow = dataclasses.replace(with_z(flat, [1] + [3] * (n - 1), [1, 1] + [2] * (n - 2), 16),
                                  features_per_stage=flat.features_per_stage[: n - 1],
                                  strides=[[1, 1, 1], [1, 2, 2]] + [[2, 2, 2]] * (n - 3),
                                  kernel_sizes=[[1, 3, 3]] + [[3, 3, 3]] * (n - 2),
                                  n_conv_per_stage_encoder=flat.n_conv_per_stage_encoder[: n - 1],
                                  n_conv_per_stage_decoder=flat.n_conv_per_stage_decoder[: n - 2])
    check_inflatable(flat, shallow)
    net = build_network(shallow, len(starter.labels))
    inflated = inflate_state(state, net)
    net.load_state_dict(inflated, strict=True)
    key = "encoder.stages.0.0.convs.0.conv.weight"  # z kernel 1: the 2D kernel as it is
    assert torch.equal(inflated[key][:, :, 0], state[key])
    deepest = inflated["decoder.stages.0.convs.0.conv.weight"]  # joins skip level n-3, as 2D decoder stage 1 does
    assert torch.equal(deepest[:, :, 1], state["decoder.stages.1.convs.0.conv.weight"])
    assert not deepest[:, :, 0].any() and not deepest[:, :, 2].any()
    up = inflated["decoder.transpconvs.0.weight"]
    assert all(torch.equal(up[:, :, z], state["decoder.transpconvs.1.weight"]) for z in range(up.shape[2]))
    head = inflated[f"decoder.seg_layers.{n - 3}.weight"]  # the full-resolution head
    assert torch.equal(head[:, :, 0], state[f"decoder.seg_layers.{n - 2}.weight"])


def test_plans_that_do_not_fit_are_refused_by_name() -> None:
    flat = next(iter(load_package(STARTER).configurations.values()))
    n = flat.num_stages
    deep = with_z(flat, [3] * n, [1] * n, 8, name="3d_thick")
    wider = dataclasses.replace(deep, features_per_stage=[32] * n)
    with pytest.raises(ModelError, match="features") as error:
        check_inflatable(flat, wider)
    assert "'3d_thick'" in str(error.value)
    deeper = dataclasses.replace(deep, features_per_stage=[*flat.features_per_stage, 64],
                                 strides=[*deep.strides, [2, 2, 2]], kernel_sizes=[*deep.kernel_sizes, [3, 3, 3]],
                                 n_conv_per_stage_encoder=[2] * (n + 1), n_conv_per_stage_decoder=[2] * n)
    with pytest.raises(ModelError, match=f"--stages {n}"):
        check_inflatable(flat, deeper)
    other_strides = dataclasses.replace(deep, strides=[[1, 1, 1]] + [[2, 1, 2]] * (n - 1))
    with pytest.raises(ModelError, match="in-plane strides"):
        check_inflatable(flat, other_strides)
    with pytest.raises(ModelError, match="from a 2D one"):
        check_inflatable(deep, deep)


def _small_dataset(ct_dir: Path, tmp_path: Path, labels: list[str]):
    manifest = tmp_path / "small.json"
    manifest.write_text(json.dumps({
        "name": "small", "data_root": str(ct_dir), "labels": labels,
        "cases": [{"name": "sm", "image": "totalsegmentator/example_ct_sm.nii.gz", "label_rule": "starter"}],
        "validation": []}))
    return open_dataset(manifest)


def _first_losses(events, count: int) -> list[float]:
    return [e.loss for e in events if isinstance(e, IterationEvent)][:count]


def test_a_3d_run_started_from_a_trained_2d_model_starts_lower(ct_dir: Path, tmp_path: Path) -> None:
    dataset = _small_dataset(ct_dir, tmp_path, ["body", "lungs", "bones"])
    flat = tiny_plan()
    list(train(dataset, tmp_path / "flat", TrainConfig(epochs=4, iterations_per_epoch=8, batch_size=4, seed=3),
               plan=flat))
    trained_2d = load_package(tmp_path / "flat")
    deep = with_z(flat, [1, 3, 3], [1, 1, 2], 8)
    config = TrainConfig(epochs=1, iterations_per_epoch=3, batch_size=2, seed=5)
    inflated_events = list(train(dataset, tmp_path / "inflated", config, plan=deep, inflate_from=trained_2d))
    scratch_events = list(train(dataset, tmp_path / "scratch", config, plan=deep))
    # same seed, same patches: only the start differs
    assert np.mean(_first_losses(inflated_events, 3)) < 0.85 * np.mean(_first_losses(scratch_events, 3))
    package = load_package(tmp_path / "inflated")
    assert package.provenance["inflated_from"] == trained_2d.name
    assert any("starts from the 2D configuration '2d'" in m for m in package.provenance["messages"])
    assert list(package.configurations) == ["3d"] and package.configurations["3d"].dim == 3


def test_inflation_refuses_other_labels_and_fine_tuning_at_once(ct_dir: Path, tmp_path: Path, capsys) -> None:
    flat = tiny_plan()
    torch.manual_seed(0)
    body_only = ModelPackage(name="body-only", configurations={"2d": flat}, labels={0: "background", 1: "body"},
                             weights={"2d": [build_network(flat, 2).state_dict()]})
    dataset = _small_dataset(ct_dir, tmp_path, ["body", "lungs", "bones"])
    config = TrainConfig(epochs=1, iterations_per_epoch=1, batch_size=2, seed=1)
    with pytest.raises(ModelError, match="labels background, body; this dataset has background, body, lungs, bones"):
        list(train(dataset, tmp_path / "x", config, plan=with_z(flat, [3] * 3, [1] * 3, 8), inflate_from=body_only))
    with pytest.raises(ModelError, match="not both"):
        list(train(dataset, tmp_path / "y", config, base_package=body_only, inflate_from=body_only))
    manifest = tmp_path / "small.json"
    # the CLI says which model has no 2D configuration, before any training
    package_dir = tmp_path / "deep_model"
    deep = with_z(flat, [3] * 3, [1] * 3, 8)
    save_package(ModelPackage(name="deep-only", configurations={"3d": deep}, labels=dict(LABELS),
                              weights={"3d": [build_network(deep, 4).state_dict()]}), package_dir)
    code = main(["train", str(manifest), "--out", str(tmp_path / "z"), "--inflate-from", str(package_dir),
                 "--epochs", "1", "--iterations", "1"])
    assert code != 0
    assert "'deep-only' has no 2D configuration to start from" in capsys.readouterr().err
