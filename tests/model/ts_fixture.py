"""Weights in TotalSegmentator 2.18.0's exact on-disk layout for any of its tasks, made with nnU-Net's own classes.

Everything about a task is read from TotalSegmentator's own tables (``map_tasks_config.TASK_CONFIGS``,
``TASK_ID_WEIGHTS_CONFIGS``, ``map_to_binary``), not from medseg: these weights are the oracle's side.
``make_oracle_weights(root, tasks)`` writes, for every network the tasks run (their crop models included):

    root/Dataset570_ct_liver_segments/nnUNetTrainerNoMirroring__nnUNetPlans__3d_fullres/
        dataset.json    the network's class names (the task's class map, or its part's, auxiliary labels included)
        plans.json      old-style nnU-Net plans (no 'architecture' key), spacing = the task's resample (z, y, x)
        fold_0/checkpoint_final.pth   nnU-Net's PlainConvUNet as nnUNetTrainer saves it (fold_0..4 where the task
                                      runs five folds)

(``make_task_weights(root, task)`` further down is the pipeline tests' variant, built from medseg's own task table.)
The networks are small (CI time): random, seeded, the last layer scaled so that many classes win somewhere
and ties are rare. The crop models (298, 297, 300 and the craniofacial model 115 that crops ``teeth``) get
trained weights from tests/model/data/ts_crop_weights.npz (made by tests/model/make_ts_crop_weights.py)
where asked, so that they mark compact regions and a crop really crops.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np
import torch
from nnunet_fixture import build_nnunet_network, fixture_plans, training_checkpoint
from totalsegmentator import map_to_binary
from totalsegmentator.map_tasks_config import DEFAULT_CONFIG, TASK_CONFIGS, TASK_ID_WEIGHTS_CONFIGS

# Plausible CT foreground statistics, a little different per dataset (each network normalises on its own).
_INTENSITY = {"max": 3071.0, "mean": 90.0, "median": 80.0, "min": -1024.0, "percentile_00_5": -980.0,
              "percentile_99_5": 1500.0, "std": 300.0}

# Raises a part's background score (the five 1.5 mm parts of 'total', the two of 'headneck_muscles'): with
# random weights every part predicts foreground almost everywhere, and the last part would overwrite the
# others; TotalSegmentator's real parts each cover their own structures only.
PART_BACKGROUND_BIAS = 100.0

# Plans spacing (z, y, x) for a task without 'resample': nnU-Net's own resampling then runs on both sides.
NO_RESAMPLE_SPACING = (2.0, 1.25, 1.25)

# Extra scores (dataset -> {class value: added logit}) for random task networks whose clean-up needs a
# picture random weights do not give (make_oracle_weights only):
# * 803 (vertebrae_pp): random weights mark one speckled vertebra blob across the whole image, and
#   TotalSegmentator 2.18.0's postprocess_vertebrae_pp fails on exactly one kept blob (an IndexError on its
#   centres); a higher background score leaves a dozen separate blobs of touching vertebrae to relabel;
# * 299 (body, 1.5 mm): body_extremities only in blobs under 50 000 mm3, which the clean-up removes; a
#   higher extremities score leaves blobs that it keeps.
ORACLE_OUTPUT_BIAS: dict[int, dict[int, float]] = {803: {0: 60.0}, 299: {2: 20.0}}

CROP_WEIGHTS = Path(__file__).parent / "data" / "ts_crop_weights.npz"
# the crop networks' size: the shipped trained weights fit exactly this network
CROP_NETWORK = {"patch_size": (32, 32, 32), "n_stages": 4, "base_features": 4}
TASK_NETWORK = {"patch_size": (48, 48, 48), "n_stages": 4, "base_features": 4}

_MR = {"vertebrae_mr", "brain_aneurysm", "test", "total_highres_test"}
CT_TASKS: tuple[str, ...] = tuple(t for t in TASK_CONFIGS if not t.endswith("_mr") and t not in _MR)


@dataclass(frozen=True)
class Network:
    """One nnU-Net network of TotalSegmentator's, as its task config names it."""

    dataset_id: int
    folder: str
    trainer: str
    configuration: str
    spacing_zyx: tuple[float, float, float]
    labels: dict[int, str]  # network output value -> name, 1..N (gaps filled), background excluded
    folds: tuple[int, ...]
    part: bool  # one of several networks whose outputs TotalSegmentator merges


