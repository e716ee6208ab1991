"""A small but REAL nnU-Net v2 result folder, made with nnunetv2's own code.

``make_nnunet_result_folder(root)`` writes, like ``nnUNet_results`` after training:

    root/Dataset901_MedsegFixture/nnUNetTrainer__nnUNetPlans__3d_fullres/
        dataset.json
        plans.json                    (current format, or the pre-2024 one)
        fold_0/checkpoint_final.pth   (dict exactly as nnUNetTrainer.save_checkpoint writes it)

The network is nnunetv2's PlainConvUNet built by ``get_network_from_plans`` from the
plans (via ``PlansManager``), with random weights from a fixed seed, so nnUNetPredictor
can load the folder unchanged. The default configuration is small enough for CPU tests:
thick-slice target spacing (3.0, 1.5, 1.5) mm, patch 32 x 64 x 64, 4 stages
([1,1,1], [1,2,2], [2,2,2], [2,2,2]; kernel [1,3,3] at stage 0), features 16..128,
CT normalization with stored intensity properties.

Used by tests/model/test_nnunet_import.py and by the inference parity tests; import it
with ``from nnunet_fixture import make_nnunet_result_folder`` (tests/model is on sys.path
under pytest's default rootdir import mode) or via its file path.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch
from nnunetv2.experiment_planning.experiment_planners.network_topology import get_pool_and_conv_props
from nnunetv2.utilities.get_network_from_plans import get_network_from_plans
from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

DATASET_NAME = "Dataset901_MedsegFixture"
PLANS_NAME = "nnUNetPlans"
DEFAULT_LABELS = ("background", "liver", "spleen")
# Plausible CT foreground statistics (HU), as nnU-Net's fingerprint stores them.
DEFAULT_INTENSITY = {
    "max": 3071.0, "mean": 68.5, "median": 72.0, "min": -1024.0,
    "percentile_00_5": -958.0, "percentile_99_5": 1257.0, "std": 176.3,
}


def fixture_plans(
    spacing_zyx: Sequence[float] = (3.0, 1.5, 1.5),
    patch_size: Sequence[int] = (32, 64, 64),
    n_stages: int = 4,
    base_features: int = 16,
    configuration: str = "3d_fullres",
    intensity: dict | None = None,
    plans_format: str = "current",
    network: str = "PlainConvUNet",
) -> dict:
    """nnU-Net plans.json content for one small configuration (3D, or 2D with a 2-value patch).

    ``network="ResidualEncoderUNet"`` gives a ResEnc configuration (blocks 1, 3, 4, 6, ...
    per stage and one decoder conv, as nnU-Net's ResEnc presets).
    """
    dim = len(patch_size)
    spacing = list(map(float, spacing_zyx))[3 - dim:]
    _, strides, kernels, padded, _ = get_pool_and_conv_props(spacing, list(patch_size), 4, 999999)
    strides = [list(map(int, s)) for s in strides[:n_stages]]
    kernels = [list(map(int, k)) for k in kernels[:n_stages]]
    if len(strides) < n_stages:
        raise ValueError(f"patch {tuple(patch_size)} allows only {len(strides)} stages")
    divisor = np.prod(np.asarray(strides), axis=0)
    if any(p % d for p, d in zip(patch_size, divisor)):
        raise ValueError(f"patch {tuple(patch_size)} is not a multiple of {divisor.tolist()}")
    max_features = 320 if dim == 3 else 512
    features = [min(base_features * 2**i, max_features) for i in range(n_stages)]
    conv = "Conv3d" if dim == 3 else "Conv2d"
    norm = "InstanceNorm3d" if dim == 3 else "InstanceNorm2d"
    config = {
        "data_identifier": f"{PLANS_NAME}_{configuration}",
        "preprocessor_name": "DefaultPreprocessor",
        "batch_size": 2,
        "patch_size": list(map(int, patch_size)),
        "median_image_size_in_voxels": [int(p) * 3 for p in patch_size],
        "spacing": spacing,
        "normalization_schemes": ["CTNormalization"],
        "use_mask_for_norm": [False],
        "resampling_fn_data": "resample_data_or_seg_to_shape",
        "resampling_fn_seg": "resample_data_or_seg_to_shape",
        "resampling_fn_data_kwargs": {"is_seg": False, "order": 3, "order_z": 0, "force_separate_z": None},
        "resampling_fn_seg_kwargs": {"is_seg": True, "order": 1, "order_z": 0, "force_separate_z": None},
        "resampling_fn_probabilities": "resample_data_or_seg_to_shape",
        "resampling_fn_probabilities_kwargs": {"is_seg": False, "order": 1, "order_z": 0, "force_separate_z": None},
        "batch_dice": False,
    }
    residual = network == "ResidualEncoderUNet"
    if not residual and network != "PlainConvUNet":
        raise ValueError(f"network must be PlainConvUNet or ResidualEncoderUNet, not {network!r}")
    encoder_counts = [(1, 3, 4, 6, 6, 6, 6)[i] for i in range(n_stages)] if residual else [2] * n_stages
    decoder_counts = [1 if residual else 2] * (n_stages - 1)
    if plans_format == "current":
        config["architecture"] = {
            "network_class_name": f"dynamic_network_architectures.architectures.unet.{network}",
            "arch_kwargs": {
                "n_stages": n_stages,
                "features_per_stage": features,
                "conv_op": f"torch.nn.modules.conv.{conv}",
                "kernel_sizes": kernels,
                "strides": strides,
                ("n_blocks_per_stage" if residual else "n_conv_per_stage"): encoder_counts,
                "n_conv_per_stage_decoder": decoder_counts,
                "conv_bias": True,
                "norm_op": f"torch.nn.modules.instancenorm.{norm}",
                "norm_op_kwargs": {"eps": 1e-05, "affine": True},
                "dropout_op": None,
                "dropout_op_kwargs": None,
                "nonlin": "torch.nn.LeakyReLU",
                "nonlin_kwargs": {"inplace": True},
            },
            "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
        }
    elif plans_format == "legacy":  # nnU-Net v2 before Feb 2024
        config.update({
            "UNet_class_name": network,
            "UNet_base_num_features": base_features,
            "n_conv_per_stage_encoder": encoder_counts,
            "n_conv_per_stage_decoder": decoder_counts,
            "num_pool_per_axis": [int(sum(1 for s in strides if s[a] == 2)) for a in range(dim)],
            "pool_op_kernel_sizes": strides,
            "conv_kernel_sizes": kernels,
            "unet_max_num_features": max_features,
        })
    else:
        raise ValueError(f"plans_format must be 'current' or 'legacy', not {plans_format!r}")
    return {
        "dataset_name": DATASET_NAME,
        "plans_name": PLANS_NAME,
        "original_median_spacing_after_transp": list(map(float, spacing_zyx)),
        "original_median_shape_after_transp": [100, 512, 512],
        "image_reader_writer": "SimpleITKIO",
        "transpose_forward": [0, 1, 2],
        "transpose_backward": [0, 1, 2],
        "configurations": {configuration: config},
        "experiment_planner_used": "ExperimentPlanner",
        "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": dict(intensity or DEFAULT_INTENSITY)},
    }


def fixture_dataset_json(labels: Sequence[str] = DEFAULT_LABELS, num_training: int = 10) -> dict:
    return {
        "channel_names": {"0": "CT"},
        "labels": {name: value for value, name in enumerate(labels)},
        "numTraining": num_training,
        "file_ending": ".nii.gz",
    }


def make_nnunet_result_folder(
    root: Path,
    *,
    plans_format: str = "current",
    folds: Sequence[int] = (0,),
    configuration: str = "3d_fullres",
    spacing_zyx: Sequence[float] = (3.0, 1.5, 1.5),
    patch_size: Sequence[int] = (32, 64, 64),
    n_stages: int = 4,
    base_features: int = 16,
    labels: Sequence[str] = DEFAULT_LABELS,
    intensity: dict | None = None,
    seed: int = 0,
    trainer_name: str = "nnUNetTrainer",
    checkpoint_name: str = "checkpoint_final.pth",
    network: str = "PlainConvUNet",
) -> Path:
    """Write an nnU-Net v2 result folder and return it (the folder nnUNetPredictor takes)."""
    plans = fixture_plans(spacing_zyx, patch_size, n_stages, base_features, configuration, intensity, plans_format,
                          network)
    dataset_json = fixture_dataset_json(labels)
    folder = Path(root) / DATASET_NAME / f"{trainer_name}__{PLANS_NAME}__{configuration}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plans.json").write_text(json.dumps(plans, indent=2))
    (folder / "dataset.json").write_text(json.dumps(dataset_json, indent=2))
    dim = len(patch_size)
    # The network comes from the current-format plans: a legacy file describes the same
    # network, but nnU-Net 2.8.1 cannot locate a legacy ResidualEncoderUNet class path
    # without importing every architecture module (one needs torchvision).
    network_plans = plans if plans_format == "current" else fixture_plans(
        spacing_zyx, patch_size, n_stages, base_features, configuration, intensity, "current", network)
    for fold in folds:
        network = build_nnunet_network(network_plans, configuration, len(labels), seed=seed * 1000 + fold)
        fold_dir = folder / f"fold_{fold}"
        fold_dir.mkdir(exist_ok=True)
        torch.save(
            training_checkpoint(network, plans, dataset_json, configuration, fold, trainer_name, dim),
            fold_dir / checkpoint_name,
        )
    return folder


def build_nnunet_network(plans: dict, configuration: str, num_classes: int, seed: int = 0,
                         deep_supervision: bool = True) -> torch.nn.Module:
    """nnU-Net's network for a plans dict, as the trainer builds it (He init, seeded)."""
    manager = PlansManager(copy.deepcopy(plans)).get_configuration(configuration)
    torch.manual_seed(seed)
    network = get_network_from_plans(
        manager.network_arch_class_name, manager.network_arch_init_kwargs,
        manager.network_arch_init_kwargs_req_import, 1, num_classes, allow_init=True,
        deep_supervision=deep_supervision,
    )
    # He init leaves the norms at weight 1 / bias 0 (ResEnc: 0 for the last norm of a block);
    # perturb them so that a mix-up of parameters would show in the outputs.
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed + 17)
        for name, parameter in network.named_parameters():
            if ".norm." not in name:
                continue
            if name.endswith("weight") and not parameter.any():
                parameter.fill_(1.0)
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
    return network


