"""medseg model packages: plans + labels + weights, stored as data that never runs code.

A package is a folder, or a zip (``.zip`` / ``.medseg``) holding the same files:

    model.json           format, name, configurations (Plan dicts), labels (value -> name),
                         colours, codes (value -> DICOM category and type, optional),
                         fold names per configuration, provenance (its "licence" too)
    weights.safetensors  one tensor per parameter, keyed "<configuration>/<fold index>/<name>"
    model_<config>.onnx  optional exported network per configuration

Loading reads JSON and safetensors only; nothing is unpickled. Folds of one
configuration are an ensemble: inference averages their outputs.
"""

from __future__ import annotations

import json
import shutil
import zipfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors_bytes
from safetensors.torch import save as save_safetensors_bytes

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Code
from medseg.errors import ModelError
from medseg.io.atomic import atomic_folder, atomic_open
from medseg.io.file_checks import IncompleteFile
from medseg.model.package_model import ModelPackage, package_labels, parameter_count
from medseg.model.plan import Plan
from medseg.model.unet import build_network

FORMAT_NAME = "medseg-model"
# 2: "postprocessing" steps. 3: a plan's target spacing is "target_spacing_transposed" (the
# plan's axis order; version 1-2 called it "target_spacing_zyx", still read). An older medseg
# refuses a version-3 package by its version instead of failing on the unknown key.
FORMAT_VERSION = 3
MODEL_JSON = "model.json"
WEIGHTS_FILE = "weights.safetensors"
ZIP_SUFFIXES = (".zip", ".medseg")
_KEY_SEPARATOR = "/"


def onnx_filename(config_name: str) -> str:
    return f"model_{config_name}.onnx"


# --- loading --------------------------------------------------------------------------
def load_package(path: str | Path) -> ModelPackage:
    """Read a package folder or zip. Never unpickles; weights are checked against the plans."""
    path = Path(path)
    if path.is_dir():
        files = _FolderFiles(path)
    elif path.is_file():
        if not zipfile.is_zipfile(path):
            raise ModelError("not a medseg model package (expected a folder or a zip with model.json)", path=path)
        files = _ZipFiles(path)
    else:
        raise ModelError("model package not found", path=path)
    with files:
        manifest = _read_manifest(files, path)
        configurations = {
            name: _plan_from_manifest(name, data, path) for name, data in manifest["configurations"].items()
        }
        _check_weights_size(files, manifest, configurations, len(_labels(manifest, path)), path)
        weights = _read_weights(files, manifest, path)
        onnx: dict[str, bytes | Path] = {}
        for config_name, member in manifest.get("onnx", {}).items():
            onnx[config_name] = files.reference(member)
    return package_from_description(manifest, path, weights, onnx)


def package_from_description(manifest: dict[str, Any], path: Path, weights: dict[str, list[dict[str, torch.Tensor]]],
                             onnx: dict[str, bytes | Path]) -> ModelPackage:
    """A package from its description (:func:`package_description`'s keys, read from JSON), its weights and its
    ONNX networks, checked as a package is (an exported ONNX model's sidecar is read here too, with no weights)."""
    package = ModelPackage(
        name=manifest["name"],
        configurations={name: _plan_from_manifest(name, data, path) for name, data in manifest["configurations"].items()},
        labels=package_labels(_labels(manifest, path), _colors(manifest, path), _codes(manifest, path)),
        weights=weights,
        onnx=onnx,
        provenance=dict(manifest.get("provenance", {})),
        source_path=path,
        postprocessing=manifest.get("postprocessing") or [],  # validate() refuses anything but a list of steps
    )
    package.validate(path)
    return package


def package_description(pkg: ModelPackage, configurations: list[str] | None = None) -> dict[str, Any]:
    """What model.json says of a package besides its files (name, plans, labels with colours and codes,
    post-processing, provenance), for ``configurations`` (default: all)."""
    names = list(pkg.configurations) if configurations is None else configurations
    description: dict[str, Any] = {
        "name": pkg.name,
        "configurations": {name: pkg.configurations[name].to_dict() for name in names},
        "labels": {str(k): label.name for k, label in sorted(pkg.labels.items())},
        "colors": {str(k): list(label.color) for k, label in sorted(pkg.labels.items())},  # type: ignore[arg-type]
        "provenance": dict(pkg.provenance),
    }
    codes = {str(k): {part: code.as_dict() for part, code in (("category", label.category), ("type", label.type))
                      if code is not None}
             for k, label in sorted(pkg.labels.items()) if label.category is not None or label.type is not None}
    if codes:
        description["codes"] = codes
    if pkg.postprocessing:
        description["postprocessing"] = pkg.postprocessing
    return description


