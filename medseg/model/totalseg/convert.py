"""TotalSegmentator's weights for one task as one medseg model folder, and reading that folder back.

TotalSegmentator keeps one nnU-Net result folder per dataset under its weights directory
(``<weights>/DatasetNNN_<name>/<Trainer>__<plans>__<configuration>/``). The conversion turns each
network a task needs (its own, and those of the runs that crop it or refine it: e.g. lung_vessels
needs the 3 mm ``total`` network that finds the lungs) into an ordinary medseg package (``part_NNN/``:
plans and safetensors, read with the safe loader, nothing unpickled) and writes ``totalseg.json``:
the task's entries of TotalSegmentator's task table (medseg.model.totalseg.tasks), which parts are
which network, and the configurations. A configuration of the task whose networks are not all there
is left out; a network a kept configuration's crop needs must be there.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from medseg.errors import ModelError
from medseg.io.atomic import atomic_folder
from medseg.io.json_files import read_json_object
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import MODEL_JSON, load_package, save_package
from medseg.model.package_model import ModelPackage
from medseg.model.plan import Plan
from medseg.model.totalseg.classes import TASK, VERSION
from medseg.model.totalseg.tasks import ModeSpec, NetworkSpec, TaskSpec, load_task_table, required_runs, task_spec

MANIFEST = "totalseg.json"
FORMAT_NAME = "medseg-totalsegmentator"
FORMAT_VERSION = 2
MODE_FLAGS = {"default": None, "fast": "--fast", "fastest": "--fastest"}
# roi_subset (medseg's --structures) on the total task: TotalSegmentator crops with its 6 mm network
STRUCTURES_CROP = ("total", "fastest")


def part_folder_name(dataset_id: int) -> str:
    return f"part_{dataset_id}"


def find_weights_root(path: str | Path) -> Path:
    """The folder that holds the DatasetNNN_* folders: ``path`` itself, or a TotalSegmentator home
    (``~/.totalsegmentator``: its ``nnunet/results``)."""
    path = Path(path)
    for candidate in (path, path / "nnunet" / "results"):
        if candidate.is_dir() and any(candidate.glob("Dataset[0-9][0-9][0-9]_*")):
            return candidate
    raise ModelError("no TotalSegmentator weights here (no DatasetNNN_* folder, nor nnunet/results/ holding one)",
                     path=path)


def dataset_result_folder(weights_root: Path, network: NetworkSpec, mode: ModeSpec) -> Path | None:
    """The nnU-Net result folder of a network, or None when its weights are absent."""
    candidates = sorted(weights_root.glob(f"Dataset{network.dataset:03d}_*"))
    if not candidates:
        return None
    if len(candidates) > 1:  # nnU-Net itself finds a dataset by its id prefix: two would be ambiguous
        raise ModelError(f"two folders for dataset {network.dataset}: "
                         f"{', '.join(c.name for c in candidates)}", path=weights_root)
    folder = candidates[0] / f"{mode.trainer}__{mode.plans}__{mode.nnunet_configuration}"
    if not folder.is_dir():
        raise ModelError(f"{candidates[0].name} has no {folder.name} folder", path=candidates[0])
    return folder


def _purpose(task: str, spec: TaskSpec, helper: tuple[str, str], table: dict[str, Any]) -> str:
    """Why ``task`` needs another run, in words."""
    name, mode = helper
    configuration = task_spec(name, table).modes[mode].configuration
    what = f"TotalSegmentator's {name} ({configuration})"
    if spec.refine is not None and (spec.refine.task, spec.refine.mode) == helper:
        return f"{task} refines its result with {what}"
    return f"{task} is cropped by {what}"


def import_totalsegmentator_task(weights_folder: str | Path, out: str | Path, task: str = TASK) -> Path:
    """Convert TotalSegmentator's weights for ``task`` into the medseg model folder ``out``; returns ``out``.

    Every configuration of the task whose networks are all present is converted, with the networks
    of the runs it depends on (crop, refinement); ``out`` is written whole or not at all, and an
    existing folder is replaced only when it is a TotalSegmentator model medseg wrote.
    """
    table = load_task_table()
    spec = task_spec(task, table)
    out = Path(out)
    if out.exists() and not is_totalseg_model(out):
        raise ModelError("refusing to replace a folder that is not a TotalSegmentator model medseg wrote", path=out)
    root = find_weights_root(weights_folder)

    def folders(name: str, mode: ModeSpec) -> dict[int, Path | None]:
        return {n.dataset: dataset_result_folder(root, n, mode) for n in mode.networks}

    kept = [m for m in spec.modes.values() if all(folders(task, m).values())]
    if not kept:
        missing = {m.configuration: [n.folder for n in m.networks if folders(task, m)[n.dataset] is None]
                   for m in spec.modes.values()}
        if len(missing) == 1:
            raise ModelError(f"TotalSegmentator's {task} weights are not here: "
                             f"{', '.join(next(iter(missing.values())))} missing", path=root)
        raise ModelError("none of TotalSegmentator's configurations is complete here: "
                         + "; ".join(f"{name} lacks {', '.join(f)}" for name, f in missing.items()), path=root)
    runs = required_runs(task, [m.configuration for m in kept], table)
    if task == STRUCTURES_CROP[0] and STRUCTURES_CROP not in runs:
        crop_mode = task_spec(STRUCTURES_CROP[0], table).modes[STRUCTURES_CROP[1]]
        if all(folders(STRUCTURES_CROP[0], crop_mode).values()):  # --structures needs it; optional otherwise
            runs.append(STRUCTURES_CROP)
    networks: dict[int, tuple[NetworkSpec, ModeSpec, TaskSpec, Path]] = {}
    for name, mode_name in runs:
        owner = task_spec(name, table)
        mode = owner.modes[mode_name]
        found = folders(name, mode)
        for network in mode.networks:
            folder = found[network.dataset]
            if folder is None:
                raise ModelError(f"{_purpose(task, spec, (name, mode_name), table)}, whose weights are not here: "
                                 f"{network.folder} is missing", path=root,
                                 hint=f"put {network.folder} beside the other DatasetNNN_* folders")
            known = networks.get(network.dataset)
            if known is not None and (known[1].trainer, known[1].nnunet_configuration) != (
                    mode.trainer, mode.nnunet_configuration):
                raise ModelError(f"dataset {network.dataset} is needed with two trainers or configurations", path=root)
            networks.setdefault(network.dataset, (network, mode, owner, folder))
    involved = sorted({name for name, _ in runs})
    out.parent.mkdir(parents=True, exist_ok=True)
    provenance: dict[str, Any] = {"source": "TotalSegmentator weights", "totalsegmentator_version": VERSION,
                                  "datasets": {}}
    with atomic_folder(out) as temp:
        for dataset_id, (network, mode, owner, folder) in networks.items():
            package = convert_network(folder, network, mode, owner)
            save_package(package, temp / part_folder_name(dataset_id))
            provenance["datasets"][str(dataset_id)] = {
                "folder": network.folder, "folds": package.provenance.get("folds"),
                "checkpoint_sha256": package.provenance.get("checkpoint_sha256"),
            }
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "id": f"totalsegmentator/{task}",
            "task": task,
            "labels": {str(value): name for value, name in spec.labels.items()},
            "tasks": {name: table[name] for name in involved},
            "parts": {str(dataset_id): part_folder_name(dataset_id) for dataset_id in networks},
            "configurations": {m.configuration: {"mode": m.name, "flag": MODE_FLAGS.get(m.name), "step": m.step,
                                                 "resample": m.resample,
                                                 "parts": [part_folder_name(n.dataset) for n in m.networks]}
                               for m in kept},
            "structures_crop": list(STRUCTURES_CROP) if STRUCTURES_CROP in runs and task == STRUCTURES_CROP[0] else None,
            "provenance": provenance,
        }
        (temp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out


def expected_values(network: NetworkSpec, owner: TaskSpec) -> dict[int, str]:
    """What a network predicts: a merged network its part's local classes, another the task's labels and
    the auxiliary ones TotalSegmentator removes afterwards."""
    if network.classes is not None:
        return dict(network.classes)
    return {**owner.labels, **owner.auxiliary_labels}


def fold_numbers(result_folder: Path, mode: ModeSpec) -> list[int | str]:
    """The task's folds; for ``folds: None`` every fold nnU-Net's predictor would find (fold_N with a
    checkpoint_final.pth, fold_all left out, in its folder-name order)."""
    if mode.folds is not None:
        return list(mode.folds)
    found = sorted(d.name for d in result_folder.glob("fold_*")
                   if d.is_dir() and d.name != "fold_all" and (d / "checkpoint_final.pth").is_file())
    folds = [int(name.split("_")[-1]) for name in found if name.split("_")[-1].isdigit()]
    if not folds:
        raise ModelError("no fold_N/checkpoint_final.pth here", path=result_folder)
    return folds  # type: ignore[return-value]


def convert_network(result_folder: Path, network: NetworkSpec, mode: ModeSpec, owner: TaskSpec) -> ModelPackage:
    """One network's nnU-Net result folder as a medseg package, checked against what the task expects."""
    package = import_nnunet(result_folder, folds=fold_numbers(result_folder, mode))
    expected = expected_values(network, owner)
    got = {value: name for value, name in package.names.items() if value}
    if set(got) != set(expected):  # TotalSegmentator uses the values only (its class maps name them)
        raise ModelError(f"dataset {network.dataset} does not predict TotalSegmentator's {len(expected)} "
                         f"'{owner.name}' classes (it has {len(got)} labels: values "
                         f"{_ranges(sorted(got))}, expected {_ranges(sorted(expected))})",
                         path=result_folder / "dataset.json")
    reader = _image_reader(result_folder)
    if reader not in SAME_ARRAY_READERS:
        raise ModelError(f"TotalSegmentator's networks read its resampled NIfTI with one of "
                         f"{', '.join(SAME_ARRAY_READERS)}; this one names {reader!r}",
                         path=result_folder / "plans.json")
    if set(package.configurations) != {mode.nnunet_configuration}:
        raise ModelError(f"expected the nnU-Net configuration {mode.nnunet_configuration}, found "
                         f"{', '.join(sorted(package.configurations))}", path=result_folder)
    # the networks saw RAS arrays only (the pipeline reorients itself; this is for a network run alone)
    package.configurations[mode.nnunet_configuration].orientation = "RAS"
    package.name = f"totalsegmentator/{owner.name}/{network.folder}"
    package.provenance.update({"totalsegmentator_dataset": network.dataset,
                               "totalsegmentator_task": owner.name, "resample": mode.resample})
    return package