def _config(task: str, mode: str | None = None) -> dict:
    raw = TASK_CONFIGS[task]
    config = dict(DEFAULT_CONFIG)
    config.update(raw["sub_modes"][mode] if mode else {k: v for k, v in raw.items() if k != "sub_modes"})
    return config


def _modes(task: str) -> list[str | None]:
    return list(TASK_CONFIGS[task]["sub_modes"]) if "sub_modes" in TASK_CONFIGS[task] else [None]


def _part_maps(task: str) -> tuple[dict, dict] | None:
    """(dataset id -> part name, part name -> class map) for tasks whose networks are merged parts."""
    return {
        "total": (map_to_binary.map_taskid_to_partname_ct, map_to_binary.class_map_5_parts),
        "total_v3": (map_to_binary.map_taskid_to_partname_ct_v3, map_to_binary.class_map_5_parts_total_v3),
        "headneck_muscles": (map_to_binary.map_taskid_to_partname_headneck_muscles,
                             map_to_binary.class_map_parts_headneck_muscles),
    }.get(task)


def _class_map(task: str, dataset_id: int) -> tuple[dict[int, str], bool]:
    parts = _part_maps(task)
    if parts and dataset_id in parts[0]:
        return dict(parts[1][parts[0][dataset_id]]), True
    labels = dict(map_to_binary.class_map[task])
    labels.update(map_to_binary.class_map.get(f"{task}_auxiliary", {}))  # the network outputs these too
    return labels, False


def _spacing_zyx(resample) -> tuple[float, float, float]:
    if resample is None:
        return NO_RESAMPLE_SPACING
    xyz = [float(resample)] * 3 if isinstance(resample, (int, float)) else [float(r) for r in resample]
    return tuple(xyz[::-1])  # TotalSegmentator's resample is (x, y, z), nnU-Net's plans (z, y, x)


def task_networks(task: str) -> list[Network]:
    """Every network ``task`` runs itself (all its sub-modes), without its crop model."""
    networks = []
    for mode in _modes(task):
        config = _config(task, mode)
        ids = config["task_id"] if isinstance(config["task_id"], list) else [config["task_id"]]
        for dataset_id in ids:
            labels, part = _class_map(task, dataset_id)
            full = {value: labels.get(value, f"unused_{value}") for value in range(1, max(labels) + 1)}
            folds = tuple(config["folds"]) if config["folds"] is not None else (0,)
            networks.append(Network(dataset_id, TASK_ID_WEIGHTS_CONFIGS[dataset_id]["foldername"], config["trainer"],
                                    config["model"], _spacing_zyx(config["resample"]), full, folds, part))
    if task == "vertebrae_pp_refined":  # its refinement runs the vertebrae_body network (python_api.py)
        networks += task_networks("vertebrae_body")
    return networks


def crop_networks(task: str) -> list[Network]:
    """The networks TotalSegmentator runs to crop ``task`` (python_api.totalsegmentator's rough segmentation)."""
    config = _config(task, None) if "sub_modes" not in TASK_CONFIGS[task] else {}
    crop = config.get("crop")
    if crop is None and not config.get("cascade"):
        return []
    if config.get("crop_model"):
        return task_networks(config["crop_model"]) + crop_networks(config["crop_model"])
    if "body_trunc" in crop or "body_extremities" in crop:
        return [n for n in task_networks("body") if n.dataset_id == 300]
    wanted = 297 if config.get("robust_crop") else 298
    return [n for n in task_networks("total") if n.dataset_id == wanted]


def networks_for(tasks: Iterable[str]) -> list[Network]:
    """The networks ``tasks`` need, crop models included, each dataset once."""
    found: dict[int, Network] = {}
    for task in tasks:
        for network in task_networks(task) + crop_networks(task):
            found.setdefault(network.dataset_id, network)
    return list(found.values())


