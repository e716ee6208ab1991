"""TotalSegmentator's CT tasks as data: how TotalSegmentator 2.18.0 runs each of them.

The table is ``resources/models/totalseg_tasks.json``, written by
``resources/models/generate_totalseg_tasks.py`` from TotalSegmentator's own tables and checked against
them by tests/model/test_totalseg_tasks.py. A task has one mode (``default``) or several (``total``:
``default``/``fast``/``fastest``, medseg's configurations ``1.5mm``/``3mm``/``6mm``); a mode runs one
network or several merged in order, after an optional crop made by another task's run.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

from medseg.errors import ModelError

TABLE_FILE = "totalseg_tasks.json"
FORMAT = "medseg-totalsegmentator-tasks"


@dataclass(frozen=True)
class NetworkSpec:
    dataset: int
    folder: str  # DatasetNNN_...: the release zip's name and the folder in TotalSegmentator's weights directory
    release: str | None  # the GitHub release tag; None for the licensed networks (TotalSegmentator's licence server)
    classes: dict[int, str] | None  # a merged network's local value -> name; None: its values are the task's


@dataclass(frozen=True)
class CropSpec:
    structures: tuple[str, ...]
    task: str  # the run that makes the mask: that task's mode, run whole
    mode: str
    addon_mm: tuple[float, float, float]  # the effective margin (TotalSegmentator forces 20 mm without crop_model)


@dataclass(frozen=True)
class RemoveOutsideSpec:
    structures: tuple[str, ...]  # found by the crop run
    dilation_mm: float


@dataclass(frozen=True)
class RefineSpec:
    task: str  # vertebrae_pp_refined: the vertebrae_body network's mask
    mode: str
    keep_value: int
    dilation_mm: float


@dataclass(frozen=True)
class ModeSpec:
    name: str  # TotalSegmentator's sub-mode: default, fast, fastest
    configuration: str  # medseg's name for it (the catalogue's)
    networks: tuple[NetworkSpec, ...]
    trainer: str
    nnunet_configuration: str
    plans: str
    folds: tuple[int, ...] | None  # None: every fold folder present
    resample: tuple[float, float, float] | None  # x, y, z mm; None: nnU-Net's own resampling only
    step: float
    crop: CropSpec | None
    robust_crop: bool
    remove_outside: RemoveOutsideSpec | None


@dataclass(frozen=True)
class TaskSpec:
    name: str
    commercial: bool
    labels: dict[int, str]
    auxiliary_labels: dict[int, str]
    postprocess: dict[str, Any] | None
    refine: RefineSpec | None
    modes: dict[str, ModeSpec]

    def mode_for(self, configuration: str) -> ModeSpec:
        for mode in self.modes.values():
            if mode.configuration == configuration:
                return mode
        raise ModelError(f"TotalSegmentator task {self.name!r} has no configuration {configuration!r}",
                         hint=f"it has {', '.join(m.configuration for m in self.modes.values())}")

    def configuration_for(self, fast: bool = False, fastest: bool = False) -> str:
        """The configuration TotalSegmentator's --fast / --fastest pick (get_task_config: --fastest falls
        back to the fast mode where a task has no fastest one, e.g. body's 6 mm network)."""
        mode = "fast" if fast else ("fastest" if fastest else "default")
        if mode not in self.modes:
            mode = "fast" if fast or fastest else "default"
        if mode not in self.modes:
            raise ModelError(f"TotalSegmentator's {self.name} has no {'--fast' if fast else '--fastest'} mode",
                             hint=f"its configuration: {', '.join(m.configuration for m in self.modes.values())}")
        return self.modes[mode].configuration

    def dataset_ids(self) -> list[int]:
        return [n.dataset for mode in self.modes.values() for n in mode.networks]


def table_path() -> Path:
    return Path(str(resources.files("medseg.resources") / "models" / TABLE_FILE))


