"""Import a trained nnU-Net v2 result folder as a medseg :class:`ModelPackage`.

The folder is what nnU-Net's training leaves in ``nnUNet_results/DatasetXXX_Name/
<Trainer>__<Plans>__<configuration>/``: ``dataset.json``, ``plans.json`` (current or
pre-2024 format) and ``fold_*/checkpoint_final.pth`` (or ``checkpoint_best.pth``).

Checkpoints are read with the safe loader (weights_only, minimal allow-list); only
architectures medseg builds are accepted (PlainConvUNet and ResidualEncoderUNet with
BasicBlockD, nnU-Net's InstanceNorm + LeakyReLU, from trainers that build the network
from the plans). Everything else
gets a ModelError that says what is unsupported.
"""

from __future__ import annotations

import re
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from medseg.errors import ModelError
from medseg.io.digest import sha256_file
from medseg.io.json_files import read_json_object
from medseg.model.package_model import ModelPackage
from medseg.model.plan import ANISOTROPY_THRESHOLD, Plan
from medseg.model.safe_checkpoint import load_checkpoint
from medseg.model.unet import canonical_state_dict

CHECKPOINT_NAMES = ("checkpoint_final.pth", "checkpoint_best.pth")
SUPPORTED_NETWORKS = ("PlainConvUNet", "ResidualEncoderUNet")
KNOWN_UNSUPPORTED_NETWORKS = ("ResidualUNet", "Primus", "MedNeXt", "UMamba", "SwinUNETR", "nnFormer", "UNETR")
_ENCODER_COUNT_KEY = {"PlainConvUNet": "n_conv_per_stage", "ResidualEncoderUNet": "n_blocks_per_stage"}
SUPPORTED_RESAMPLING = "resample_data_or_seg_to_shape"
TORCH_RESAMPLING = "resample_torch_fornnunet"  # the *_torchres planners: run as nnU-Net runs it (trilinear)
SUPPORTED_PREPROCESSOR = "DefaultPreprocessor"
# nnU-Net's image readers and the array orientation each hands the network (medseg.io.orientation
# codes; None: the array as the file stores it). The reorienting readers turn every image to RAS
# (nibabel's as_closest_canonical / SimpleITK's DICOMOrient "RAS") before nnU-Net sees it, so a
# network trained through them has only ever seen RAS arrays.
READER_ORIENTATION = {"SimpleITKIO": None, "NibabelIO": None, "Tiff3DIO": None,
                      "NibabelIOWithReorient": "RAS", "SimpleITKIOWithReorient": "RAS"}

# Trainer variants that change only training (epochs, learning rate, loss, augmentation,
# mirroring) and therefore build their network from the plans unchanged. A trainer that
# overrides build_network_architecture (e.g. nnUNetTrainerBN, Primus) is not listed.
# TotalSegmentator's own (its custom_trainers.py): SkeletonRecall changes the loss and the data loader,
# MOSAIC_1k_QuarterLR the learning rate.
_TRAINER_TOKEN = re.compile(
    r"^(\d+epochs?|NoMirroring|onlyMirror01|NoDA|NoDeepSupervision|DA\w*|noDummy2DDA|Cos\w*|Poly\w*|"
    r"[lL]r\w*|SGD\w*|Adam\w*|\w*Loss|probabilisticOversampling\w*|\w*Oversampling\w*|Bench\w*|"
    r"\d+Epochs?|Fast\w*|NoValidation\w*|ExtremeOversamp\w*|\d+|SkeletonRecall|MOSAIC|\d+k|QuarterLR)$"
)


