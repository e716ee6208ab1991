"""Weights that are missing or damaged, found before they are installed and before they are opened.

Two moments, each with an error that names the file and what is wrong with it:

- **install and import**: a publisher's nnU-Net result folder (TotalSegmentator's
  ``DatasetNNN_x/<Trainer>__<Plans>__<configuration>/``, an nnU-Net result folder, an unpacked zip)
  must hold a dataset.json and a plans.json that are JSON objects, a checkpoint in every ``fold_*``
  folder, and checkpoints that are whole zip archives whose every member passes its CRC (torch reads
  a checkpoint without checking CRCs: a flipped byte would otherwise install as different weights).
  A folder that looks like a result folder but is incomplete is named too, rather than skipped.
- **open**: an installed model's files as its record lists them: each there, of the size it had
  when installed, its JSON readable and its safetensors' header whole. These checks read only
  headers (cheap at every open); ``medseg models verify`` compares every byte with the hashes.
"""

from __future__ import annotations

import json
import os
import struct
import zipfile
from pathlib import Path
from typing import TYPE_CHECKING

from medseg.catalogue.discover import CHECKPOINTS, MAX_DEPTH, FoundResult
from medseg.errors import ModelError

if TYPE_CHECKING:
    from medseg.catalogue.record import InstallRecord

_SAFETENSORS_HEADER_LIMIT = 100 << 20  # safetensors' own cap on the JSON header


class DamagedWeights(ModelError):
    """A publisher's weights folder (or the zip it came in) is incomplete or damaged; nothing was installed."""

    def inside(self, root: Path, container: str, path: Path | None) -> "DamagedWeights":
        """The same error told about ``container`` (a zip), when its file lay in the folder it was unpacked to."""
        if self.path is not None and self.path.is_relative_to(root):
            self.message = f"{self.path.relative_to(root).as_posix()} in {container}: {self.message}"
            self.path = path
            self.args = (str(self),)
        return self


# --- a publisher's result folder, before anything is installed -----------------------------------------
def check_result_folder(folder: Path) -> None:
    """ModelError naming the file when an nnU-Net result folder is incomplete or damaged."""
    for name in ("dataset.json", "plans.json"):
        _check_json(folder / name)
    folds = sorted(p for p in folder.glob("fold_*") if p.is_dir())
    if not folds:
        raise DamagedWeights("no fold_*/checkpoint_final.pth: the network's weights are missing", path=folder,
                         hint=_AGAIN)
    for fold in folds:
        checkpoints = [fold / name for name in CHECKPOINTS if (fold / name).is_file()]
        if not checkpoints:
            raise DamagedWeights(f"{fold.name}/checkpoint_final.pth is missing: the weights of this fold are not there",
                             path=fold, hint=_AGAIN)
        for checkpoint in checkpoints:
            check_checkpoint(checkpoint)


def check_checkpoint(path: Path) -> None:
    """A torch.save archive that is whole (its central directory) and undamaged (every member's CRC)."""
    size = path.stat().st_size
    if size == 0:
        raise DamagedWeights("the checkpoint is empty (0 bytes)", path=path, hint=_AGAIN)
    try:
        with zipfile.ZipFile(path) as archive:
            bad = archive.testzip()
    except zipfile.BadZipFile as error:
        raise DamagedWeights(f"the checkpoint is truncated or damaged: not a whole torch.save archive ({error}; "
                         f"{size} bytes)", path=path, hint=_AGAIN) from error
    except (OSError, EOFError, RuntimeError, ValueError, NotImplementedError) as error:  # zlib, a short member
        raise DamagedWeights(f"the checkpoint is truncated or damaged ({error})", path=path, hint=_AGAIN) from error
    if bad is not None:
        raise DamagedWeights(f"the checkpoint is damaged: its member {bad} fails its CRC check", path=path, hint=_AGAIN)


def incomplete_results(root: Path, found: list[FoundResult]) -> list[Path]:
    """Folders at or below ``root`` that look like nnU-Net result folders (a dataset.json, a plans.json or
    a fold_* folder) but are not among ``found``: a task whose weights are missing."""
    complete = {r.folder for r in found}
    odd = []
    for folder, dirs, files in os.walk(root):
        here = Path(folder)
        depth = len(here.relative_to(root).parts)
        if here in complete:
            dirs[:] = []
            continue
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and not (here / d).is_symlink()
                         and depth < MAX_DEPTH and d not in ("validation", "__pycache__"))
        if not here.name.startswith("fold_") and (
                {"dataset.json", "plans.json"} & set(files) or any(d.startswith("fold_") for d in dirs)):
            odd.append(here)
            dirs[:] = []
    return odd