MAX_MANIFEST_BYTES = 16 << 20  # model.json holds plans and names: kilobytes


def _read_manifest(files: "_PackageFiles", path: Path) -> dict[str, Any]:
    try:
        if files.size(MODEL_JSON) > MAX_MANIFEST_BYTES:
            raise ModelError(f"{MODEL_JSON} is {files.size(MODEL_JSON) / 2**20:.0f} MiB; a model description is "
                             "kilobytes", path=path)
        manifest = json.loads(files.read(MODEL_JSON).decode("utf-8"))
    except KeyError:
        raise ModelError(f"not a medseg model package: {MODEL_JSON} is missing", path=path) from None
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"{MODEL_JSON} is not valid JSON: {error}", path=path) from error
    except RecursionError:
        raise ModelError(f"{MODEL_JSON} is nested too deeply to be a model description", path=path) from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT_NAME:
        raise ModelError(f"{MODEL_JSON} does not describe a {FORMAT_NAME}", path=path)
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"model format version {version} is newer than this medseg understands ({FORMAT_VERSION})",
                         path=path, hint="update medseg")
    for key in ("name", "configurations", "labels", "folds"):
        if key not in manifest:
            raise ModelError(f"{MODEL_JSON} lacks {key!r}", path=path)
    # ("postprocessing" is checked step by step by parse_steps, with its own messages)
    expected = {"name": str, "configurations": dict, "labels": dict, "folds": dict, "colors": dict, "codes": dict,
                "onnx": dict, "provenance": dict}
    for key, kind in expected.items():
        if key in manifest and manifest[key] is not None and not isinstance(manifest[key], kind):
            raise ModelError(f"{MODEL_JSON}: {key!r} must be a JSON {_JSON_NAMES[kind]}, not "
                             f"{type(manifest[key]).__name__}", path=path)
    for config_name, fold_names in manifest["folds"].items():
        if not isinstance(fold_names, list) or not all(isinstance(f, str) for f in fold_names) or len(fold_names) > 64:
            raise ModelError(f"{MODEL_JSON}: the folds of {config_name!r} must be a list of up to 64 names",
                             path=path)
        for fold in fold_names:
            if not _plain_name(fold):  # a fold is a name, never a path ("../fold_0" was taken silently)
                raise ModelError(f"{MODEL_JSON}: folds[{config_name!r}] lists {fold!r}, which is not a plain fold name "
                                 "(no folder, no '..')"[:300], path=path,
                                 hint="the package is damaged or was altered; re-export or reinstall the model")
    for config_name, member in (manifest.get("onnx") or {}).items():
        if not isinstance(member, str):
            raise ModelError(f"{MODEL_JSON}: the ONNX file of {config_name!r} must be a file name", path=path)
        if not _plain_name(member):
            raise ModelError(f"{MODEL_JSON}: onnx[{config_name!r}] names {member!r}, which is not a plain file name of "
                             "the package (no folder, no '..')"[:300], path=path,
                             hint="the package is damaged or was altered; re-export or reinstall the model")
    return manifest


_JSON_NAMES = {str: "string", dict: "object"}


def _plain_name(name: str) -> bool:
    """A name of one member of the package's own folder: no separator, not "." or "..", not empty."""
    return bool(name.strip()) and name not in (".", "..") and "/" not in name and "\\" not in name \
        and "\0" not in name and Path(name).name == name


def _labels(manifest: dict[str, Any], path: Path) -> dict[int, str]:
    labels = {}
    for key, name in manifest["labels"].items():
        if not (isinstance(key, str) and key.isdigit() and int(key) <= MAX_LABEL_VALUE) or not isinstance(name, str):
            raise ModelError(f"{MODEL_JSON}: labels must map values 0..{MAX_LABEL_VALUE} to names, got {key!r}: {name!r}"[:300],
                             path=path)
        labels[int(key)] = name
    return labels


