"""nnInteractive model folders, read without running them, and medseg's own copy of them.

An nnInteractive model folder (the published ``nnInteractive_v1.0/`` or a user's fine-tuned one):

    dataset.json, plans.json            nnU-Net files: one input channel, the network's configuration
    inference_info.json                 what the model supports and how prompts are drawn (new format)
      or inference_session_class.json   the same, legacy: a class name alone, or a small object
    fold_0/checkpoint_final.pth         a PyTorch pickle: network_weights, trainer_name, init_args
    LICENSE                             optional; its first line names the weights' licence

:func:`import_nninteractive` reads it with medseg's safe checkpoint loader (weights only; a
file that asks to import any code is refused) and checks that the weights fit the network
the plans describe exactly (8 inputs: the image and 7 prompt channels; 2 outputs).
:func:`save_interactive_model` writes medseg's copy (``interactive.json`` and
``weights.safetensors``, plus the LICENSE), which :func:`load_interactive_model` reads back;
it also takes an nnInteractive folder directly and converts it in memory.

Defaults where a metadata file is silent are nnInteractive 2.6.0's: point radius 4, scribble
thickness 2, decay 0.98 (0.9 for a legacy file that is only a class name), constant padding.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from medseg.errors import ModelError
from medseg.io.atomic import atomic_folder
from medseg.io.digest import sha256_file
from medseg.io.json_files import read_json_object
from medseg.model.nnunet_import import network_plan
from medseg.model.plan import Plan
from medseg.model.safe_checkpoint import load_checkpoint
from medseg.model.unet import UNet, canonical_state_dict

FORMAT_NAME = "medseg-interactive-model"
FORMAT_VERSION = 1
MODEL_JSON = "interactive.json"
WEIGHTS_FILE = "weights.safetensors"
LICENSE_FILE = "LICENSE"
CHECKPOINT_NAMES = ("checkpoint_final.pth", "checkpoint_best.pth")

NUM_OUTPUTS = 2  # nnInteractive networks always answer background / object
INTERACTION_KINDS = ("scribble", "lasso", "points", "bbox2d", "bbox3d")
# The channel map of every checkpoint without its own (nnInteractive's legacy default): index 0 of
# the prompt channels is the previous answer, then positive/negative pairs.
DEFAULT_CHANNELS: dict[str, Any] = {"prev_seg": 0, "bbox2d": (1, 2), "bbox3d": (1, 2), "lasso": (1, 2),
                                    "points": (3, 4), "scribble": (5, 6)}
DEFAULT_SUPPORTED = {"scribble": True, "lasso": True, "points": True, "bbox2d": True, "bbox3d": False}
OFFICIAL_DATASET = "Dataset225_nnInteractiveV2"
OFFICIAL_CONFIGURATION = "3d_fullres_ps192_bs24"
OFFICIAL_LICENSE = "CC BY-NC-SA 4.0"
UNKNOWN_LICENSE = "unknown (the model folder has no LICENSE file)"
# The refinement covers changes with patches whose outer 24 voxels are context only.
REFINEMENT_MARGIN = 24


@dataclass
class InteractiveSettings:
    """How prompts are drawn and combined, from the model's metadata file."""

    point_radius: int = 4
    scribble_thickness: tuple[int, int, int] = (2, 2, 2)
    decay: float = 0.98
    pad_mode: str = "constant"
    supported: dict[str, bool] = field(default_factory=lambda: dict(DEFAULT_SUPPORTED))
    channels: dict[str, Any] = field(default_factory=lambda: dict(DEFAULT_CHANNELS))
    prompt_channels: int = 7  # prompt channels including the previous answer

    def pair(self, kind: str) -> tuple[int, int]:
        """(positive, negative) prompt-channel indices of an interaction kind."""
        positive, negative = self.channels[kind]
        return int(positive), int(negative)

    @property
    def previous_channel(self) -> int:
        return int(self.channels["prev_seg"])

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["scribble_thickness"] = list(self.scribble_thickness)
        data["channels"] = {k: (v if k == "prev_seg" else list(v)) for k, v in self.channels.items()}
        return data


@dataclass
class InteractiveModel:
    """A converted interactive model: the network's plan and weights, the prompt settings, the licence."""

    name: str
    plan: Plan
    weights: dict[str, torch.Tensor]
    settings: InteractiveSettings
    license: str
    provenance: dict[str, Any] = field(default_factory=dict)
    source_path: Path | None = None

    def build_network(self, device: str | torch.device = "cpu") -> UNet:
        network = UNet(self.plan, NUM_OUTPUTS)
        # assign: the network takes these tensors rather than copies (103 M parameters are 411 MB)
        network.load_state_dict(self.weights, strict=True, assign=True)
        return network.to(device).eval()