def _ranges(values: list[int]) -> str:
    if not values:
        return "none"
    if values == list(range(values[0], values[-1] + 1)):
        return f"{values[0]}-{values[-1]}"
    return ", ".join(str(v) for v in values[:12]) + (" ..." if len(values) > 12 else "")


# TotalSegmentator hands nnU-Net a RAS NIfTI: each of these reads it as the same (z, y, x) array and spacing.
SAME_ARRAY_READERS = ("NibabelIOWithReorient", "NibabelIO", "SimpleITKIO")
REORIENTING_READER = "NibabelIOWithReorient"


def _image_reader(result_folder: Path) -> str | None:
    """The reader nnU-Net predicts with: plans.json's, else dataset.json's overwrite (as its planner fills it)."""
    plans = read_json_object(result_folder / "plans.json", "plans.json", ModelError)
    dataset = read_json_object(result_folder / "dataset.json", "dataset.json", ModelError)
    name = plans.get("image_reader_writer") or dataset.get("overwrite_image_reader_writer")
    return str(name).rsplit(".", 1)[-1] if name else "SimpleITKIO"  # nnU-Net's default for .nii.gz: SimpleITK


# --- reading a converted model ------------------------------------------------------------------


class PartRef:
    """One network of a converted model: its plan and labels at once, its weights when :meth:`load` is
    called (a run holds one network's weights at a time, as TotalSegmentator does, not all five)."""

    def __init__(self, path: Path):
        self.path = Path(path)
        manifest = read_json_object(self.path / MODEL_JSON, MODEL_JSON, ModelError)
        try:
            self.name = str(manifest["name"])
            self.labels = {int(value): str(name) for value, name in dict(manifest["labels"]).items()}
            configurations = dict(manifest["configurations"])
            if len(configurations) != 1:
                raise ValueError(f"one nnU-Net configuration expected, found {sorted(configurations)}")
            (self.configuration, plan), = configurations.items()
            self.plan = Plan.from_dict(plan)
            self.provenance = dict(manifest.get("provenance") or {})
        except (KeyError, TypeError, ValueError) as error:
            raise ModelError(f"{MODEL_JSON} is incomplete: {error}", path=self.path) from error

    @property
    def title(self) -> str:
        """What progress calls this network: its part's subject ("organs", "ribs") or its dataset."""
        folder = str(self.name).rsplit("/", 1)[-1]
        found = re.search(r"_part\d+_([a-z]+)_", folder)
        if found:
            return found.group(1)
        dataset = self.provenance.get("totalsegmentator_dataset")
        task = self.provenance.get("totalsegmentator_task")
        return f"{task or 'TotalSegmentator'} network" + (f" (dataset {dataset})" if dataset else "")

    @property
    def dataset(self) -> int | None:
        value = self.provenance.get("totalsegmentator_dataset")
        return int(value) if value is not None else None

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def spacing_mm(self) -> float:
        resample = self.provenance.get("resample")
        if resample:
            return float(max(resample))
        if self.provenance.get("spacing_mm"):  # format 1
            return float(self.provenance["spacing_mm"])
        return float(max(self.plan.target_spacing_transposed))

    def load(self) -> ModelPackage:
        return load_package(self.path)