def import_nnunet(folder: str | Path, folds: Sequence[int | str] | None = None) -> ModelPackage:
    """Convert an nnU-Net v2 result folder into a ModelPackage (weights in memory, canonical keys)."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError("nnU-Net result folder not found", path=folder)
    dataset_json = _read_json(folder / "dataset.json")
    plans = _read_json(folder / "plans.json")
    labels = _labels_from_dataset_json(dataset_json, folder / "dataset.json")
    _check_single_channel(dataset_json, folder / "dataset.json")

    fold_dirs = _select_fold_dirs(folder, folds)
    checkpoints = [(fold_dir, _checkpoint_file(fold_dir)) for fold_dir in fold_dirs]
    first = load_checkpoint(checkpoints[0][1])
    configuration = _configuration_name(first, folder)
    trainer_name = str(first.get("trainer_name") or folder.name.split("__")[0])
    _check_trainer(trainer_name, checkpoints[0][1])

    config_dict, plans_format = _resolve_configuration(plans, configuration, folder / "plans.json")
    mirror_axes = first.get("inference_allowed_mirroring_axes")
    reader, orientation = _image_reader(plans, dataset_json, folder)
    plan = _plan_from_nnunet(plans, configuration, config_dict, mirror_axes, folder / "plans.json", orientation)

    weights = []
    digests = {}
    for index, (fold_dir, checkpoint_path) in enumerate(checkpoints):
        checkpoint = first if index == 0 else load_checkpoint(checkpoint_path)
        if index and checkpoint.get("init_args", {}).get("configuration", configuration) != configuration:
            raise ModelError(f"{fold_dir.name} was trained for another configuration than {configuration!r}",
                             path=checkpoint_path)
        state = checkpoint.get("network_weights")
        if not isinstance(state, dict) or not state:
            raise ModelError("checkpoint has no 'network_weights'", path=checkpoint_path)
        canonical = canonical_state_dict(state, source=str(checkpoint_path))
        weights.append({key: tensor.float().contiguous() for key, tensor in canonical.items()})
        digests[fold_dir.name] = sha256_file(checkpoint_path)

    dataset_name = str(plans.get("dataset_name", folder.parent.name))
    package = ModelPackage(
        name=f"{dataset_name}__{configuration}",
        configurations={configuration: plan},
        labels=labels,  # names only: nnU-Net's dataset.json codes nothing
        weights={configuration: weights},
        provenance={
            "source": "nnU-Net v2 result folder",
            "folder": folder.name,
            "dataset_name": dataset_name,
            "plans_name": plans.get("plans_name"),
            "plans_format": plans_format,
            "experiment_planner_used": plans.get("experiment_planner_used"),
            "trainer_name": trainer_name,
            "image_reader_writer": reader,
            "configuration": configuration,
            "folds": [d.name for d in fold_dirs],
            "checkpoints": {d.name: p.name for d, p in checkpoints},
            "checkpoint_sha256": digests,
            "imported_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        },
        source_path=folder,
    )
    postprocessing_file = _postprocessing_file(folder)
    if postprocessing_file is not None:
        package.postprocessing = _postprocessing_from_nnunet(postprocessing_file, labels)
        package.provenance["postprocessing_from"] = str(postprocessing_file.relative_to(folder))
    package.validate(folder)  # also checks every fold's weights against the plan
    return package


# --- postprocessing.json ---------------------------------------------------------------------
NNUNET_KEEP_LARGEST = "remove_all_but_largest_component_from_segmentation"


def _postprocessing_file(folder: Path) -> Path | None:
    """nnU-Net's chosen post-processing: next to the folds (as ``nnUNetv2_export_model_to_zip``
    ships it), else the one cross-validation folder's (as ``nnUNetv2_find_best_configuration``
    leaves it). Only the JSON is read: ``postprocessing.pkl`` holds the same as a pickle."""
    direct = folder / "postprocessing.json"
    if direct.is_file():
        return direct
    found = sorted(folder.glob("crossval_results_folds_*/postprocessing.json"))
    return found[0] if len(found) == 1 else None


def _postprocessing_from_nnunet(path: Path, labels: dict[int, str]) -> list[dict[str, Any]]:
    """nnU-Net's determined steps as medseg's (medseg.model.postprocess.keep_largest_component)."""
    record = _read_json(path)
    functions, arguments = record.get("postprocessing_fns", []), record.get("postprocessing_kwargs", [])
    if not isinstance(functions, list) or not isinstance(arguments, list) or len(functions) != len(arguments):
        raise ModelError("postprocessing_fns and postprocessing_kwargs must be lists of the same length", path=path)
    steps = []
    for function, kwargs in zip(functions, arguments):
        if function != NNUNET_KEEP_LARGEST:
            raise ModelError(f"unknown nnU-Net post-processing function {function!r}", path=path,
                             hint=f"medseg knows {NNUNET_KEEP_LARGEST}; remove the file to run without it")
        if int(kwargs.get("background_label", 0)) != 0:
            raise ModelError("post-processing into a background label other than 0 is not supported", path=path)
        wanted = kwargs.get("labels_or_regions")
        values = _flatten_labels(wanted)
        unknown = [v for v in values if v not in labels or v == 0]
        if not values or unknown:
            raise ModelError(f"post-processing names labels {unknown or wanted!r} that dataset.json lacks", path=path)
        steps.append({"op": "keep_largest_component", "labels": [labels[v] for v in values]})
    return steps


def _flatten_labels(wanted: Any) -> list[int]:
    """A label, a region (labels as a tuple, a list in JSON) or a list of them: the labels (a union)."""
    if isinstance(wanted, (list, tuple)):
        return [value for item in wanted for value in _flatten_labels(item)]
    return [int(wanted)] if isinstance(wanted, (int, float)) and not isinstance(wanted, bool) else []


# --- files ------------------------------------------------------------------------------
def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelError(f"{path.name} is missing; is this an nnU-Net v2 result folder?", path=path)
    return read_json_object(path, path.name, ModelError)




def _select_fold_dirs(folder: Path, folds: Sequence[int | str] | None) -> list[Path]:
    if folds is None:
        found = sorted(
            (d for d in folder.glob("fold_*") if d.is_dir() and any((d / n).is_file() for n in CHECKPOINT_NAMES)),
            key=lambda d: (not d.name[5:].isdigit(), int(d.name[5:]) if d.name[5:].isdigit() else 0, d.name),
        )
        if not found:
            raise ModelError("no fold_*/checkpoint_final.pth found", path=folder)
        return found
    selected = []
    for fold in folds:
        fold_dir = folder / f"fold_{fold}"
        if not fold_dir.is_dir():
            raise ModelError(f"fold {fold} not found ({fold_dir.name} is missing)", path=folder)
        selected.append(fold_dir)
    if not selected:
        raise ModelError("no folds selected", path=folder)
    return selected


def _checkpoint_file(fold_dir: Path) -> Path:
    for name in CHECKPOINT_NAMES:
        if (fold_dir / name).is_file():
            return fold_dir / name
    raise ModelError(f"no {' or '.join(CHECKPOINT_NAMES)} in {fold_dir.name}", path=fold_dir)


# --- dataset.json ---------------------------------------------------------------------------
def _labels_from_dataset_json(dataset_json: dict[str, Any], path: Path) -> dict[int, str]:
    raw = dataset_json.get("labels")
    if not isinstance(raw, dict) or not raw:
        raise ModelError("dataset.json has no 'labels'", path=path)
    labels: dict[int, str] = {}
    for name, value in raw.items():
        if isinstance(value, (list, tuple)):
            raise ModelError("region-based nnU-Net models (overlapping labels, sigmoid outputs) are not supported",
                             path=path)
        if name == "ignore":
            continue  # the ignore label has no output channel
        if not isinstance(value, int) or isinstance(value, bool):
            raise ModelError(f"label {name!r} has a non-integer value {value!r}", path=path)
        if value in labels:
            raise ModelError(f"label value {value} is used twice", path=path)
        labels[value] = str(name)
    if sorted(labels) != list(range(len(labels))):
        raise ModelError(f"labels must be consecutive 0..N-1 as nnU-Net requires, got {sorted(labels)}", path=path)
    return labels


def _image_reader(plans: dict[str, Any], dataset_json: dict[str, Any], folder: Path) -> tuple[str, str | None]:
    """The reader nnU-Net trained and predicts with, and the orientation its arrays are in.

    nnU-Net's preprocessing and predictor read images with plans.json's ``image_reader_writer``;
    the planner put it there from dataset.json's ``overwrite_image_reader_writer`` (or chose it
    by the file ending: SimpleITKIO for NIfTI). Plans without the key fall back to dataset.json.
    """
    name = plans.get("image_reader_writer")
    source = folder / "plans.json"
    if not name or name == "None":
        name = dataset_json.get("overwrite_image_reader_writer")
        source = folder / "dataset.json"
    if not name or name == "None":
        return "SimpleITKIO", None
    short = str(name).rsplit(".", 1)[-1]
    if short not in READER_ORIENTATION:
        raise ModelError(f"image reader {short!r} is unknown to medseg, so it cannot tell how the network's "
                         f"arrays were oriented (it knows {', '.join(READER_ORIENTATION)})", path=source)
    return short, READER_ORIENTATION[short]


def _check_single_channel(dataset_json: dict[str, Any], path: Path) -> None:
    channels = dataset_json.get("channel_names", dataset_json.get("modality"))
    if not isinstance(channels, dict) or len(channels) != 1:
        count = len(channels) if isinstance(channels, dict) else "unknown"
        raise ModelError(f"medseg runs single-channel CT models; this one has {count} input channels", path=path)


# --- checkpoint metadata ------------------------------------------------------------------
def _configuration_name(checkpoint: dict[str, Any], folder: Path) -> str:
    init_args = checkpoint.get("init_args")
    if isinstance(init_args, dict) and isinstance(init_args.get("configuration"), str):
        return init_args["configuration"]
    parts = folder.name.split("__")
    if len(parts) == 3:
        return parts[2]
    raise ModelError("cannot tell which configuration the checkpoint was trained for", path=folder)


def _check_trainer(trainer_name: str, path: Path) -> None:
    prefix = "nnUNetTrainer"
    if trainer_name.startswith(prefix):
        tokens = [t for t in trainer_name[len(prefix):].split("_") if t]
        if all(_TRAINER_TOKEN.match(t) for t in tokens):
            return
    raise ModelError(
        f"trainer {trainer_name!r} is not known to build its network from the plans, so medseg cannot rebuild it",
        path=path,
        hint="supported: nnUNetTrainer and its variants that only change epochs, learning rate, loss or augmentation",
    )


# --- plans.json ---------------------------------------------------------------------------
def _resolve_configuration(plans: dict[str, Any], name: str, path: Path) -> tuple[dict[str, Any], str]:
    configurations = plans.get("configurations")
    if not isinstance(configurations, dict) or name not in configurations:
        raise ModelError(f"plans.json has no configuration {name!r}", path=path)
    chain, resolved = [name], dict(configurations[name])
    while "inherits_from" in resolved:  # nnU-Net: copy the parent, then update with the child
        parent = resolved.pop("inherits_from")
        if parent in chain or parent not in configurations:
            raise ModelError(f"configuration {name!r} inherits from missing or circular {parent!r}", path=path)
        chain.append(parent)
        merged = dict(configurations[parent])
        merged.update(resolved)
        resolved = merged
    if resolved.get("previous_stage"):
        raise ModelError(f"cascade configuration {name!r} needs the output of {resolved['previous_stage']!r}; "
                         "cascades are not supported", path=path)
    if "architecture" in resolved:
        return resolved, "current"
    if "UNet_class_name" in resolved:
        return _legacy_to_current(resolved, path), "legacy"
    raise ModelError(f"configuration {name!r} describes no network architecture", path=path)


def _legacy_to_current(config: dict[str, Any], path: Path) -> dict[str, Any]:
    """Pre-2024 plans: the architecture is implied by a handful of keys (as nnU-Net converts them)."""
    try:
        n_stages = len(config["n_conv_per_stage_encoder"])
        dim = len(config["patch_size"])
        features = [min(config["UNet_base_num_features"] * 2**i, config["unet_max_num_features"]) for i in range(n_stages)]
        class_name = config["UNet_class_name"]
        arch = {
            "network_class_name": class_name,
            "arch_kwargs": {
                "n_stages": n_stages,
                "features_per_stage": features,
                "conv_op": f"torch.nn.modules.conv.Conv{dim}d",
                "kernel_sizes": config["conv_kernel_sizes"],
                "strides": config["pool_op_kernel_sizes"],
                _ENCODER_COUNT_KEY.get(class_name, "n_conv_per_stage"): config["n_conv_per_stage_encoder"],
                "n_conv_per_stage_decoder": config["n_conv_per_stage_decoder"],
                "conv_bias": True,
                "norm_op": f"torch.nn.modules.instancenorm.InstanceNorm{dim}d",
                "norm_op_kwargs": {"eps": 1e-05, "affine": True},
                "dropout_op": None,
                "dropout_op_kwargs": None,
                "nonlin": "torch.nn.LeakyReLU",
                "nonlin_kwargs": {"inplace": True},
            },
        }
    except (KeyError, TypeError) as error:
        raise ModelError(f"old-format plans configuration is incomplete: {error}", path=path) from error
    converted = dict(config)
    converted["architecture"] = arch
    return converted


def _check_architecture(arch: dict[str, Any], dim: int, path: Path) -> tuple[str, dict[str, Any]]:
    class_name = str(arch.get("network_class_name", ""))
    short = class_name.rsplit(".", 1)[-1]
    if short not in SUPPORTED_NETWORKS:
        known = short in KNOWN_UNSUPPORTED_NETWORKS
        raise ModelError(
            f"network {short or class_name!r} is {'not supported yet' if known else 'unknown'}; "
            f"medseg runs nnU-Net's {' and '.join(SUPPORTED_NETWORKS)}",
            path=path,
        )
    kwargs = arch.get("arch_kwargs")
    if not isinstance(kwargs, dict):
        raise ModelError("plans.json architecture has no arch_kwargs", path=path)
    problems = []
    if not str(kwargs.get("conv_op", "")).endswith(f"Conv{dim}d"):
        problems.append(f"conv_op {kwargs.get('conv_op')!r} for a {dim}D patch")
    if not str(kwargs.get("norm_op", "")).endswith(f"InstanceNorm{dim}d"):
        problems.append(f"norm_op {kwargs.get('norm_op')!r} (InstanceNorm{dim}d expected)")
    norm_kwargs = kwargs.get("norm_op_kwargs") or {}
    if not norm_kwargs.get("affine", False) or abs(float(norm_kwargs.get("eps", 1e-5)) - 1e-5) > 1e-12:
        problems.append(f"norm_op_kwargs {norm_kwargs}")
    if kwargs.get("dropout_op") not in (None, "None"):
        problems.append("dropout")
    if not str(kwargs.get("nonlin", "")).endswith("LeakyReLU"):
        problems.append(f"nonlin {kwargs.get('nonlin')!r}")
    slope = (kwargs.get("nonlin_kwargs") or {}).get("negative_slope", 0.01)
    if abs(float(slope) - 0.01) > 1e-12:
        problems.append(f"LeakyReLU slope {slope}")
    if not kwargs.get("conv_bias", False):
        problems.append("convolutions without bias")
    if kwargs.get("nonlin_first", False):
        problems.append("nonlin_first")
    for key in ("n_stages", "features_per_stage", "kernel_sizes", "strides", _ENCODER_COUNT_KEY[short],
                "n_conv_per_stage_decoder"):
        if key not in kwargs:
            problems.append(f"missing {key}")
    if short == "ResidualEncoderUNet":
        if not str(kwargs.get("block", "BasicBlockD")).endswith("BasicBlockD"):
            problems.append(f"block {kwargs.get('block')!r} (BasicBlockD expected)")
        if kwargs.get("bottleneck_channels") is not None:
            problems.append("bottleneck_channels")
        features = kwargs.get("features_per_stage")
        stem = kwargs.get("stem_channels")
        if stem is not None and isinstance(features, (list, tuple)) and stem != features[0]:
            problems.append(f"stem_channels {stem} != features_per_stage[0]")
    if problems:
        raise ModelError(f"unsupported {short} settings: " + ", ".join(problems), path=path)
    return short, kwargs


def _per_stage(value: Any, n: int) -> list:
    return list(value) if isinstance(value, (list, tuple)) else [value] * n


def network_plan(plans: dict[str, Any], configuration: str, path: Path, num_input_channels: int) -> Plan:
    """The network a plans.json configuration describes, and nothing else.

    For models that bring their own preprocessing (nnInteractive works on the voxels as they
    are: no resampling, its own normalisation), so only the architecture is read and checked;
    the plan's spacing, normalisation and resampling are placeholders that nothing uses.
    """
    config, _ = _resolve_configuration(plans, configuration, path)
    patch = [int(p) for p in config.get("patch_size", [])]
    dim = len(patch)
    if dim not in (2, 3):
        raise ModelError(f"configuration {configuration!r} has patch size {patch}, not a 2D or 3D one", path=path)
    architecture, kwargs = _check_architecture(config["architecture"], dim, path)
    n = int(kwargs["n_stages"])
    try:
        return Plan(
            name=configuration, dim=dim, target_spacing_transposed=(1.0, 1.0, 1.0), patch_size=tuple(patch),
            strides=[_per_stage(s, dim) for s in _per_stage(kwargs["strides"], n)],
            kernel_sizes=[_per_stage(k, dim) for k in _per_stage(kwargs["kernel_sizes"], n)],
            features_per_stage=_per_stage(kwargs["features_per_stage"], n),
            n_conv_per_stage_encoder=_per_stage(kwargs[_ENCODER_COUNT_KEY[architecture]], n),
            n_conv_per_stage_decoder=_per_stage(kwargs["n_conv_per_stage_decoder"], n - 1),
            batch_size=1, num_input_channels=num_input_channels, mirror_axes=(), architecture=architecture,
        )
    except (TypeError, ValueError) as error:
        raise ModelError(f"configuration {configuration!r} has malformed network settings: {error}", path=path) from error


def _plan_from_nnunet(plans: dict[str, Any], name: str, config: dict[str, Any], mirror_axes: Any,
                      path: Path, orientation: str | None = None) -> Plan:
    patch = [int(p) for p in config["patch_size"]]
    dim = len(patch)
    architecture, kwargs = _check_architecture(config["architecture"], dim, path)
    n = int(kwargs["n_stages"])
    if config.get("preprocessor_name", SUPPORTED_PREPROCESSOR) != SUPPORTED_PREPROCESSOR:
        raise ModelError(f"preprocessor {config['preprocessor_name']!r} is not supported", path=path)
    resampling = {}
    for kind, key in (("data", "resampling_fn_data"), ("seg", "resampling_fn_seg"),
                      ("probabilities", "resampling_fn_probabilities")):
        function = config.get(key, SUPPORTED_RESAMPLING)
        if function not in (SUPPORTED_RESAMPLING, TORCH_RESAMPLING):
            raise ModelError(f"{key} {function!r} is not supported (only nnU-Net's default resampling and "
                             f"{TORCH_RESAMPLING})", path=path)
        settings = dict(config.get(f"{key}_kwargs") or {})
        settings.pop("is_seg", None)
        if function == TORCH_RESAMPLING:
            threshold = settings.get("separate_z_anisotropy_threshold", ANISOTROPY_THRESHOLD)
            mode = settings.get("mode", "linear")
            if float(threshold) != ANISOTROPY_THRESHOLD or mode != "linear":
                raise ModelError(f"{key}_kwargs {settings} are not supported (medseg runs {TORCH_RESAMPLING} with "
                                 f"mode 'linear' and the anisotropy threshold {ANISOTROPY_THRESHOLD:g})", path=path)
            resampling[kind] = {"function": TORCH_RESAMPLING, "force_separate_z": settings.get("force_separate_z")}
            continue
        resampling[kind] = {"order": settings.get("order", 3 if kind == "data" else 1),
                            "order_z": settings.get("order_z", 0),
                            "force_separate_z": settings.get("force_separate_z")}
    spacing = [float(s) for s in config["spacing"]]
    if dim == 2:
        # 2D plans leave axis 0 at the image's own spacing; keep the 3D target for reference.
        full = plans.get("configurations", {}).get("3d_fullres", {}).get("spacing")
        axis0 = float(full[0]) if full else float(plans.get("original_median_spacing_after_transp", [1.0])[0])
        spacing = [axis0, *spacing]
    mirror = () if mirror_axes is None else tuple(int(a) for a in mirror_axes)
    return Plan(
        name=name,
        dim=dim,
        target_spacing_transposed=tuple(spacing),
        patch_size=tuple(patch),
        strides=[_per_stage(s, dim) for s in _per_stage(kwargs["strides"], n)],
        kernel_sizes=[_per_stage(k, dim) for k in _per_stage(kwargs["kernel_sizes"], n)],
        features_per_stage=_per_stage(kwargs["features_per_stage"], n),
        n_conv_per_stage_encoder=_per_stage(kwargs[_ENCODER_COUNT_KEY[architecture]], n),
        n_conv_per_stage_decoder=_per_stage(kwargs["n_conv_per_stage_decoder"], n - 1),
        batch_size=int(config.get("batch_size", 2)),
        normalization=_normalization(plans, config, path),
        num_input_channels=1,
        use_mask_for_norm=bool((config.get("use_mask_for_norm") or [False])[0]),
        anisotropy_threshold=ANISOTROPY_THRESHOLD,
        resampling=resampling,
        transpose_forward=list(plans.get("transpose_forward", [0, 1, 2])),
        transpose_backward=list(plans.get("transpose_backward", [0, 1, 2])),
        mirror_axes=mirror,
        median_shape=tuple(int(round(m)) for m in config["median_image_size_in_voxels"])
        if config.get("median_image_size_in_voxels") is not None else None,
        architecture=architecture,
        orientation=orientation,
    )


def _normalization(plans: dict[str, Any], config: dict[str, Any], path: Path) -> dict[str, Any]:
    schemes = config.get("normalization_schemes") or ["ZScoreNormalization"]
    scheme = str(schemes[0])
    if scheme != "CTNormalization":
        return {"scheme": scheme}
    properties = plans.get("foreground_intensity_properties_per_channel",
                           plans.get("foreground_intensity_properties_by_modality"))
    channel = (properties or {}).get("0")
    if not isinstance(channel, dict):
        raise ModelError("CTNormalization needs foreground intensity properties, which plans.json lacks", path=path)
    try:
        return {"scheme": scheme, **{k: float(channel[k]) for k in ("mean", "std", "percentile_00_5", "percentile_99_5")}}
    except (KeyError, TypeError, ValueError) as error:
        raise ModelError(f"incomplete foreground intensity properties: {error}", path=path) from error
