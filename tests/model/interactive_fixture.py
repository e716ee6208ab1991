"""An nnInteractive model folder with random weights, made with nnInteractive's and nnU-Net's own code.

``make_nninteractive_folder(root)`` writes the layout of the published checkpoint
(``nnInteractive_v1.0/`` on its model hub):

    root/<name>/
        dataset.json
        plans.json                    (nnU-Net plans, a ResidualEncoderUNet configuration)
        inference_session_class.json  (legacy session metadata: point radius, scribble thickness)
        fold_0/checkpoint_final.pth   (the dict nnInteractive's release script leaves: network_weights,
                                       trainer_name 'nnInteractiveTrainer_stub', init_args, ...)

The network is built by ``nnInteractiveTrainer_stub.build_network_architecture`` (nnInteractive's
own class, which defers to nnU-Net's ``get_network_from_plans``) for 1 image + 7 prompt channels
and 2 outputs, with a fixed seed. Random weights would give an all-background or all-object
answer; the norms are perturbed (so a mix-up of parameters shows) and the last layer's bias is
set so that a prompted patch is partly object, partly background.

``REAL`` is the published architecture (ResEnc L: 6 stages, 32 -> 320 features, 192^3 patch,
about 103 M parameters); ``SMALL`` the one the tests run (a 96^3 patch keeps the refinement's
192^3-style margins meaningful: nnInteractive covers each box's 24-voxel margin).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Sequence

import numpy as np
import torch

PLANS_NAME = "nnUNetResEncUNetLPlans_noResampling"
DATASET_NAME = "Dataset990_MedsegInteractiveFixture"
SESSION_CLASS = "nnInteractiveInferenceSessionV3"

REAL = {"patch_size": (192, 192, 192), "n_stages": 6, "base_features": 32, "configuration": "3d_fullres_ps192_bs24"}
SMALL = {"patch_size": (96, 96, 96), "n_stages": 4, "base_features": 8, "max_features": 32,
         "configuration": "3d_fullres_ps96"}


def interactive_plans(patch_size: Sequence[int] = (192, 192, 192), n_stages: int = 6, base_features: int = 32,
                      max_features: int = 320, configuration: str = "3d_fullres_ps192_bs24",
                      blocks: Sequence[int] = (1, 3, 4, 6, 6, 6)) -> dict:
    """plans.json of an nnInteractive checkpoint: nnU-Net's ResEnc L layout, isotropic, no resampling."""
    strides = [[1, 1, 1]] + [[2, 2, 2]] * (n_stages - 1)
    divisor = 2 ** (n_stages - 1)
    if any(p % divisor for p in patch_size):
        raise ValueError(f"patch {tuple(patch_size)} is not a multiple of {divisor}")
    features = [min(base_features * 2**i, max_features) for i in range(n_stages)]
    config = {
        "data_identifier": f"{PLANS_NAME}_{configuration}",
        "preprocessor_name": "DefaultPreprocessor",
        "batch_size": 24,
        "patch_size": list(map(int, patch_size)),
        "median_image_size_in_voxels": [256, 256, 256],
        "spacing": [1.0, 1.0, 1.0],
        "normalization_schemes": ["ZScoreNormalization"],
        "use_mask_for_norm": [False],
        "resampling_fn_data": "no_resampling_hack",
        "resampling_fn_seg": "no_resampling_hack",
        "resampling_fn_data_kwargs": {},
        "resampling_fn_seg_kwargs": {},
        "resampling_fn_probabilities": "no_resampling_hack",
        "resampling_fn_probabilities_kwargs": {},
        "architecture": {
            "network_class_name": "dynamic_network_architectures.architectures.unet.ResidualEncoderUNet",
            "arch_kwargs": {
                "n_stages": n_stages,
                "features_per_stage": features,
                "conv_op": "torch.nn.modules.conv.Conv3d",
                "kernel_sizes": [[3, 3, 3]] * n_stages,
                "strides": strides,
                "n_blocks_per_stage": list(blocks[:n_stages]),
                "n_conv_per_stage_decoder": [1] * (n_stages - 1),
                "conv_bias": True,
                "norm_op": "torch.nn.modules.instancenorm.InstanceNorm3d",
                "norm_op_kwargs": {"eps": 1e-05, "affine": True},
                "dropout_op": None,
                "dropout_op_kwargs": None,
                "nonlin": "torch.nn.LeakyReLU",
                "nonlin_kwargs": {"inplace": True},
            },
            "_kw_requires_import": ["conv_op", "norm_op", "dropout_op", "nonlin"],
        },
        "batch_dice": True,
    }
    return {
        "dataset_name": DATASET_NAME,
        "plans_name": PLANS_NAME,
        "original_median_spacing_after_transp": [1.0, 1.0, 1.0],
        "original_median_shape_after_transp": [256, 256, 256],
        "image_reader_writer": "SimpleITKIO",
        "transpose_forward": [0, 1, 2],
        "transpose_backward": [0, 1, 2],
        "configurations": {configuration: config},
        "experiment_planner_used": "nnUNetPlannerResEncL_noResampling",
        "label_manager": "LabelManager",
        "foreground_intensity_properties_per_channel": {"0": {"max": 3071.0, "mean": 0.0, "median": 0.0,
                                                              "min": -1024.0, "percentile_00_5": -1000.0,
                                                              "percentile_99_5": 1500.0, "std": 1.0}},
    }