# --- nnInteractive folders --------------------------------------------------------------------
def is_nninteractive_folder(path: str | Path) -> bool:
    path = Path(path)
    return (path / "plans.json").is_file() and any(
        (path / name).is_file() for name in ("inference_info.json", "inference_session_class.json"))


def import_nninteractive(folder: str | Path, fold: int | str | None = None) -> InteractiveModel:
    """Read an nnInteractive model folder into memory; nothing in it is executed."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ModelError("nnInteractive model folder not found", path=folder)
    settings = read_session_settings(folder)
    dataset_json = _read_json(folder / "dataset.json")
    channels = dataset_json.get("channel_names", dataset_json.get("modality"))
    if not isinstance(channels, dict) or len(channels) != 1:
        raise ModelError("an interactive model takes one image channel; dataset.json names "
                         f"{len(channels) if isinstance(channels, dict) else 'no'} channels",
                         path=folder / "dataset.json")
    plans = _read_json(folder / "plans.json")
    checkpoint_path = _checkpoint_path(folder, fold)
    checkpoint = load_checkpoint(checkpoint_path)
    trainer = str(checkpoint.get("trainer_name", ""))
    if not (trainer.startswith("nnInteractiveTrainer") or trainer.startswith("nnUNetTrainer")):
        raise ModelError(f"trainer {trainer!r} is not one whose network medseg can rebuild from the plans",
                         path=checkpoint_path, hint="nnInteractive's released checkpoints name nnInteractiveTrainer_stub")
    init_args = checkpoint.get("init_args")
    configuration = init_args.get("configuration") if isinstance(init_args, dict) else None
    if not isinstance(configuration, str):
        raise ModelError("the checkpoint does not say which plans configuration it was trained with",
                         path=checkpoint_path)
    plan = network_plan(plans, configuration, folder / "plans.json", 1 + settings.prompt_channels)
    if min(plan.patch_size) <= 2 * REFINEMENT_MARGIN:
        raise ModelError(f"patch {plan.patch_size} is too small for nnInteractive's refinement "
                         f"(each edge must exceed {2 * REFINEMENT_MARGIN} voxels)", path=folder / "plans.json")
    if plan.dim != 3:
        raise ModelError("interactive models are 3D; this configuration is 2D", path=folder / "plans.json")
    state = checkpoint.get("network_weights")
    if not isinstance(state, dict) or not state:
        raise ModelError("the checkpoint has no 'network_weights'", path=checkpoint_path)
    weights = {key: value.float().contiguous() for key, value in
               canonical_state_dict(state, source=str(checkpoint_path)).items()}
    _check_weights(plan, weights, checkpoint_path)
    dataset_name = str(plans.get("dataset_name", ""))
    model = InteractiveModel(
        name=folder.name, plan=plan, weights=weights, settings=settings,
        license=_license(folder, dataset_name, configuration),
        provenance={"source": "nnInteractive model folder", "folder": folder.name, "dataset_name": dataset_name,
                    "plans_name": plans.get("plans_name"), "configuration": configuration, "trainer_name": trainer,
                    "checkpoint": str(checkpoint_path.relative_to(folder)),
                    "checkpoint_sha256": sha256_file(checkpoint_path)},
        source_path=folder,
    )
    return model


def read_session_settings(folder: Path) -> InteractiveSettings:
    """inference_info.json (preferred) or the legacy inference_session_class.json."""
    info, legacy = folder / "inference_info.json", folder / "inference_session_class.json"
    settings = InteractiveSettings()
    if info.is_file():
        data = _read_json(info)
        capability = data
    elif legacy.is_file():
        text = legacy.read_text(encoding="utf-8", errors="replace")
        try:
            data = json.loads(text)
        except json.JSONDecodeError as error:
            raise ModelError(f"not valid JSON ({error.msg}, line {error.lineno})", path=legacy) from error
        if isinstance(data, str):  # a bare class name: nnInteractive's first sessions decayed by 0.9
            settings.decay = 0.9
            return settings
        if not isinstance(data, dict):
            raise ModelError("expected a class name or a JSON object", path=legacy)
        capability = {}
        info = legacy
    else:
        raise ModelError("neither inference_info.json nor inference_session_class.json is here; "
                         "is this an nnInteractive model folder?", path=folder)
    try:
        settings.point_radius = int(data.get("point_radius", settings.point_radius))
        thickness = data.get("preferred_scribble_thickness", list(settings.scribble_thickness))
        if not isinstance(thickness, (list, tuple)):
            thickness = [thickness] * 3
        settings.scribble_thickness = tuple(int(t) for t in thickness)  # type: ignore[assignment]
        settings.decay = float(data.get("interaction_decay", settings.decay))
        settings.pad_mode = str(data.get("pad_mode_image", settings.pad_mode))
    except (TypeError, ValueError) as error:
        raise ModelError(f"malformed prompt settings: {error}", path=info) from error
    _apply_capability(settings, capability, info)
    if not 1 <= settings.point_radius <= 64 or len(settings.scribble_thickness) != 3:
        raise ModelError(f"point radius {settings.point_radius} or scribble thickness "
                         f"{settings.scribble_thickness} is out of range", path=info)
    if not 0 < settings.decay <= 1:
        raise ModelError(f"interaction_decay must be in (0, 1], not {settings.decay}", path=info)
    if settings.pad_mode != "constant":
        raise ModelError(f"image padding {settings.pad_mode!r} is not supported (nnInteractive runs 'constant' only)",
                         path=info)
    return settings


def _apply_capability(settings: InteractiveSettings, capability: dict[str, Any], path: Path) -> None:
    supported = capability.get("supported_interactions", {})
    if not isinstance(supported, dict) or set(supported) - set(INTERACTION_KINDS):
        raise ModelError(f"supported_interactions names unknown kinds: {supported}", path=path)
    settings.supported.update({k: bool(v) for k, v in supported.items()})
    mapping = capability.get("channel_mapping", {})
    if not isinstance(mapping, dict) or set(mapping) - {"prev_seg", *INTERACTION_KINDS}:
        raise ModelError(f"channel_mapping names unknown kinds: {mapping}", path=path)
    channels = dict(DEFAULT_CHANNELS)
    try:
        for key, value in mapping.items():
            channels[key] = int(value) if key == "prev_seg" else (int(value[0]), int(value[1]))
        if "interaction_channels" in capability:
            count = int(capability["interaction_channels"]) + 1  # the file counts without the previous answer
        else:
            indices = [channels["prev_seg"]] + [i for k, v in channels.items() if k != "prev_seg" for i in v]
            count = max(max(i + 1 if i >= 0 else -i for i in indices), 1)
    except (TypeError, ValueError, IndexError) as error:
        raise ModelError(f"malformed channel_mapping: {error}", path=path) from error
    # negative indices count from the end, as in nnInteractive
    settings.channels = {k: (v % count if k == "prev_seg" else (v[0] % count, v[1] % count))
                         for k, v in channels.items()}
    settings.prompt_channels = count
    if not 1 <= count <= 15:
        raise ModelError(f"{count} prompt channels is out of range", path=path)


def _checkpoint_path(folder: Path, fold: int | str | None) -> Path:
    if fold is not None:
        candidates = [folder / f"fold_{fold}"]
    else:
        candidates = sorted(d for d in folder.glob("fold_*") if d.is_dir())
        if len(candidates) != 1:
            raise ModelError(f"expected one fold_* folder, found {len(candidates)}", path=folder,
                             hint="name the fold to use")
    for name in CHECKPOINT_NAMES:
        if (candidates[0] / name).is_file():
            return candidates[0] / name
    raise ModelError(f"no {' or '.join(CHECKPOINT_NAMES)} in {candidates[0].name}", path=folder)


def _check_weights(plan: Plan, weights: dict[str, torch.Tensor], path: Path) -> None:
    expected = {key: tuple(value.shape) for key, value in UNet(plan, NUM_OUTPUTS).state_dict().items()}
    missing = sorted(set(expected) - set(weights))
    unexpected = sorted(set(weights) - set(expected))
    wrong = sorted(k for k in set(expected) & set(weights) if tuple(weights[k].shape) != expected[k])
    if missing or unexpected or wrong:
        details = []
        if missing:
            details.append(f"{len(missing)} missing (first: {missing[0]})")
        if unexpected:
            details.append(f"{len(unexpected)} unexpected (first: {unexpected[0]})")
        if wrong:
            details.append(f"{len(wrong)} of the wrong shape (first: {wrong[0]} {tuple(weights[wrong[0]].shape)}, "
                           f"expected {expected[wrong[0]]})")
        raise ModelError("the weights do not fit the network the plans describe: " + "; ".join(details), path=path)


def _license(folder: Path, dataset_name: str, configuration: str) -> str:
    path = folder / LICENSE_FILE
    if path.is_file():
        for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
            if line.strip():
                return line.strip()
    if dataset_name == OFFICIAL_DATASET and configuration == OFFICIAL_CONFIGURATION:
        return OFFICIAL_LICENSE  # the published v1.0 folder has no LICENSE file; its model card says so
    return UNKNOWN_LICENSE


# --- medseg's copy ----------------------------------------------------------------------------
def save_interactive_model(model: InteractiveModel, dest: str | Path) -> Path:
    """Write medseg's copy of an interactive model (a folder), atomically."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tensors = {key: value.detach().cpu().contiguous().clone() for key, value in model.weights.items()}
    weights = save_safetensors_bytes(tensors, metadata={"format": FORMAT_NAME})
    manifest = {
        "format": FORMAT_NAME, "format_version": FORMAT_VERSION, "name": model.name,
        "plan": model.plan.to_dict(), "settings": model.settings.to_dict(), "license": model.license,
        "weights_sha256": hashlib.sha256(weights).hexdigest(), "provenance": model.provenance,
    }
    license_text = None
    if model.source_path is not None and (model.source_path / LICENSE_FILE).is_file():
        license_text = (model.source_path / LICENSE_FILE).read_bytes()
    with atomic_folder(dest) as temp:
        (temp / WEIGHTS_FILE).write_bytes(weights)
        (temp / MODEL_JSON).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
        if license_text is not None:
            (temp / LICENSE_FILE).write_bytes(license_text)
    return dest