@dataclass
class TotalSegConfiguration:
    """One configuration of a converted task: TotalSegmentator's sub-mode ``mode`` of ``task``."""

    name: str
    spacing_mm: float  # the coarsest resampling (or plans) spacing, for choosing by the series' spacing
    parts: list[PartRef]
    flag: str | None = None
    step: float = 0.5
    mode: str = "default"
    task: str = TASK
    resample: tuple[float, float, float] | None = None


@dataclass
class TotalSegModel:
    """A converted TotalSegmentator task: labels (TotalSegmentator's numbers and names), its configurations,
    and every network and task description its runs (crops, refinements) use."""

    path: Path
    labels: dict[int, str]
    configurations: dict[str, TotalSegConfiguration]
    crop_part: PartRef | None = None  # the network --structures crops with (the total task's 6 mm one)
    provenance: dict[str, Any] = field(default_factory=dict)
    name: str = f"totalsegmentator/{TASK}"
    task: str = TASK
    tasks: dict[str, Any] = field(default_factory=dict)  # the task table's entries this model's runs use
    parts: dict[int, PartRef] = field(default_factory=dict)
    structures_crop: tuple[str, str] | None = None

    @property
    def version(self) -> str:
        return VERSION

    def spec(self, task: str | None = None) -> TaskSpec:
        return task_spec(task or self.task, self.tasks)

    def part(self, dataset: int) -> PartRef:
        if dataset not in self.parts:
            raise ModelError(f"{self.name} has no converted network for dataset {dataset}", path=self.path,
                             hint="convert the task again with that network's weights beside the others")
        return self.parts[dataset]


