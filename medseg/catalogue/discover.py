"""Find the nnU-Net result folders a user already has: one folder, a TotalSegmentator home or
weights folder (``~/.totalsegmentator``, ``$TOTALSEG_HOME_DIR``, ``$TOTALSEG_WEIGHTS_PATH``), or
the unpacked zip of one TotalSegmentator task, and say which catalogue entries they make."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from medseg.catalogue.entries import Catalogue, Configuration, ModelEntry
from medseg.errors import ModelError

DATASET_FOLDER = re.compile(r"^Dataset(\d{3,})_")
CHECKPOINTS = ("checkpoint_final.pth", "checkpoint_best.pth")
MAX_DEPTH = 5


@dataclass(frozen=True)
class FoundResult:
    folder: Path  # the nnU-Net result folder (<Trainer>__<Plans>__<configuration>)
    dataset: int | None  # from the DatasetNNN_ folder above it
    dataset_folder: str  # that folder's name ("" when there is none)

    @property
    def trainer(self) -> str:
        return self.folder.name.split("__")[0]

    @property
    def configuration(self) -> str:
        parts = self.folder.name.split("__")
        return parts[2] if len(parts) == 3 else ""


def is_result_folder(folder: Path) -> bool:
    return ((folder / "dataset.json").is_file() and (folder / "plans.json").is_file()
            and any((fold / name).is_file() for fold in folder.glob("fold_*") for name in CHECKPOINTS))


def totalsegmentator_weights() -> list[Path]:
    """Where TotalSegmentator keeps its weights on this machine, as it decides it (existing folders only)."""
    candidates = []
    if os.environ.get("TOTALSEG_WEIGHTS_PATH"):
        candidates.append(Path(os.environ["TOTALSEG_WEIGHTS_PATH"]).expanduser())
    home = Path(os.environ["TOTALSEG_HOME_DIR"]).expanduser() if os.environ.get("TOTALSEG_HOME_DIR") else (
        Path.home() / ".totalsegmentator")
    candidates.append(home / "nnunet" / "results")
    return [c for c in candidates if c.is_dir()]


def find_results(root: Path) -> list[FoundResult]:
    """Every nnU-Net result folder at or below ``root`` (a few levels deep; links are not followed)."""
    if not root.is_dir():
        raise ModelError("no such folder", path=root)
    found = []
    for folder, dirs, _files in os.walk(root):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d).is_symlink()
                         and depth < MAX_DEPTH and d not in ("validation", "__pycache__"))
        if is_result_folder(here):
            dataset, name = _dataset_of(here, root)
            found.append(FoundResult(here, dataset, name))
            dirs[:] = []
    return found


def _dataset_of(folder: Path, root: Path) -> tuple[int | None, str]:
    for candidate in (folder, *folder.parents):
        match = DATASET_FOLDER.match(candidate.name)
        if match:
            return int(match[1]), candidate.name
        if candidate == root.parent:
            break
    return None, ""


@dataclass(frozen=True)
class Match:
    entry: ModelEntry
    configurations: list[Configuration]
    results: dict[int, FoundResult]  # dataset id -> its result folder


def match_catalogue(found: list[FoundResult], catalogue: Catalogue) -> tuple[list[Match], list[FoundResult]]:
    """The catalogue entries the found folders complete (a configuration counts when all its networks
    are there), and the folders no catalogue entry knows."""
    by_dataset: dict[int, list[FoundResult]] = {}
    for result in found:
        if result.dataset is not None:
            by_dataset.setdefault(result.dataset, []).append(result)
    matches = []
    used: set[Path] = set()
    for entry in catalogue:
        chosen: dict[int, FoundResult] = {}
        for configuration in entry.configurations:
            for dataset in configuration.datasets:
                candidates = by_dataset.get(dataset, [])
                preferred = [c for c in candidates if c.trainer == configuration.trainer
                             and c.configuration == configuration.nnunet_configuration]
                pick = (preferred or candidates)[:1]
                if pick:
                    chosen[dataset] = pick[0]
        complete = entry.configurations_of(set(chosen))
        if complete:
            needed = {d for c in complete for d in c.datasets}
            results = {d: r for d, r in chosen.items() if d in needed}
            matches.append(Match(entry, complete, results))
            used.update(r.folder for r in results.values())
    return matches, [r for r in found if r.folder not in used]