@lru_cache(maxsize=1)
def load_task_table() -> dict[str, dict[str, Any]]:
    path = table_path()
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as error:
        raise ModelError(f"cannot read TotalSegmentator's task table: {error}", path=path) from error
    if not isinstance(document, dict) or document.get("format") != FORMAT:
        raise ModelError(f"not a {FORMAT} file", path=path)
    return dict(document["tasks"])


def task_spec(task: str, table: dict[str, dict[str, Any]] | None = None) -> TaskSpec:
    """The task as TotalSegmentator runs it (from ``table``, e.g. a converted model's copy, else the shipped one)."""
    table = table if table is not None else load_task_table()
    if task not in table:
        raise ModelError(f"{task!r} is not one of TotalSegmentator's CT tasks medseg knows",
                         hint=f"known: {', '.join(sorted(table))}")
    return parse_task(task, table[task])


def parse_task(task: str, raw: dict[str, Any]) -> TaskSpec:
    try:
        modes = {name: _mode(name, value) for name, value in dict(raw["modes"]).items()}
        refine = raw.get("refine")
        return TaskSpec(
            name=task, commercial=bool(raw.get("commercial", False)),
            labels={int(k): str(v) for k, v in dict(raw["labels"]).items()},
            auxiliary_labels={int(k): str(v) for k, v in dict(raw.get("auxiliary_labels") or {}).items()},
            postprocess=dict(raw["postprocess"]) if raw.get("postprocess") else None,
            refine=RefineSpec(str(refine["task"]), str(refine["mode"]), int(refine["keep_value"]),
                              float(refine["dilation_mm"])) if refine else None,
            modes=modes)
    except (KeyError, TypeError, ValueError) as error:
        raise ModelError(f"TotalSegmentator task {task!r} is incompletely described: {error!r}") from error


def _mode(name: str, raw: dict[str, Any]) -> ModeSpec:
    crop = raw.get("crop")
    remove = raw.get("remove_outside")
    networks = tuple(
        NetworkSpec(int(n["dataset"]), str(n["folder"]), n.get("release"),
                    {int(k): str(v) for k, v in n["classes"].items()} if n.get("classes") else None)
        for n in raw["networks"])
    return ModeSpec(
        name=name, configuration=str(raw["configuration"]), networks=networks, trainer=str(raw["trainer"]),
        nnunet_configuration=str(raw["nnunet_configuration"]), plans=str(raw["plans"]),
        folds=tuple(int(f) for f in raw["folds"]) if raw.get("folds") is not None else None,
        resample=tuple(float(v) for v in raw["resample"]) if raw.get("resample") is not None else None,  # type: ignore[arg-type]
        step=float(raw["step"]),
        crop=CropSpec(tuple(crop["structures"]), str(crop["task"]), str(crop["mode"]),
                      tuple(float(v) for v in crop["addon_mm"])) if crop else None,  # type: ignore[arg-type]
        robust_crop=bool(raw.get("robust_crop", False)),
        remove_outside=RemoveOutsideSpec(tuple(remove["structures"]), float(remove["dilation_mm"])) if remove else None,
    )


def required_runs(task: str, configurations: list[str] | None = None,
                  table: dict[str, dict[str, Any]] | None = None) -> list[tuple[str, str]]:
    """(task, mode) of every run a task's configurations need: their own, their crops', recursively, the
    refinement's. The task's own modes come first."""
    spec = task_spec(task, table)
    modes = [m for m in spec.modes.values() if configurations is None or m.configuration in configurations]
    out: list[tuple[str, str]] = [(task, m.name) for m in modes]
    pending = list(out)
    while pending:
        name, mode_name = pending.pop(0)
        current = task_spec(name, table)
        mode = current.modes[mode_name]
        extra = []
        if mode.crop is not None:
            extra.append((mode.crop.task, mode.crop.mode))
        if current.refine is not None:
            extra.append((current.refine.task, current.refine.mode))
        for item in extra:
            if item not in out:
                out.append(item)
                pending.append(item)
    return out