def is_totalseg_model(path: str | Path) -> bool:
    manifest = Path(path) / MANIFEST
    if not manifest.is_file():
        return False
    try:
        return json.loads(manifest.read_text(encoding="utf-8")).get("format") == FORMAT_NAME
    except (OSError, ValueError, AttributeError):
        return False


def load_totalseg_model(path: str | Path) -> TotalSegModel:
    """Read a folder written by :func:`import_totalsegmentator_task` (parts are loaded once, shared)."""
    path = Path(path)
    manifest = read_json_object(path / MANIFEST, MANIFEST, ModelError)
    if manifest.get("format") != FORMAT_NAME:
        raise ModelError(f"{MANIFEST} does not describe a {FORMAT_NAME} model", path=path)
    version = manifest.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"model format version {version} is newer than this medseg understands ({FORMAT_VERSION})",
                         path=path, hint="update medseg")
    refs: dict[str, PartRef] = {}

    def part(name: Any) -> PartRef:
        if not isinstance(name, str) or os.path.basename(name) != name or not name:
            raise ModelError(f"{MANIFEST}: part {name!r} is not a folder name", path=path)
        if name not in refs:
            if not (path / name).is_dir():
                raise ModelError(f"{MANIFEST} names {name}, which is missing", path=path / name)
            refs[name] = PartRef(path / name)
        return refs[name]

    try:
        if version == 1:  # the total task only, before the task table (its parts are part_NNN)
            task = TASK
            tasks = {TASK: load_task_table()[TASK]}
            names = {p for entry in dict(manifest["configurations"]).values() for p in entry["parts"]}
            names |= {manifest["crop_part"]} if manifest.get("crop_part") else set()
            parts = {int(name.split("_")[-1]): part(name) for name in sorted(names)}
            chosen = {str(name): next(m for m, s in tasks[TASK]["modes"].items() if s["configuration"] == name)
                      for name in dict(manifest["configurations"])}
            crop = ("total", "fastest") if manifest.get("crop_part") else None
        else:
            task = str(manifest["task"])
            tasks = dict(manifest["tasks"])
            parts = {int(dataset): part(name) for dataset, name in dict(manifest["parts"]).items()}
            chosen = {str(name): str(entry["mode"]) for name, entry in dict(manifest["configurations"]).items()}
            crop = tuple(manifest["structures_crop"]) if manifest.get("structures_crop") else None
        labels = {int(value): str(name) for value, name in dict(manifest["labels"]).items()}
        spec = task_spec(task, tasks)
        configurations = {}
        for name, mode_name in chosen.items():
            mode = spec.modes[mode_name]
            members = [parts[n.dataset] for n in mode.networks]
            spacing = max(mode.resample) if mode.resample else max(max(p.plan.target_spacing_transposed)
                                                                  for p in members)
            configurations[name] = TotalSegConfiguration(
                name=name, spacing_mm=float(spacing), parts=members, flag=MODE_FLAGS.get(mode_name), step=mode.step,
                mode=mode_name, task=task, resample=mode.resample)
    except (KeyError, TypeError, ValueError, StopIteration) as error:
        raise ModelError(f"{MANIFEST} is incomplete: {error!r}", path=path) from error
    if not configurations:
        raise ModelError(f"{MANIFEST} lists no configuration", path=path)
    crop_part = None
    if crop is not None:
        crop_mode = task_spec(crop[0], tasks).modes[crop[1]]
        crop_part = parts.get(crop_mode.networks[0].dataset)
    return TotalSegModel(path=path, labels=labels, configurations=configurations, crop_part=crop_part,
                         provenance=dict(manifest.get("provenance") or {}),
                         name=str(manifest.get("id") or f"totalsegmentator/{task}"), task=task, tasks=tasks,
                         parts=parts, structures_crop=crop)
