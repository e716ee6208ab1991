"""TotalSegmentator's CT tasks as medseg catalogue entries, read from TotalSegmentator's own code.

Two uses:

- the oracle of ``test_catalogue.py``: what TotalSegmentator 2.18.0 itself says about each task
  (class maps, dataset ids, weight folders and releases, resampling, licence flags), to compare with
  the catalogue medseg ships;
- the maintainer's tool when TotalSegmentator publishes a new release:
  ``python tests/catalogue/totalsegmentator_catalogue.py SRC`` prints the entries for the
  TotalSegmentator package at SRC (``pip download totalsegmentator==X --no-deps``, unzip), to merge
  into ``resources/models/catalogue.json`` by hand (titles and citations are medseg's own words).

Only TotalSegmentator's pure-data modules are imported (``map_to_binary``, ``map_tasks_config``):
no torch, no weights.
"""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

VERSION = "2.18.0"
RELEASES = "https://github.com/wasserth/TotalSegmentator/releases/download"
LICENCE_FORM = "https://backend.totalsegmentator.com/license-academic/"
# Tasks TotalSegmentator lists that are not published models (their weight versions say "TODO").
UNPUBLISHED = {"test", "total_highres_test"}
MR_TASKS = {"brain_aneurysm"}  # MR tasks whose names do not end in "_mr"


def load_modules(source: str | Path | None = None) -> tuple[Any, Any]:
    """TotalSegmentator's ``map_to_binary`` and ``map_tasks_config`` (from ``source``, else the installed package)."""
    if source is not None:
        sys.path.insert(0, str(Path(source)))
    try:
        return (importlib.import_module("totalsegmentator.map_to_binary"),
                importlib.import_module("totalsegmentator.map_tasks_config"))
    finally:
        if source is not None:
            sys.path.remove(str(Path(source)))


def ct_tasks(binary: Any, tasks: Any) -> list[str]:
    """TotalSegmentator's published CT tasks, in its own order of tasks."""
    names = [name for name in tasks.TASK_CONFIGS if name not in UNPUBLISHED]
    return [name for name in names if not name.endswith("_mr") and name not in MR_TASKS and name in binary.class_map]


def dataset_ids(config: dict[str, Any]) -> dict[str, list[int]]:
    """Configuration name -> the nnU-Net dataset ids it runs (one part per id)."""
    if "sub_modes" in config:
        return {mode: _ids(sub["task_id"]) for mode, sub in config["sub_modes"].items()}
    return {"default": _ids(config["task_id"])}


def _ids(value: Any) -> list[int]:
    return [int(v) for v in value] if isinstance(value, list) else [int(value)]


def resample(config: dict[str, Any], mode: str) -> list[float] | None:
    """The task's resampling (x, y, z mm), or None: TotalSegmentator then leaves the spacing alone."""
    value = config["sub_modes"][mode].get("resample") if "sub_modes" in config else config.get("resample")
    if value is None:
        return None
    return [float(v) for v in value] if isinstance(value, list) else [float(value)] * 3


def groups(binary: Any, task: str) -> dict[int, str]:
    """Label value -> the part (network) that predicts it, for tasks made of several networks."""
    if task == "total":
        parts, by_id = binary.class_map_5_parts, binary.map_taskid_to_partname_ct
    elif task == "total_v3":
        parts, by_id = binary.class_map_5_parts_total_v3, binary.map_taskid_to_partname_ct_v3
    elif task == "headneck_muscles":
        parts, by_id = binary.class_map_parts_headneck_muscles, binary.map_taskid_to_partname_headneck_muscles
    else:
        return {}
    names = {name: value for value, name in binary.class_map[task].items()}
    found = {}
    for part in by_id.values():
        if part == "test":  # TotalSegmentator's own test network (dataset 517), not part of the task
            continue
        for name in parts[part].values():
            found[names[name]] = part.replace("class_map_part_", "")
    return found


def reference(source: str | Path | None = None) -> dict[str, dict[str, Any]]:
    """Per CT task, what TotalSegmentator's code says: classes, datasets, weights, resampling, licence."""
    binary, tasks = load_modules(source)
    out = {}
    for task in ct_tasks(binary, tasks):
        config = {**tasks.DEFAULT_CONFIG, **tasks.TASK_CONFIGS[task]}
        ids = dataset_ids(tasks.TASK_CONFIGS[task])
        part_of = groups(binary, task)
        licensed = task in binary.commercial_models
        weights = {}
        for dataset in sorted({i for values in ids.values() for i in values}):
            record = tasks.TASK_ID_WEIGHTS_CONFIGS[dataset]
            weights[dataset] = {"folder": record["foldername"], "release": record.get("version")}
        out[task] = {
            "classes": {int(v): n for v, n in binary.class_map[task].items()},
            "groups": part_of,
            "datasets": ids,
            "weights": weights,
            "resample_xyz_mm": {mode: resample(tasks.TASK_CONFIGS[task], mode) for mode in ids},
            "trainer": {mode: (tasks.TASK_CONFIGS[task]["sub_modes"][mode]["trainer"]
                               if "sub_modes" in tasks.TASK_CONFIGS[task] else config["trainer"]) for mode in ids},
            "nnunet_configuration": config["model"],
            "folds": config["folds"],
            "crop": config["crop"],
            "licensed": licensed,
        }
    return out


def url(weights: dict[str, Any]) -> str | None:
    """Where TotalSegmentator downloads an open model's zip from (licensed ones come from its licence server)."""
    return f"{RELEASES}/{weights['release']}/{weights['folder']}.zip" if weights.get("release") else None


if __name__ == "__main__":
    print(json.dumps(reference(sys.argv[1] if len(sys.argv) > 1 else None), indent=1, default=str))