def _colors(manifest: dict[str, Any], path: Path) -> dict[int, tuple[int, int, int]]:
    colors = {}
    for key, color in (manifest.get("colors") or {}).items():
        if (not (isinstance(key, str) and key.isdigit()) or not isinstance(color, list) or len(color) != 3
                or not all(isinstance(c, int) and not isinstance(c, bool) and 0 <= c <= 255 for c in color)):
            raise ModelError(f"{MODEL_JSON}: colours must map label values to [r, g, b] of 0..255, got "
                             f"{key!r}: {color!r}"[:300], path=path)
        colors[int(key)] = (color[0], color[1], color[2])
    return colors


def _codes(manifest: dict[str, Any], path: Path) -> dict[int, tuple[Code | None, Code | None]]:
    """``"codes": {"1": {"category": {"value", "scheme", "meaning"}, "type": {...}}}``: what each label is,
    as the package says (DICOM CID 7150 / 7151); a label it does not code has no code."""
    codes: dict[int, tuple[Code | None, Code | None]] = {}
    for key, entry in (manifest.get("codes") or {}).items():
        try:
            if not (isinstance(key, str) and key.isdigit()) or not isinstance(entry, dict):
                raise ValueError("not a label value and its codes")
            pair = []
            for part in ("category", "type"):
                coded = entry.get(part)
                if coded is not None and not (isinstance(coded, dict) and all(
                        isinstance(coded.get(k), str) and coded[k] for k in ("value", "scheme", "meaning"))):
                    raise ValueError(f"its {part} needs a value, a scheme and a meaning")
                pair.append(Code.from_dict(coded) if coded is not None else None)
        except ValueError as error:
            raise ModelError(f"{MODEL_JSON}: the codes of label {key!r}: {error}"[:300], path=path) from None
        codes[int(key)] = (pair[0], pair[1])
    return codes


def _check_weights_size(files: "_PackageFiles", manifest: dict[str, Any], configurations: dict[str, Plan],
                        num_classes: int, path: Path) -> None:
    """The weights file may not be larger than the listed networks' parameters (as float64) need:
    a 2 GB member in a model zip would otherwise be read whole, twice over."""
    try:
        size = files.size(WEIGHTS_FILE)
    except KeyError:
        return  # _read_weights names it
    budget = 16 << 20
    for config_name, fold_names in manifest["folds"].items():
        if config_name in configurations:
            budget += len(fold_names) * 8 * parameter_count(configurations[config_name], max(2, num_classes))
    if size > budget:
        raise ModelError(f"{WEIGHTS_FILE} is {size / 2**20:.0f} MiB, more than the networks model.json lists can "
                         f"hold ({budget / 2**20:.0f} MiB)", path=path, hint="the package is damaged or not what "
                                                                               "it says")


def _plan_from_manifest(name: str, data: Any, path: Path) -> Plan:
    if not isinstance(data, dict):
        raise ModelError(f"configuration {name!r} is not an object", path=path)
    try:
        return Plan.from_dict(data)
    except ModelError as error:
        raise ModelError(f"configuration {name!r}: {error.message}", path=path) from error


def _read_weights(files: "_PackageFiles", manifest: dict[str, Any], path: Path) -> dict[str, list[dict[str, torch.Tensor]]]:
    try:
        raw = files.read(WEIGHTS_FILE)
    except KeyError:
        raise ModelError(f"{WEIGHTS_FILE} is missing", path=path) from None
    try:
        tensors = load_safetensors_bytes(raw)
    except (SafetensorError, ValueError) as error:
        raise ModelError(f"{WEIGHTS_FILE} is damaged: {error}", path=path) from error
    weights: dict[str, list[dict[str, torch.Tensor]]] = {}
    for config_name, fold_names in manifest["folds"].items():
        weights[config_name] = [{} for _ in fold_names]
    for key, tensor in tensors.items():
        parts = key.split(_KEY_SEPARATOR, 2)
        if len(parts) != 3 or parts[0] not in weights or not parts[1].isdigit() or int(parts[1]) >= len(weights[parts[0]]):
            raise ModelError(f"{WEIGHTS_FILE} has a tensor {key!r} that belongs to no listed fold", path=path)
        weights[parts[0]][int(parts[1])][parts[2]] = tensor
    return weights