def check_tree(root: Path, found: list[FoundResult]) -> None:
    """Every result folder found is whole, and nothing that looks like one is incomplete."""
    for folder in incomplete_results(root, found):
        missing = [name for name in ("dataset.json", "plans.json") if not (folder / name).is_file()]
        if missing:
            raise DamagedWeights(f"{' and '.join(missing)} {'is' if len(missing) == 1 else 'are'} missing: this "
                             "nnU-Net result folder is incomplete; nothing was installed", path=folder, hint=_AGAIN)
        check_result_folder(folder)  # names the missing fold or checkpoint
        raise DamagedWeights("this folder looks like an nnU-Net result folder but is not one; nothing was installed",
                         path=folder)
    for result in found:
        check_result_folder(result.folder)


# --- an installed model, before it is opened -----------------------------------------------------------
def check_installed(record: InstallRecord) -> None:
    """ModelError naming the file when an installed model's files are missing or damaged (headers only)."""
    folder = record.version_folder
    hint = f"`medseg models verify {record.id}` lists every changed file; install it again"
    if not folder.is_dir():
        raise ModelError(f"{record.id} is damaged: its installed folder is missing", path=folder, hint=hint)
    for name in record.files:
        path = folder / name
        if not path.is_file():
            raise ModelError(f"{record.id} is damaged: {name} is missing", path=path, hint=hint)
        problem = _json_problem(path, want_object=False) if name.endswith(".json") else None
        if problem:
            raise ModelError(f"{record.id} is damaged: {name} {problem}", path=path, hint=hint)
        if name.endswith(".safetensors"):
            _check_safetensors(path, f"{record.id} is damaged: {name}", hint)
        expected = record.sizes.get(name)
        size = path.stat().st_size
        if expected is not None and size != expected:
            raise ModelError(f"{record.id} is damaged: {name} is {size} bytes, it was {expected} when installed"
                             + (" (truncated)" if size < expected else ""), path=path, hint=hint)


def _check_json(path: Path) -> None:
    if not path.is_file():
        raise DamagedWeights(f"{path.name} is missing", path=path.parent, hint=_AGAIN)
    problem = _json_problem(path)
    if problem:
        raise DamagedWeights(f"{path.name} {problem}", path=path, hint=_AGAIN)


def _json_problem(path: Path, want_object: bool = True) -> str | None:
    try:
        value = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"is not valid JSON ({error})"
    return "is not a JSON object" if want_object and not isinstance(value, dict) else None


def _check_safetensors(path: Path, what: str, hint: str) -> None:
    """The header is whole JSON and its tensors cover the file to its last byte (safetensors' own rule)."""
    size = path.stat().st_size
    try:
        with open(path, "rb") as stream:
            (length,) = struct.unpack("<Q", stream.read(8))
            if length > min(size - 8, _SAFETENSORS_HEADER_LIMIT):
                raise ValueError(f"its header claims {length} bytes; the file has {size}")
            header = json.loads(stream.read(length).decode("utf-8"))
    except (struct.error, ValueError, UnicodeDecodeError) as error:
        raise ModelError(f"{what}: its header cannot be read ({error})", path=path,
                         hint=hint) from error
    if not isinstance(header, dict):
        raise ModelError(f"{what}: its header is not a JSON object", path=path, hint=hint)
    ends = [int(t["data_offsets"][1]) for k, t in header.items()
            if k != "__metadata__" and isinstance(t, dict) and "data_offsets" in t]
    if len(ends) != len([k for k in header if k != "__metadata__"]):
        raise ModelError(f"{what}: its header lists a tensor without its place", path=path, hint=hint)
    data = size - 8 - length
    if max(ends, default=0) != data:
        raise ModelError(f"{what}: its tensors need {max(ends, default=0)} bytes of data, the file "
                         f"holds {data}" + (" (truncated)" if data < max(ends, default=0) else ""), path=path,
                         hint=hint)


_AGAIN = "nothing was installed; get the weights again from their publisher (or download the model again)"