def training_checkpoint(network: torch.nn.Module, plans: dict, dataset_json: dict, configuration: str,
                        fold: int, trainer_name: str, dim: int) -> dict:
    """The dict nnUNetTrainer.save_checkpoint writes, with a real SGD state and numpy scalars."""
    optimizer = torch.optim.SGD(network.parameters(), lr=1e-2, momentum=0.99, nesterov=True, weight_decay=3e-5)
    for parameter in network.parameters():  # one step so the optimizer has momentum buffers
        parameter.grad = torch.zeros_like(parameter)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    epochs = 3
    logging = {
        "mean_fg_dice": [np.float64(0.1 * i) for i in range(epochs)],
        "ema_fg_dice": [np.float64(0.05 * i) for i in range(epochs)],
        "dice_per_class_or_region": [[np.float64(0.1)] * (len(dataset_json["labels"]) - 1) for _ in range(epochs)],
        "train_losses": [np.float64(-0.1 * i) for i in range(epochs)],
        "val_losses": [np.float64(-0.1 * i) for i in range(epochs)],
        "lrs": [0.01 * (1 - i / 1000) ** 0.9 for i in range(epochs)],
        "epoch_start_timestamps": [1.7e9 + i for i in range(epochs)],
        "epoch_end_timestamps": [1.7e9 + i + 0.5 for i in range(epochs)],
    }
    return {
        "network_weights": network.state_dict(),
        "optimizer_state": optimizer.state_dict(),
        "grad_scaler_state": None,
        "logging": logging,
        "_best_ema": np.float64(0.1),
        "current_epoch": epochs,
        "init_args": {
            "plans": copy.deepcopy(plans),
            "configuration": configuration,
            "fold": fold,
            "dataset_json": copy.deepcopy(dataset_json),
            "device": torch.device("cpu"),
        },
        "trainer_name": trainer_name,
        "inference_allowed_mirroring_axes": tuple(range(dim)),
    }