class _PackageFiles:
    def read(self, name: str) -> bytes:  # KeyError when absent
        raise NotImplementedError

    def size(self, name: str) -> int:  # KeyError when absent
        raise NotImplementedError

    def reference(self, name: str) -> bytes | Path:
        raise NotImplementedError

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        pass


class _FolderFiles(_PackageFiles):
    def __init__(self, root: Path):
        self.root = root

    def _path(self, name: str) -> Path:
        if Path(name).name != name:  # names come from model.json: no paths, no "..".
            raise ModelError(f"package member {name!r} is not a plain file name", path=self.root)
        return self.root / name

    def read(self, name: str) -> bytes:
        member = self._path(name)
        if not member.is_file():
            raise KeyError(name)
        return member.read_bytes()

    def size(self, name: str) -> int:
        member = self._path(name)
        if not member.is_file():
            raise KeyError(name)
        return member.stat().st_size

    def reference(self, name: str) -> Path:
        member = self._path(name)
        if not member.is_file():
            raise ModelError(f"{name} is listed in {MODEL_JSON} but missing", path=self.root)
        return member


class _ZipFiles(_PackageFiles):
    def __init__(self, path: Path):
        self.path = path
        try:
            self.archive = zipfile.ZipFile(path)
        except zipfile.BadZipFile as error:
            raise ModelError(f"damaged zip: {error}", path=path) from error

    def read(self, name: str) -> bytes:
        try:
            return self.archive.read(name)
        except zipfile.BadZipFile as error:
            raise ModelError(f"damaged zip member {name}: {error}", path=self.path) from error

    def size(self, name: str) -> int:
        return self.archive.getinfo(name).file_size  # what the zip declares; reading never yields more

    def reference(self, name: str) -> bytes:
        try:
            return self.read(name)
        except KeyError:
            raise ModelError(f"{name} is listed in {MODEL_JSON} but missing", path=self.path) from None

    def __exit__(self, *exc) -> None:
        self.archive.close()


# --- saving ---------------------------------------------------------------------------
def save_package(pkg: ModelPackage, path: str | Path) -> Path:
    """Write a package atomically: a folder, or a zip when the name ends in .zip/.medseg."""
    path = Path(path)
    pkg.validate()
    members = _package_members(pkg)
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.suffix.lower() in ZIP_SUFFIXES:
        _write_zip_atomically(path, members)
    else:
        _write_folder_atomically(path, members)
    return path


def _package_members(pkg: ModelPackage) -> dict[str, bytes]:
    tensors: dict[str, torch.Tensor] = {}
    for config_name, folds in pkg.weights.items():
        for index, state in enumerate(folds):
            for key, tensor in state.items():
                # safetensors refuses shared or strided storage: store standalone copies.
                tensors[_KEY_SEPARATOR.join((config_name, str(index), key))] = tensor.detach().cpu().contiguous().clone()
    onnx_members = {}
    for config_name, model in pkg.onnx.items():
        onnx_members[onnx_filename(config_name)] = model if isinstance(model, bytes) else Path(model).read_bytes()
    description = package_description(pkg)
    manifest = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "name": pkg.name,
        "configurations": description["configurations"],
        "labels": description["labels"],
        "colors": description["colors"],
        "folds": {name: [f"fold_{i}" for i in range(len(folds))] for name, folds in pkg.weights.items()},
        "onnx": {name: onnx_filename(name) for name in pkg.onnx},
        "provenance": description["provenance"],
    }
    manifest.update({key: description[key] for key in ("codes", "postprocessing") if key in description})
    members = {MODEL_JSON: json.dumps(manifest, indent=1).encode("utf-8"),
               WEIGHTS_FILE: save_safetensors_bytes(tensors, metadata={"format": FORMAT_NAME})}
    members.update(onnx_members)
    return members


def _write_zip_atomically(path: Path, members: dict[str, bytes]) -> None:
    with atomic_open(path) as raw:
        # Weights barely compress; storing them keeps loading a plain read.
        with zipfile.ZipFile(raw, "w", compression=zipfile.ZIP_STORED) as archive:
            for name, data in members.items():
                archive.writestr(name, data)