def interactive_dataset_json() -> dict:
    return {"channel_names": {"0": "any"}, "labels": {"background": 0, "object": 1}, "numTraining": 100,
            "file_ending": ".nii.gz"}


def build_interactive_network(plans: dict, configuration: str, seed: int = 0, output_bias: float = 0.0):
    """nnInteractive's network for the plans (its own builder), seeded, norms perturbed."""
    from nnInteractive.trainer.nnInteractiveTrainer import nnInteractiveTrainer_stub
    from nnunetv2.utilities.plans_handling.plans_handler import PlansManager

    manager = PlansManager(copy.deepcopy(plans))
    torch.manual_seed(seed)
    network = nnInteractiveTrainer_stub.build_network_architecture(
        manager, manager.get_configuration(configuration), 8, 2, enable_deep_supervision=True)
    with torch.no_grad():
        generator = torch.Generator().manual_seed(seed + 17)
        for name, parameter in network.named_parameters():
            if ".norm." not in name:
                continue
            if name.endswith("weight") and not parameter.any():
                parameter.fill_(1.0)
            parameter.add_(torch.randn(parameter.shape, generator=generator) * 0.1)
        # The full-resolution head: its bias moves the object/background balance of the answer.
        head = network.decoder.seg_layers[-1]
        head.bias.copy_(torch.tensor([0.0, float(output_bias)]))
    return network


def make_nninteractive_folder(root: Path, *, patch_size: Sequence[int] = SMALL["patch_size"],
                              n_stages: int = SMALL["n_stages"], base_features: int = SMALL["base_features"],
                              max_features: int = SMALL["max_features"],
                              configuration: str = SMALL["configuration"], seed: int = 0,
                              output_bias: float = 0.0, name: str = "nnInteractive_fixture",
                              session_file: str | dict | None = None, license_text: str | None = None) -> Path:
    """Write the model folder and return it (what nnInteractive's initialize_from_trained_model_folder takes)."""
    plans = interactive_plans(patch_size, n_stages, base_features, max_features, configuration)
    folder = Path(root) / name
    (folder / "fold_0").mkdir(parents=True, exist_ok=True)
    (folder / "plans.json").write_text(json.dumps(plans, indent=2))
    (folder / "dataset.json").write_text(json.dumps(interactive_dataset_json(), indent=2))
    if session_file is None:
        session_file = {"inference_class": SESSION_CLASS, "point_radius": 4, "preferred_scribble_thickness": [2, 2, 2]}
    (folder / "inference_session_class.json").write_text(json.dumps(session_file))
    if license_text is not None:
        (folder / "LICENSE").write_text(license_text)
    network = build_interactive_network(plans, configuration, seed, output_bias)
    checkpoint = {
        # as nnInteractive's checkpoint_cleansing leaves a released checkpoint: no optimizer, no dataset_json
        "network_weights": network.state_dict(),
        "grad_scaler_state": None,
        "logging": {"ema_fg_dice": [np.float64(0.5)], "train_losses": [np.float64(-0.4)]},
        "_best_ema": np.float64(0.5),
        "current_epoch": 1,
        "init_args": {"plans": copy.deepcopy(plans), "configuration": configuration, "fold": 0,
                      "device": torch.device("cpu")},
        "trainer_name": "nnInteractiveTrainer_stub",
        "inference_allowed_mirroring_axes": (0, 1, 2),
    }
    torch.save(checkpoint, folder / "fold_0" / "checkpoint_final.pth")
    return folder


# lung1 (z, y, x) around its tumour (slices 32-34): the crop the parity test's prompts are written on
LUNG1_TUMOUR_CROP = (slice(16, 48), slice(312, 408), slice(170, 266))


def lung1_tumour_crop(shared_data: Path) -> tuple[np.ndarray, list[int]]:
    """The lung1 CT cropped around its tumour, and the tumour's centre in that crop (z, y, x voxels)."""
    import SimpleITK as sitk

    lung = shared_data / "ct" / "pyradiomics_lung1"
    image = sitk.GetArrayFromImage(sitk.ReadImage(str(lung / "lung1_image.nrrd")))[LUNG1_TUMOUR_CROP].copy()
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(lung / "lung1_label.nrrd")))[LUNG1_TUMOUR_CROP]
    return image, [int(round(c.mean())) for c in np.nonzero(tumour)]


def nninteractive_prompt(session, kind: str, argument, positive: bool, shape: Sequence[int]) -> None:
    """One prompt of medseg's written form ("point", "box", or a (mask, origin) "scribble"/"lasso") given to
    nnInteractive's own session, which takes scribbles and lassos as image-sized masks."""
    if kind == "point":
        session.add_point_interaction(argument, positive)
    elif kind == "box":
        session.add_bbox_interaction(argument, positive)
    else:
        mask, origin = argument
        full = np.zeros(shape, np.uint8)
        full[tuple(slice(o, o + n) for o, n in zip(origin, mask.shape))] = mask
        method = session.add_scribble_interaction if kind == "scribble" else session.add_lasso_interaction
        method(full, positive)