def network_plans(network: Network, plans_format: str, *, patch_size: Sequence[int], n_stages: int,
                  base_features: int) -> dict:
    intensity = dict(_INTENSITY, mean=_INTENSITY["mean"] + 5 * (network.dataset_id % 10),
                     std=_INTENSITY["std"] + 7 * (network.dataset_id % 10))
    plans = fixture_plans(network.spacing_zyx, patch_size, n_stages, base_features, network.configuration, intensity,
                          plans_format)
    plans["dataset_name"] = network.folder  # nnU-Net's planner copies these from the dataset
    plans["image_reader_writer"] = "NibabelIOWithReorient"
    return plans


def write_network(root: Path, network: Network, *, weights: dict[str, np.ndarray] | None = None,
                  patch_size: Sequence[int] = TASK_NETWORK["patch_size"], n_stages: int = TASK_NETWORK["n_stages"],
                  base_features: int = TASK_NETWORK["base_features"], seed: int = 0, logit_scale: float = 30.0,
                  background_bias: float | None = None, output_bias: dict[int, float] | None = None) -> Path:
    """One network's result folder, as TotalSegmentator's weights zip unpacks it; ``weights`` (a state dict
    of arrays) replaces the random ones."""
    current = network_plans(network, "current", patch_size=patch_size, n_stages=n_stages, base_features=base_features)
    legacy = network_plans(network, "legacy", patch_size=patch_size, n_stages=n_stages, base_features=base_features)
    names = ["background", *network.labels.values()]
    dataset_json = {"channel_names": {"0": "CT"}, "labels": {name: value for value, name in enumerate(names)},
                    "numTraining": 100, "file_ending": ".nii.gz",
                    "overwrite_image_reader_writer": "NibabelIOWithReorient"}
    folder = Path(root) / network.folder / f"{network.trainer}__nnUNetPlans__{network.configuration}"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "plans.json").write_text(json.dumps(legacy, indent=2))
    (folder / "dataset.json").write_text(json.dumps(dataset_json, indent=2))
    for fold in network.folds:
        model = build_nnunet_network(current, network.configuration, len(names),
                                     seed=seed * 1000 + network.dataset_id + 7919 * fold)
        with torch.no_grad():
            if weights is not None:
                missing, unexpected = model.load_state_dict(
                    {k: torch.from_numpy(np.asarray(v, np.float32)) for k, v in weights.items()}, strict=False)
                if unexpected or not all(is_alias(key) for key in missing):
                    raise ValueError(f"weights do not fit {network.folder}: {missing[:3]} {unexpected[:3]}")
            else:
                generator = torch.Generator().manual_seed(seed + network.dataset_id + 31 * fold)
                for layer in model.decoder.seg_layers:
                    layer.weight.mul_(logit_scale)
                    layer.bias.copy_(torch.randn(layer.bias.shape, generator=generator))
                    if network.part:  # background wins often enough for later parts not to cover all
                        layer.bias[0] += PART_BACKGROUND_BIAS if background_bias is None else background_bias
                    for value, extra in (output_bias or {}).items():
                        layer.bias[value] += extra
        checkpoint = training_checkpoint(model, legacy, dataset_json, network.configuration, fold, network.trainer, 3)
        checkpoint["inference_allowed_mirroring_axes"] = None if "NoMirroring" in network.trainer else (0, 1, 2)
        (folder / f"fold_{fold}").mkdir(exist_ok=True)
        torch.save(checkpoint, folder / f"fold_{fold}" / "checkpoint_final.pth")
    return folder


def is_alias(key: str) -> bool:
    """A second name nnU-Net's modules give a tensor that has a first one (the stored weights omit it)."""
    return key.startswith("decoder.encoder.") or ".all_modules." in key


def crop_weights(dataset_id: int) -> dict[str, np.ndarray] | None:
    """The trained crop network of ``dataset_id`` (tests/model/data/ts_crop_weights.npz), if it is one."""
    if not CROP_WEIGHTS.is_file():
        return None
    with np.load(CROP_WEIGHTS, allow_pickle=False) as stored:
        prefix = f"{dataset_id}/"
        found = {key[len(prefix):]: stored[key].astype(np.float32) for key in stored.files if key.startswith(prefix)}
    return found or None