def _write_folder_atomically(path: Path, members: dict[str, bytes]) -> None:
    """The package folder replaced whole (io.atomic.atomic_folder): the old package or the new one, never a mix."""
    if path.exists() and not (path / MODEL_JSON).is_file():
        raise ModelError("refusing to replace a folder that is not a medseg model package", path=path)

    def as_written(temp: Path) -> None:
        for name, data in members.items():
            size = (temp / name).stat().st_size if (temp / name).is_file() else -1
            if size != len(data):
                raise IncompleteFile(f"{name} holds {max(size, 0)} of its {len(data)} bytes")

    with atomic_folder(path, verify=as_written) as temp:
        for name, data in members.items():
            (temp / name).write_bytes(data)
        if path.exists():
            # Files the package does not own (a model card, the training manifest) stay with it;
            # stale ONNX exports of the old weights do not.
            for extra in path.iterdir():
                owned = extra.name in (MODEL_JSON, WEIGHTS_FILE) or (extra.name.startswith("model_")
                                                                    and extra.suffix == ".onnx")
                if not owned and extra.name not in members:
                    if extra.is_dir():
                        shutil.copytree(extra, temp / extra.name, symlinks=True)
                    else:
                        shutil.copy2(extra, temp / extra.name, follow_symlinks=False)


# --- networks -------------------------------------------------------------------------
def build_networks(pkg: ModelPackage, config_name: str, device: str | torch.device = "cpu",
                   share_weights: bool = False) -> list[torch.nn.Module]:
    """One network per fold of a configuration, weights loaded strictly, in eval mode.

    ``share_weights``: the networks use the package's float32 CPU tensors themselves instead
    of copies (a real-size network's weights are ~120 MB held twice otherwise); only for
    inference, since training them would change the package.
    """
    if config_name not in pkg.configurations:
        raise ModelError(f"model {pkg.name!r} has no configuration {config_name!r} "
                         f"(it has {', '.join(sorted(pkg.configurations))})", path=pkg.source_path)
    folds = pkg.weights.get(config_name, [])
    if not folds:
        raise ModelError(f"configuration {config_name!r} of model {pkg.name!r} has no trained weights",
                         path=pkg.source_path)
    plan = pkg.configurations[config_name]
    networks = []
    for index, state in enumerate(folds):
        shared = share_weights and all(t.dtype == torch.float32 and t.device.type == "cpu" for t in state.values())
        if shared:
            with torch.device("meta"):  # no random initialisation, no storage: the package's tensors become the weights
                network = build_network(plan, pkg.num_classes)
        else:
            network = build_network(plan, pkg.num_classes)
        try:
            network.load_state_dict(state, strict=True, assign=shared)
        except RuntimeError as error:
            raise ModelError(f"fold {index} of {config_name!r} does not fit its plan: {error}",
                             path=pkg.source_path) from error
        networks.append(network.to(device).eval())
    return networks


def package_summary(pkg: ModelPackage) -> str:
    """One line per configuration, for CLI output."""
    lines = [f"model {pkg.name!r}: {pkg.num_classes - 1} labels ({', '.join(pkg.names[v] for v in sorted(pkg.labels) if v)})"]
    for name, plan in pkg.configurations.items():
        folds = pkg.num_folds(name)
        onnx = ", ONNX" if name in pkg.onnx else ""
        spacing = " x ".join(f"{s:.3g}" for s in plan.target_spacing_image_zyx)
        lines.append(f"  {name}: {plan.dim}D, {plan.num_stages} stages, patch {tuple(plan.patch_size)}, "
                     f"spacing {spacing} mm, {folds} fold(s){onnx}")
    return "\n".join(lines)


__all__ = [
    "ModelPackage", "load_package", "save_package", "build_networks", "package_summary", "package_description",
    "package_from_description",
    "onnx_filename",
    "FORMAT_NAME", "FORMAT_VERSION", "MODEL_JSON", "WEIGHTS_FILE",
]


def starter_model_path() -> Path:
    """The built-in starter model (body, lungs, bones) that ships with medseg."""
    from importlib import resources

    return Path(str(resources.files("medseg.resources") / "models" / "starter"))
