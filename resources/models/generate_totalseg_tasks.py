"""Write ``totalseg_tasks.json``: how TotalSegmentator runs each of its CT tasks, read from its own code.

Run with the Python that has TotalSegmentator installed (a test dependency of medseg, never a runtime one):

    python resources/models/generate_totalseg_tasks.py            # writes totalseg_tasks.json beside this file
    python resources/models/generate_totalseg_tasks.py --check    # exit 1 when the file differs

The facts come from TotalSegmentator's tables (``map_tasks_config``: TASK_CONFIGS, TASK_ID_WEIGHTS_CONFIGS;
``map_to_binary``: class maps, part maps) and from its ``get_task_config``, so each task's settings are
the ones its ``totalsegmentator()`` ends up using (defaults filled in, plans "nnUNetPlans"). What its code
decides in branches rather than tables is restated here and checked where a table allows it:

* the crop model: the 6 mm ``total`` network (298), the 3 mm one (297) for ``robust_crop``, the 6 mm body
  network (300) when a crop structure is ``body_trunc``/``body_extremities``, or the task ``crop_model``
  names (run whole); ``crop_addon`` is forced to 20 mm on each axis unless ``crop_model`` is set;
* the tile step: 0.8 for the ``total`` family, 0.5 for every other task;
* the task-specific post-processing (``body``: keep the largest body_trunc blob, drop body_extremities
  blobs under 50 000 mm3; ``vertebrae_pp``: its relabelling and 3 mm dilation; ``vertebrae_pp_refined``:
  vertebrae_pp, then the vertebrae_body network's mask with a 2 mm dilation) and the removal of the
  ``<task>_auxiliary`` labels.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

OUTPUT = Path(__file__).with_name("totalseg_tasks.json")
FORMAT = "medseg-totalsegmentator-tasks"
FORMAT_VERSION = 1

UNPUBLISHED = {"test", "total_highres_test"}
MR_TASKS = {"vertebrae_mr", "brain_aneurysm"}  # MR tasks whose names do not end in "_mr"

STEP_08_TASKS = {"total", "total_v3", "total_mr"}  # nnunet.py: the tile step of the total models
FORCED_CROP_ADDON_MM = [20, 20, 20]  # python_api.py: whenever crop_model is None
BODY_CROP_STRUCTURES = {"body_trunc", "body_extremities"}

# Branches of nnunet.py / python_api.py that name tasks (restated; see the module docstring).
POSTPROCESS = {
    "body": {"kind": "body", "keep_largest": ["body_trunc"], "remove_small_blobs": ["body_extremities"],
             "min_blob_mm3": 50000},
    "vertebrae_pp": {"kind": "vertebrae_pp", "min_size_mm3": 100, "dilation_mm": 3},
}
REFINE = {"vertebrae_pp_refined": {"task": "vertebrae_body", "mode": "default", "dataset": 305, "keep_value": 1,
                                   "dilation_mm": 2}}
PREDICTION_TASK = {"vertebrae_pp_refined": "vertebrae_pp"}  # the task name TotalSegmentator predicts under
MULTI_NETWORK_PARTS = {  # task -> (part maps, dataset id -> part name), as nnunet.py picks them
    "total": ("class_map_5_parts", "map_taskid_to_partname_ct"),
    "total_v3": ("class_map_5_parts_total_v3", "map_taskid_to_partname_ct_v3"),
    "headneck_muscles": ("class_map_parts_headneck_muscles", "map_taskid_to_partname_headneck_muscles"),
}


def ct_tasks(tasks: Any) -> list[str]:
    return [name for name in tasks.TASK_CONFIGS
            if name not in UNPUBLISHED and name not in MR_TASKS and not name.endswith("_mr")]


def _modes(raw: dict[str, Any]) -> list[tuple[str, bool, bool]]:
    """(mode, fast, fastest) for each sub-mode TotalSegmentator defines for a task."""
    if "sub_modes" not in raw:
        return [("default", False, False)]
    flags = {"default": (False, False), "fast": (True, False), "fastest": (False, True)}
    return [(mode, *flags[mode]) for mode in raw["sub_modes"]]


def _resample(value: Any) -> list[float] | None:
    if value is None:
        return None
    return [float(v) for v in value] if isinstance(value, (list, tuple)) else [float(value)] * 3


def _configuration_name(raw: dict[str, Any], resample: list[float] | None) -> str:
    if "sub_modes" not in raw:
        return "default"
    assert resample is not None and len(set(resample)) == 1, resample
    return f"{resample[0]:g}mm"


def _crop_source(task: str, config: dict[str, Any], tasks: Any) -> dict[str, Any] | None:
    """Which run makes the crop mask, as python_api.totalsegmentator() picks it."""
    if config["crop"] is None and not config["cascade"]:
        return None
    if config["crop_model"] is not None:
        return {"task": config["crop_model"], "mode": "default", "whole_run": True}
    if BODY_CROP_STRUCTURES & set(config["crop"] or []):
        source = {"task": "body", "mode": "fast", "dataset": 300, "trainer": "nnUNetTrainer", "resample": 6.0}
    elif config["robust_crop"]:
        source = {"task": "total", "mode": "fast", "dataset": 297,
                  "trainer": "nnUNetTrainer_4000epochs_NoMirroring", "resample": 3.0}
    else:
        source = {"task": "total", "mode": "fastest", "dataset": 298,
                  "trainer": "nnUNetTrainer_4000epochs_NoMirroring", "resample": 6.0}
    # the restated choice must be the very network of that task's mode in TotalSegmentator's table
    sub = tasks.TASK_CONFIGS[source["task"]]["sub_modes"][source["mode"]]
    assert (sub["task_id"], sub["trainer"], float(sub["resample"])) == (
        source["dataset"], source["trainer"], source["resample"]), (task, source, sub)
    return {"task": source["task"], "mode": source["mode"], "whole_run": False}


def _networks(task: str, ids: Any, binary: Any, tasks: Any) -> list[dict[str, Any]]:
    ids = list(ids) if isinstance(ids, list) else [ids]
    out = []
    for dataset in ids:
        weights = tasks.TASK_ID_WEIGHTS_CONFIGS[dataset]
        network: dict[str, Any] = {"dataset": int(dataset), "folder": weights["foldername"],
                                   "release": weights.get("version"), "classes": None}
        if len(ids) > 1:
            parts_name, by_id_name = MULTI_NETWORK_PARTS[task]
            part_map = getattr(binary, parts_name)[getattr(binary, by_id_name)[dataset]]
            network["classes"] = {str(k): v for k, v in sorted(part_map.items())}
        out.append(network)
    return out


def build(binary: Any, tasks: Any, python_api: Any, version: str) -> dict[str, Any]:
    # get_task_config() asks for a licence number for the licensed tasks; the facts are the same without one
    original = python_api.show_license_info
    python_api.show_license_info = lambda: None
    try:
        table = {}
        for task in ct_tasks(tasks):
            raw = tasks.TASK_CONFIGS[task]
            prediction_task = PREDICTION_TASK.get(task, task)
            modes = {}
            for mode, fast, fastest in _modes(raw):
                config = python_api.get_task_config(task, fast=fast, fastest=fastest, quiet=True, robust_crop=False,
                                                    plans="nnUNetPlans")
                resample = _resample(config["resample"])
                crop = None
                source = _crop_source(task, config, tasks)
                if source is not None:
                    crop = {"structures": list(config["crop"]), **source,
                            "addon_mm": list(FORCED_CROP_ADDON_MM if config["crop_model"] is None
                                             else config["crop_addon"])}
                    crop_labels = set(binary.class_map[source["task"]].values())
                    assert set(crop["structures"]) <= crop_labels, (task, crop)
                remove_outside = None
                if config["remove_outside"] is not None:
                    assert source is not None  # TotalSegmentator makes that mask from the crop run only
                    remove_outside = {"structures": list(config["remove_outside"]),
                                      "dilation_mm": config["remove_outside_dilation"]}
                assert not config["cascade"] and config["remove_mask"] is None, task  # no CT task uses them
                modes[mode] = {
                    "configuration": _configuration_name(raw, resample),
                    "networks": _networks(prediction_task if len(_ids(config["task_id"])) > 1 else task,
                                          config["task_id"], binary, tasks),
                    "trainer": config["trainer"],
                    "nnunet_configuration": config["model"],
                    "plans": config["plans"],
                    "folds": list(config["folds"]) if config["folds"] is not None else None,
                    "resample": resample,
                    "step": 0.8 if prediction_task in STEP_08_TASKS else 0.5,
                    "crop": crop,
                    "robust_crop": bool(config["robust_crop"]),
                    "remove_outside": remove_outside,
                }
            auxiliary = binary.class_map.get(prediction_task + "_auxiliary", {})
            table[task] = {
                "commercial": bool(raw.get("commercial", False)),
                "labels": {str(k): v for k, v in sorted(binary.class_map[task].items())},
                "auxiliary_labels": {str(k): v for k, v in sorted(auxiliary.items())},
                "postprocess": POSTPROCESS.get(prediction_task),
                "refine": REFINE.get(task),
                "modes": modes,
            }
        for task, entry in table.items():  # every task a crop or a refinement runs is in the table too
            for mode in entry["modes"].values():
                if mode["crop"]:
                    assert mode["crop"]["mode"] in table[mode["crop"]["task"]]["modes"], (task, mode["crop"])
            if entry["refine"]:
                refine = entry["refine"]
                assert table[refine["task"]]["modes"][refine["mode"]]["networks"][0]["dataset"] == refine["dataset"]
    finally:
        python_api.show_license_info = original
    return {"format": FORMAT, "format_version": FORMAT_VERSION, "totalsegmentator_version": version,
            "generated_by": "resources/models/generate_totalseg_tasks.py", "tasks": table}


def _ids(value: Any) -> list[int]:
    return list(value) if isinstance(value, list) else [value]


def generate() -> dict[str, Any]:
    """The table, from the TotalSegmentator installed in this Python."""
    import importlib.metadata

    from totalsegmentator import map_tasks_config, map_to_binary, python_api

    return build(map_to_binary, map_tasks_config, python_api, importlib.metadata.version("TotalSegmentator"))


def render(table: dict[str, Any]) -> str:
    return json.dumps(table, indent=1) + "\n"


if __name__ == "__main__":
    text = render(generate())
    if "--check" in sys.argv[1:]:
        same = OUTPUT.is_file() and OUTPUT.read_text(encoding="utf-8") == text
        print("up to date" if same else f"{OUTPUT.name} differs from TotalSegmentator's tables: regenerate it")
        sys.exit(0 if same else 1)
    OUTPUT.write_text(text, encoding="utf-8")
    print(f"wrote {OUTPUT}")