def make_oracle_weights(root: Path, tasks: Iterable[str], *, trained_crop: bool = True, seed: int = 0) -> Path:
    """TotalSegmentator's weights folder for ``tasks``; the crop models trained (compact) when asked."""
    root = Path(root)
    for network in networks_for(tasks):
        weights = crop_weights(network.dataset_id) if trained_crop else None
        if weights is not None:
            write_network(root, network, weights=weights, **CROP_NETWORK)
        else:
            write_network(root, network, seed=seed, output_bias=ORACLE_OUTPUT_BIAS.get(network.dataset_id))
    return root


def make_totalseg_weights(root: Path, dataset_ids: Sequence[int], *, patch_size: Sequence[int] = (48, 48, 48),
                          n_stages: int = 4, base_features: int = 4, seed: int = 0, logit_scale: float = 30.0,
                          background_bias: float | None = None) -> Path:
    """Random weights of task 'total''s networks ``dataset_ids`` (291-295, 297, 298) and the body model (300)."""
    by_id = {n.dataset_id: n for n in task_networks("total") + task_networks("body")}
    for dataset_id in dataset_ids:
        write_network(root, by_id[dataset_id], patch_size=patch_size, n_stages=n_stages, base_features=base_features,
                      seed=seed, logit_scale=logit_scale, background_bias=background_bias)
    return Path(root)


# ---- the real CTs the task tests run on, and what the trained crop networks mark on them ----
# (name under shared/data/ct, (z, y, x) crop or None); a folder is a DICOM series
CROP_IMAGES: dict[str, tuple[str, tuple[slice, slice, slice] | None]] = {
    "abdomen": ("totalsegmentator/example_ct_sm.nii.gz", None),  # 3 mm, RAS, upper abdomen and lung bases
    "head": ("dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", None),  # 0.49 x 0.49 x 5.6 mm, tilted 18.5 degrees
    "chest": ("pyradiomics_lung1/lung1_image.nrrd", None),  # 0.57 x 0.57 x 5 mm, LPS, heart to clavicles
    "pelvis": ("totalsegmentator/example_ct.nii.gz", (slice(0, 40), slice(None), slice(None))),  # hips, 3 mm
    # tasks without a crop run on a small piece of the abdomen (spine, liver, kidney)
    "small": ("totalsegmentator/example_ct_sm.nii.gz", (slice(8, 20), slice(30, 54), slice(40, 72))),
    # the five-fold tasks at 0.8 mm without a crop: a smaller piece of the same (each fold costs a full run)
    "tiny": ("totalsegmentator/example_ct_sm.nii.gz", (slice(10, 18), slice(34, 50), slice(46, 66))),
    # the sub-millimetre crop tasks on a small piece holding their crop structure, so the crop (the structure's box
    # and TotalSegmentator's 20 mm around it, cut by the piece's edge) is a few tiles at 0.7-1.25 mm, not hundreds:
    # lung_vessels: a lung base (the 3 mm crop network marks ~20 voxels of right lung, -825 HU, at its top slice)
    "lungs": ("totalsegmentator/example_ct_sm.nii.gz", (slice(18, 30), slice(15, 60), slice(60, 115))),
    # liver_lesions: a piece that is 72 % liver (the 3 mm network marks ~50 voxels of it, 52 HU)
    "liver": ("totalsegmentator/example_ct_sm.nii.gz", (slice(12, 23), slice(59, 83), slice(71, 97))),
    # hip_implant: one hip of the pelvis image, where the 6 mm network marks the hip bone it was trained on (the
    # piece leaves out what it marks at the image's far edge, which made the crop half the image)
    "hips": ("totalsegmentator/example_ct.nii.gz", (slice(0, 40), slice(0, 85), slice(0, 80))),
}


def read_ct(ct_dir: Path, which: tuple[str, tuple[slice, slice, slice] | None]):
    """A real CT (file or DICOM series) as a SimpleITK image with its true geometry, cropped (z, y, x)."""
    import SimpleITK as sitk

    name, crop = which
    path = Path(ct_dir) / name
    if path.is_dir():
        reader = sitk.ImageSeriesReader()
        reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(path)))
        reader.SetGlobalWarningDisplay(False)  # the head series' uneven spacing: its slices read as they are
        image = reader.Execute()
    else:
        image = sitk.ReadImage(str(path))
    if crop is not None:
        z, y, x = crop
        image = image[x, y, z]
    return image