def load_interactive_model(path: str | Path) -> InteractiveModel:
    """medseg's copy, or an nnInteractive folder (converted in memory)."""
    path = Path(path)
    if not (path / MODEL_JSON).is_file():
        if path.is_dir() and is_nninteractive_folder(path):
            return import_nninteractive(path)
        raise ModelError(f"not an interactive model (no {MODEL_JSON}, and not an nnInteractive folder)", path=path)
    manifest = _read_json(path / MODEL_JSON)
    if manifest.get("format") != FORMAT_NAME:
        raise ModelError(f"{MODEL_JSON} is not a medseg interactive model", path=path / MODEL_JSON)
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise ModelError(f"made by a newer medseg (format {manifest.get('format_version')})", path=path / MODEL_JSON,
                         hint="update medseg")
    try:
        plan = Plan.from_dict(manifest["plan"])
        settings_data = dict(manifest["settings"])
        settings = InteractiveSettings(
            point_radius=int(settings_data["point_radius"]),
            scribble_thickness=tuple(int(t) for t in settings_data["scribble_thickness"]),  # type: ignore[arg-type]
            decay=float(settings_data["decay"]), pad_mode=str(settings_data["pad_mode"]),
            supported={str(k): bool(v) for k, v in settings_data["supported"].items()},
            channels={k: (int(v) if k == "prev_seg" else (int(v[0]), int(v[1])))
                      for k, v in settings_data["channels"].items()},
            prompt_channels=int(settings_data["prompt_channels"]),
        )
    except (KeyError, TypeError, ValueError, IndexError) as error:
        raise ModelError(f"{MODEL_JSON} is incomplete or malformed: {error}", path=path / MODEL_JSON) from error
    raw = (path / WEIGHTS_FILE).read_bytes() if (path / WEIGHTS_FILE).is_file() else None
    if raw is None:
        raise ModelError(f"{WEIGHTS_FILE} is missing", path=path)
    if manifest.get("weights_sha256") and hashlib.sha256(raw).hexdigest() != manifest["weights_sha256"]:
        raise ModelError(f"{WEIGHTS_FILE} does not match its checksum (damaged or replaced)", path=path / WEIGHTS_FILE)
    try:
        weights = load_safetensors_bytes(raw)
    except SafetensorError as error:
        raise ModelError(f"cannot read the weights: {error}", path=path / WEIGHTS_FILE) from error
    _check_weights(plan, weights, path / WEIGHTS_FILE)
    return InteractiveModel(name=str(manifest.get("name", path.name)), plan=plan, weights=weights, settings=settings,
                            license=str(manifest.get("license", UNKNOWN_LICENSE)),
                            provenance=dict(manifest.get("provenance", {})), source_path=path)


def read_patch_size(path: str | Path) -> tuple[int, ...] | None:
    """The network's patch from a model folder's small metadata file, without reading its weights (None when
    the folder does not say it plainly: an nnInteractive plans file with several configurations)."""
    path = Path(path)
    try:
        if (path / MODEL_JSON).is_file():
            sizes = [_read_json(path / MODEL_JSON)["plan"]["patch_size"]]
        else:
            configurations = _read_json(path / "plans.json")["configurations"]
            sizes = [c["patch_size"] for c in configurations.values() if "patch_size" in c]
        if len(sizes) != 1:
            return None
        return tuple(int(p) for p in sizes[0])
    except (ModelError, KeyError, TypeError, ValueError, AttributeError):
        return None


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        raise ModelError(f"{path.name} is missing", path=path)
    return read_json_object(path, path.name, ModelError)


