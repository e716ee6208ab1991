"""TotalSegmentator's weights as one medseg model folder, and reading that folder back.

TotalSegmentator keeps one nnU-Net result folder per dataset under its weights directory
(``<weights>/DatasetNNN_<name>/<Trainer>__nnUNetPlans__3d_fullres/``). The conversion turns
each dataset found into an ordinary medseg package (``part_NNN/``: plans and safetensors, read
with the safe loader, nothing unpickled) and writes ``totalseg.json``, which says how the parts
make the task's configurations. A configuration whose datasets are not all there is left out.
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
from medseg.model.totalseg.classes import (
    CONFIGURATION_FLAGS, CONFIGURATIONS, CROP_DATASET, DATASETS, MODEL_ID, STEP_SIZE, TASK, VERSION, Dataset,
    part_labels, total_labels,
)

MANIFEST = "totalseg.json"
FORMAT_NAME = "medseg-totalsegmentator"
FORMAT_VERSION = 1
PLANS_NAME = "nnUNetPlans"
NNUNET_CONFIGURATION = "3d_fullres"


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


def dataset_result_folder(weights_root: Path, dataset: Dataset) -> Path | None:
    """The nnU-Net result folder of a dataset, or None when its weights are absent."""
    candidates = sorted(weights_root.glob(f"Dataset{dataset.dataset_id:03d}_*"))
    if not candidates:
        return None
    if len(candidates) > 1:  # nnU-Net itself finds a dataset by its id prefix: two would be ambiguous
        raise ModelError(f"two folders for dataset {dataset.dataset_id}: "
                         f"{', '.join(c.name for c in candidates)}", path=weights_root)
    folder = candidates[0] / f"{dataset.trainer}__{PLANS_NAME}__{NNUNET_CONFIGURATION}"
    if not folder.is_dir():
        raise ModelError(f"{candidates[0].name} has no {folder.name} folder", path=candidates[0])
    return folder


def import_totalsegmentator_task(weights_folder: str | Path, out: str | Path, task: str = TASK) -> Path:
    """Convert TotalSegmentator's weights for ``task`` into the medseg model folder ``out``; returns ``out``.

    Every configuration whose datasets are all present is converted; ``out`` is written whole or not
    at all, and an existing folder is replaced only when it is a TotalSegmentator model medseg wrote.
    """
    if task != TASK:
        raise ModelError(f"TotalSegmentator task {task!r} is not supported yet; medseg runs {TASK!r}")
    out = Path(out)
    if out.exists() and not is_totalseg_model(out):
        raise ModelError("refusing to replace a folder that is not a TotalSegmentator model medseg wrote", path=out)
    root = find_weights_root(weights_folder)
    found = {dataset_id: dataset_result_folder(root, DATASETS[dataset_id]) for dataset_id in DATASETS}
    available = {dataset_id: folder for dataset_id, folder in found.items() if folder is not None}
    configurations = {name: ids for name, ids in CONFIGURATIONS.items() if all(i in available for i in ids)}
    if not configurations:
        missing = {name: [DATASETS[i].folder for i in ids if i not in available] for name, ids in CONFIGURATIONS.items()}
        raise ModelError("none of TotalSegmentator's configurations is complete here: "
                         + "; ".join(f"{name} lacks {', '.join(folders)}" for name, folders in missing.items()),
                         path=root)
    needed = sorted({i for ids in configurations.values() for i in ids} | ({CROP_DATASET} & set(available)))
    out.parent.mkdir(parents=True, exist_ok=True)
    provenance: dict[str, Any] = {"source": "TotalSegmentator weights", "totalsegmentator_version": VERSION,
                                  "datasets": {}}
    with atomic_folder(out) as temp:
        for dataset_id in needed:
            package = convert_dataset(available[dataset_id], DATASETS[dataset_id])
            save_package(package, temp / part_folder_name(dataset_id))
            provenance["datasets"][str(dataset_id)] = {
                "folder": DATASETS[dataset_id].folder,
                "checkpoint_sha256": package.provenance.get("checkpoint_sha256"),
            }
        manifest = {
            "format": FORMAT_NAME,
            "format_version": FORMAT_VERSION,
            "id": MODEL_ID,
            "task": task,
            "labels": {str(value): name for value, name in total_labels().items()},
            "configurations": {
                name: {"spacing_mm": DATASETS[ids[0]].spacing_mm, "parts": [part_folder_name(i) for i in ids],
                       "flag": CONFIGURATION_FLAGS[name], "step": STEP_SIZE}
                for name, ids in configurations.items()
            },
            "crop_part": part_folder_name(CROP_DATASET) if CROP_DATASET in available else None,
            "provenance": provenance,
        }
        (temp / MANIFEST).write_text(json.dumps(manifest, indent=1), encoding="utf-8")
    return out


def convert_dataset(result_folder: Path, dataset: Dataset) -> ModelPackage:
    """One dataset's nnU-Net result folder as a medseg package, checked against what the task expects."""
    package = import_nnunet(result_folder, folds=[0])
    expected = part_labels(dataset)
    got = {value: name for value, name in package.names.items() if value}
    if got != expected:
        wrong = sorted(set(got.items()) ^ set(expected.items()))[:4]
        raise ModelError(f"dataset {dataset.dataset_id} does not predict TotalSegmentator's {len(expected)} "
                         f"'{TASK}' classes (it has {len(got)}; first differences {wrong})",
                         path=result_folder / "dataset.json")
    reader = _image_reader(result_folder)
    if reader != REORIENTING_READER:
        raise ModelError(f"TotalSegmentator's datasets read images with {REORIENTING_READER}; this one names "
                         f"{reader!r}", path=result_folder / "plans.json")
    # the networks saw RAS arrays only (the pipeline reorients itself; this is for the part run alone)
    package.configurations[NNUNET_CONFIGURATION].orientation = "RAS"
    package.name = f"{MODEL_ID}/{dataset.folder}"
    package.provenance.update({"totalsegmentator_dataset": dataset.dataset_id, "spacing_mm": dataset.spacing_mm})
    return package