def _cube(array: np.ndarray, image, centre_zyx, side_mm: float) -> np.ndarray:
    spacing = np.asarray(image.GetSpacing()[::-1])
    half = np.maximum((side_mm / 2 / spacing).astype(int), 1)
    box = np.zeros(array.shape, bool)
    box[tuple(slice(max(c - h, 0), c + h + 1) for c, h in zip(np.asarray(centre_zyx, int), half))] = True
    return box


def _nearest_to_centroid(mask: np.ndarray) -> np.ndarray:
    found = np.argwhere(mask)
    return found[np.argmin(((found - found.mean(0)) ** 2).sum(1))]


def _example_label(value: int, side_mm: float):
    """TotalSegmentator's own label map of its example CT (example_seg.nii.gz), inside a cube at its middle."""
    def mask(ct_dir, array, image):
        import SimpleITK as sitk

        labels = sitk.GetArrayFromImage(sitk.ReadImage(str(Path(ct_dir) / "totalsegmentator/example_seg.nii.gz")))
        structure = labels == value
        return structure & _cube(array, image, _nearest_to_centroid(structure), side_mm)
    return mask


def _hu(low: float, high: float, side_mm: float, centre):
    """Voxels with low < HU < high inside a cube; ``centre`` (array -> (z, y, x)) places the cube."""
    def mask(ct_dir, array, image):
        band = (array > low) & (array < high)
        return band & _cube(array, image, centre(array), side_mm)
    return mask


def _middle(array):
    return np.asarray(array.shape) // 2


def _skull_side(array):  # the first bone voxel from the left edge along the middle row of the middle slice
    z, y = array.shape[0] // 2, array.shape[1] // 2
    return np.asarray([z, y, int(np.argmax(array[z, y] > 300))])


def _hip_bone(array):  # the bone nearest the centroid of the bone in the lower slices' one half
    bone = np.zeros(array.shape, bool)
    bone[10:35, :, : array.shape[2] // 2] = array[10:35, :, : array.shape[2] // 2] > 200
    return _nearest_to_centroid(bone)


CROP_TARGETS = {
    298: {"abdomen": {"liver": _example_label(5, 30), "lung_lower_lobe_right": _example_label(14, 30)},
          "head": {"brain": _hu(15, 50, 30, _middle), "skull": _hu(300, 5000, 24, _skull_side)},
          "chest": {"heart": _hu(0, 100, 30, lambda a: (10, 300, 300)),
                    "vertebrae_T4": _hu(200, 5000, 30, lambda a: (38, 375, 256))},
          "pelvis": {"femur_left": _hu(200, 5000, 30, _hip_bone)}},
    297: {"abdomen": {"liver": _example_label(5, 30), "lung_lower_lobe_right": _example_label(14, 30)},
          "chest": {"heart": _hu(0, 100, 30, lambda a: (10, 300, 300))}},
    300: {"abdomen": {"body_trunc": _hu(-300, 5000, 45, _middle)}},
    115: {"head": {"teeth_lower": _hu(300, 5000, 10, _skull_side)}},
}

# the image each crop task's test runs on: where its crop model marks one of its crop structures
TASK_IMAGE = {
    "lung_vessels": "lungs", "lung_vessels_LEGACY": "abdomen", "pleural_pericard_effusion": "abdomen",
    "lung_nodules": "abdomen", "liver_vessels": "abdomen", "liver_segments": "abdomen", "liver_lesions": "liver",
    "kidney_cysts": "abdomen", "abdominal_muscles": "abdomen",
    "cerebral_bleed": "head", "ventricle_parts": "head", "brain_structures": "head", "head_glands_cavities": "head",
    "head_muscles": "head", "oculomotor_muscles": "head", "craniofacial_structures": "head", "teeth": "head",
    "headneck_bones_vessels": "chest", "headneck_muscles": "chest", "heartchambers_highres": "chest",
    "coronary_arteries": "chest", "coronary_arteries_LEGACY": "chest", "aortic_sinuses": "chest",
    "hip_implant": "hips",
    "aortic_dissection": "tiny", "pulmonary_artery_landmarks": "tiny",
}


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
