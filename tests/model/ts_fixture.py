"""Random weights in TotalSegmentator 2.18.0's exact on-disk layout, made with nnU-Net's own classes.

``make_totalseg_weights(root, dataset_ids)`` writes, as TotalSegmentator's weights folder holds them:

    root/Dataset297_TotalSegmentator_total_3mm_1559subj/nnUNetTrainer_4000epochs_NoMirroring__nnUNetPlans__3d_fullres/
        dataset.json    TotalSegmentator's class names, reader NibabelIOWithReorient
        plans.json      old-style nnU-Net plans (no 'architecture' key), spacing = the task's
        fold_0/checkpoint_final.pth   nnU-Net's PlainConvUNet, seeded, as nnUNetTrainer saves it

The networks are small (CI time), the layout and every key are TotalSegmentator's. The last layer is
scaled so that many classes win somewhere and ties are rare.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

import torch
from nnunet_fixture import build_nnunet_network, fixture_plans, training_checkpoint

from medseg.model.totalseg.classes import DATASETS, part_labels

# Plausible CT foreground statistics, a little different per dataset (each part normalises on its own).
_INTENSITY = {"max": 3071.0, "mean": 90.0, "median": 80.0, "min": -1024.0, "percentile_00_5": -980.0,
              "percentile_99_5": 1500.0, "std": 300.0}


# Raises a 1.5 mm part's background score: with random weights every part predicts foreground almost
# everywhere, and the last part (ribs) would overwrite the other four; TotalSegmentator's real parts
# each cover their own structures only.
PART_BACKGROUND_BIAS = 100.0


def make_totalseg_weights(root: Path, dataset_ids: Sequence[int], *, patch_size: Sequence[int] = (48, 48, 48),
                          n_stages: int = 4, base_features: int = 4, seed: int = 0, logit_scale: float = 30.0,
                          background_bias: float | None = None) -> Path:
    root = Path(root)
    for dataset_id in dataset_ids:
        dataset = DATASETS[dataset_id]
        intensity = dict(_INTENSITY, mean=_INTENSITY["mean"] + 5 * (dataset_id % 10),
                         std=_INTENSITY["std"] + 7 * (dataset_id % 10))
        spacing = (dataset.spacing_mm,) * 3
        current = fixture_plans(spacing, patch_size, n_stages, base_features, "3d_fullres", intensity, "current")
        legacy = fixture_plans(spacing, patch_size, n_stages, base_features, "3d_fullres", intensity, "legacy")
        for plans in (current, legacy):  # nnU-Net's planner copies dataset.json's reader into the plans
            plans["dataset_name"] = dataset.folder
            plans["image_reader_writer"] = "NibabelIOWithReorient"
        names = ["background", *part_labels(dataset).values()]
        dataset_json = {"channel_names": {"0": "CT"}, "labels": {name: value for value, name in enumerate(names)},
                        "numTraining": 1559, "file_ending": ".nii.gz",
                        "overwrite_image_reader_writer": "NibabelIOWithReorient"}
        folder = root / dataset.folder / f"{dataset.trainer}__nnUNetPlans__3d_fullres"
        (folder / "fold_0").mkdir(parents=True, exist_ok=True)
        (folder / "plans.json").write_text(json.dumps(legacy, indent=2))
        (folder / "dataset.json").write_text(json.dumps(dataset_json, indent=2))
        network = build_nnunet_network(current, "3d_fullres", len(names), seed=seed * 1000 + dataset_id)
        with torch.no_grad():
            generator = torch.Generator().manual_seed(seed + dataset_id)
            for layer in network.decoder.seg_layers:
                layer.weight.mul_(logit_scale)
                layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator))
                if dataset.label_count < 117:  # a part: background wins often enough for the later parts not to
                    layer.bias[0] += PART_BACKGROUND_BIAS if background_bias is None else background_bias  # cover all
        checkpoint = training_checkpoint(network, legacy, dataset_json, "3d_fullres", 0, dataset.trainer, 3)
        checkpoint["inference_allowed_mirroring_axes"] = None  # the NoMirroring trainers
        torch.save(checkpoint, folder / "fold_0" / "checkpoint_final.pth")
    return root


def make_task_weights(root: Path, task: str, *, modes: Sequence[str] | None = None, helpers: bool = True,
                      patch_size: Sequence[int] = (32, 32, 32), n_stages: int = 3, base_features: int = 4,
                      seed: int = 0, logit_scale: float = 30.0, unset_spacing: Sequence[float] = (2.0, 1.0, 1.0),
                      background_bias: dict[int, float] | None = None, folds: Sequence[int] = (0,),
                      favour: dict[int, int] | None = None) -> Path:
    """Random weights for any TotalSegmentator CT task in its exact layout, from medseg's copy of its task
    table (folder, trainer, plans and nnU-Net configuration names, class values): the task's modes and,
    with ``helpers``, the runs that crop or refine it. ``unset_spacing`` (z, y, x) is the plans spacing of
    a network TotalSegmentator does not resample for (its real plans are not public).
    ``background_bias``: dataset -> extra background score (a large one: the network finds nothing);
    ``favour``: dataset -> a class value that wins everywhere (a crop network that finds its structure)."""
    from medseg.model.totalseg.convert import expected_values
    from medseg.model.totalseg.tasks import required_runs, task_spec

    root = Path(root)
    spec = task_spec(task)
    chosen = [m.configuration for m in spec.modes.values() if modes is None or m.name in modes]
    runs = required_runs(task, chosen) if helpers else [(task, m) for m in spec.modes if modes is None or m in modes]
    for name, mode_name in runs:
        owner = task_spec(name)
        mode = owner.modes[mode_name]
        for network in mode.networks:
            values = expected_values(network, owner)
            names = ["background"] + [values[v] for v in sorted(values)]
            spacing = tuple(reversed(mode.resample)) if mode.resample else tuple(unset_spacing)
            intensity = dict(_INTENSITY, mean=_INTENSITY["mean"] + 5 * (network.dataset % 10))
            config = mode.nnunet_configuration
            current = fixture_plans(spacing, patch_size, n_stages, base_features, config, intensity, "current")
            legacy = fixture_plans(spacing, patch_size, n_stages, base_features, config, intensity, "legacy")
            for plans in (current, legacy):
                plans["dataset_name"] = network.folder
                plans["plans_name"] = mode.plans
                plans["image_reader_writer"] = "NibabelIOWithReorient"
            dataset_json = {"channel_names": {"0": "CT"},
                            "labels": {label: value for value, label in zip([0, *sorted(values)], names)},
                            "numTraining": 100, "file_ending": ".nii.gz",
                            "overwrite_image_reader_writer": "NibabelIOWithReorient"}
            folder = root / network.folder / f"{mode.trainer}__{mode.plans}__{config}"
            folder.mkdir(parents=True, exist_ok=True)
            (folder / "plans.json").write_text(json.dumps(legacy, indent=2))
            (folder / "dataset.json").write_text(json.dumps(dataset_json, indent=2))
            for fold in (folds if mode.folds is None else mode.folds):
                network_module = build_nnunet_network(current, config, len(names),
                                                      seed=seed * 1000 + network.dataset * 10 + fold)
                with torch.no_grad():
                    generator = torch.Generator().manual_seed(seed + network.dataset + fold)
                    for layer in network_module.decoder.seg_layers:
                        layer.weight.mul_(logit_scale)
                        layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator))
                        layer.bias[0] += (background_bias or {}).get(network.dataset, 0.0)
                        if network.dataset in (favour or {}):
                            layer.bias[favour[network.dataset]] += 500.0
                checkpoint = training_checkpoint(network_module, legacy, dataset_json, config, fold, mode.trainer, 3)
                if "NoMirroring" in mode.trainer:
                    checkpoint["inference_allowed_mirroring_axes"] = None
                (folder / f"fold_{fold}").mkdir(exist_ok=True)
                torch.save(checkpoint, folder / f"fold_{fold}" / "checkpoint_final.pth")
    return root