REORIENTING_READER = "NibabelIOWithReorient"


def _image_reader(result_folder: Path) -> str | None:
    """The reader nnU-Net predicts with: plans.json's, else dataset.json's overwrite (as its planner fills it)."""
    plans = read_json_object(result_folder / "plans.json", "plans.json", ModelError)
    dataset = read_json_object(result_folder / "dataset.json", "dataset.json", ModelError)
    name = plans.get("image_reader_writer") or dataset.get("overwrite_image_reader_writer")
    return str(name).rsplit(".", 1)[-1] if name else None


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
            self.plan = Plan.from_dict(dict(manifest["configurations"])[NNUNET_CONFIGURATION])
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
        return f"{self.spacing_mm:g} mm network" + (f" (dataset {dataset})" if dataset else "")

    @property
    def num_classes(self) -> int:
        return len(self.labels)

    @property
    def spacing_mm(self) -> float:
        return float(self.provenance.get("spacing_mm", self.plan.target_spacing_transposed[0]))

    def load(self) -> ModelPackage:
        return load_package(self.path)


@dataclass
class TotalSegConfiguration:
    name: str
    spacing_mm: float
    parts: list[PartRef]
    flag: str | None = None
    step: float = STEP_SIZE


@dataclass
class TotalSegModel:
    """A converted TotalSegmentator task: labels (TotalSegmentator's numbers and names) and its configurations."""

    path: Path
    labels: dict[int, str]
    configurations: dict[str, TotalSegConfiguration]
    crop_part: PartRef | None = None
    provenance: dict[str, Any] = field(default_factory=dict)
    name: str = MODEL_ID

    @property
    def version(self) -> str:
        return VERSION


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
    if not isinstance(manifest.get("format_version"), int) or manifest["format_version"] > FORMAT_VERSION:
        raise ModelError(f"model format version {manifest.get('format_version')} is newer than this medseg "
                         f"understands ({FORMAT_VERSION})", path=path, hint="update medseg")
    packages: dict[str, PartRef] = {}

    def part(name: Any) -> PartRef:
        if not isinstance(name, str) or os.path.basename(name) != name or not name:
            raise ModelError(f"{MANIFEST}: part {name!r} is not a folder name", path=path)
        if name not in packages:
            packages[name] = PartRef(path / name)
        return packages[name]

    try:
        labels = {int(value): str(name) for value, name in dict(manifest["labels"]).items()}
        configurations = {}
        for name, entry in dict(manifest["configurations"]).items():
            configurations[str(name)] = TotalSegConfiguration(
                name=str(name), spacing_mm=float(entry["spacing_mm"]), parts=[part(p) for p in entry["parts"]],
                flag=entry.get("flag"), step=float(entry.get("step", STEP_SIZE)))
    except (KeyError, TypeError, ValueError) as error:
        raise ModelError(f"{MANIFEST} is incomplete: {error}", path=path) from error
    if not configurations:
        raise ModelError(f"{MANIFEST} lists no configuration", path=path)
    crop = manifest.get("crop_part")
    return TotalSegModel(path=path, labels=labels, configurations=configurations,
                         crop_part=part(crop) if crop else None, provenance=dict(manifest.get("provenance") or {}),
                         name=str(manifest.get("id") or MODEL_ID))