def nnunet_folder_from_package(package, configuration: str, root: Path) -> Path:
    """An nnU-Net v2 result folder holding ``configuration`` of a medseg package: the same
    network (stages, strides, kernels, features) and the same weights, for nnUNetPredictor.

    The plan's CT normalisation becomes nnU-Net's intensity properties. nnU-Net reads arrays
    as stored, while medseg-trained plans read them in LPS: give both an image whose
    direction is the identity and they see the same array.
    """
    plan = package.configurations[configuration]
    if plan.dim != 3 or list(plan.transpose_forward) != [0, 1, 2]:
        raise ValueError("only untransposed 3D configurations are exported")
    norm = plan.normalization
    intensity = {"mean": norm["mean"], "std": norm["std"], "percentile_00_5": norm["percentile_00_5"],
                 "percentile_99_5": norm["percentile_99_5"], "median": norm["mean"],
                 "min": norm["percentile_00_5"], "max": norm["percentile_99_5"]}
    divisor = np.prod(np.asarray(plan.strides), axis=0)
    plans = fixture_plans(plan.target_spacing_transposed, plan.patch_size, 1, plan.features_per_stage[0], "3d_fullres",
                          intensity)
    config = plans["configurations"]["3d_fullres"]
    config["patch_size"] = [int(p) for p in plan.patch_size]
    assert not any(p % d for p, d in zip(plan.patch_size, divisor))
    config["architecture"]["arch_kwargs"].update({
        "n_stages": plan.num_stages,
        "features_per_stage": [int(f) for f in plan.features_per_stage],
        "kernel_sizes": [[int(k) for k in kernel] for kernel in plan.kernel_sizes],
        "strides": [[int(s) for s in stride] for stride in plan.strides],
        "n_conv_per_stage": [int(n) for n in plan.n_conv_per_stage_encoder],
        "n_conv_per_stage_decoder": [int(n) for n in plan.n_conv_per_stage_decoder],
    })
    labels = [package.names[value] for value in sorted(package.labels)]
    dataset_json = fixture_dataset_json(labels)
    folder = Path(root) / DATASET_NAME / f"nnUNetTrainer__{PLANS_NAME}__3d_fullres"
    (folder / "fold_0").mkdir(parents=True, exist_ok=True)
    (folder / "plans.json").write_text(json.dumps(plans, indent=2))
    (folder / "dataset.json").write_text(json.dumps(dataset_json, indent=2))
    network = build_nnunet_network(plans, "3d_fullres", len(labels))
    state = package.weights[configuration][0]
    missing, unexpected = network.load_state_dict(state, strict=False)
    if unexpected or any(not _is_alias(key) for key in missing):
        raise ValueError(f"weights do not fit nnU-Net's network: missing {missing[:3]}, unexpected {unexpected[:3]}")
    torch.save(training_checkpoint(network, plans, dataset_json, "3d_fullres", 0, "nnUNetTrainer", 3),
               folder / "fold_0" / "checkpoint_final.pth")
    return folder


def _is_alias(key: str) -> bool:
    # nnU-Net's modules reach the same tensors through a second path (medseg.model.unet drops them)
    return key.startswith("decoder.encoder.") or ".all_modules." in key
