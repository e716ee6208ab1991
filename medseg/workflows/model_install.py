"""Install, import and remove models: a catalogue id (downloaded), a model pack or a publisher's zip (a file),
an nnU-Net result folder converted into a medseg package.

``medseg models install/remove``, ``medseg import-model`` and the Models window call these; the
catalogue (:mod:`medseg.catalogue`) does the downloads, staging and records, and refuses a licensed
model whose licence was not accepted (``accept_licence``: True, or a function asked with the entry).
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from medseg.errors import ModelError
from medseg.progress import CancelToken, ProgressCallback

Accept = bool | Callable[[Any], bool]  # True / False, or asked with the catalogue entry


@dataclass
class InstallResult:
    installed: list[Any] = field(default_factory=list)  # medseg.catalogue's install records, one per model


def install_file(path: str | os.PathLike, accept_licence: Accept = False, model_id: str | None = None,
                 progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> InstallResult:
    """A model pack (no network) or a publisher's zip / a folder of models (``model_id``: which one of many)."""
    from medseg.catalogue.packs import install_pack, is_pack

    path = Path(path)
    if is_pack(path):
        return InstallResult([install_pack(path, accept_licence=accept_licence, progress=progress, cancel=cancel)])
    return import_models(path, accept_licence, model_id, progress, cancel)


def import_models(path: str | os.PathLike, accept_licence: Accept = False, model_id: str | None = None,
                  progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> InstallResult:
    """Register the models in an nnU-Net result folder, a TotalSegmentator home or a publisher's zip."""
    from medseg.catalogue.install import import_path

    return InstallResult(list(import_path(path, model_id=model_id, accept_licence=accept_licence, progress=progress,
                                          cancel=cancel).installed))


def folders_to_import(path: str | os.PathLike | None) -> list[Path]:
    """``path``, or where TotalSegmentator keeps its weights on this machine when none is given (refused, in
    words, when there is none)."""
    if path:
        return [Path(path)]
    from medseg.catalogue.discover import totalsegmentator_weights

    paths = list(totalsegmentator_weights())
    if not paths:
        raise ModelError("no TotalSegmentator weights folder here ($TOTALSEG_WEIGHTS_PATH, $TOTALSEG_HOME_DIR, "
                         "~/.totalsegmentator/nnunet/results); give the folder or zip to import")
    return paths


@dataclass(frozen=True)
class InstallRequest:
    source: str  # a catalogue id, or a pack / publisher's zip file
    configurations: Sequence[str] | None = None  # a catalogue id's configurations to download (default: all)
    licence_key: str | None = None  # a catalogue id that needs one (TotalSegmentator's licensed tasks)
    model_id: str | None = None  # a file of several models: which one


def install_model(request: InstallRequest, accept_licence: Accept = False, progress: ProgressCallback | None = None,
                  cancel: CancelToken | None = None) -> InstallResult:
    """A catalogue id is downloaded; a file is installed as it is (a licence key goes with an id only)."""
    from medseg.catalogue.folders import is_model_id

    if is_model_id(request.source):
        from medseg.catalogue.install import install

        record = install(request.source, configurations=request.configurations, accept_licence=accept_licence,
                         licence_key=request.licence_key, progress=progress, cancel=cancel)
        return InstallResult([record])
    path = Path(request.source)
    if request.licence_key is not None:
        raise ModelError("--licence-key goes with a catalogue id (the download it unlocks); a file you have "
                         "installs without one", hint=f"`medseg models install {path}`")
    if not path.is_file():
        raise ModelError("no such catalogue id or file", path=path, hint="`medseg models list` shows the ids")
    return install_file(path, accept_licence, request.model_id, progress, cancel)


def remove_model(model_id: str) -> Path:
    """Remove an installed model; the folder it was in."""
    from medseg.catalogue.install import remove

    return remove(model_id)


def measure_engines(model_ids: Sequence[str], starter: bool,
                    progress: Callable[[], ProgressCallback | None] = lambda: None) -> list[str]:
    """Measure again which CPU engine each installed model (and the built-in starter) runs fastest here; one line
    per model measured. A pinned engine (the environment sets it) is said instead, and nothing measured.
    ``progress`` makes a fresh progress callback for each measurement (the installed ones, the starter)."""
    from medseg.catalogue.folders import find_installed
    from medseg.catalogue.install_measure import measure_installed, measure_path
    from medseg.model import cpu_runtime

    if cpu_runtime.pinned_choice(1) is not None:
        return [f"CPU engine set by {cpu_runtime.PIN_VARIABLE}: nothing to measure"]
    records = [record for record in (find_installed(model_id) for model_id in model_ids) if record is not None]
    lines = measure_installed(records, progress())
    if starter:
        from medseg.workflows.models import starter_model_path

        lines += measure_path(starter_model_path(), "starter", progress())
    if not lines:
        lines = ["nothing to measure: no installed model here chooses its CPU engine (one engine installed, or "
                 "models that run in PyTorch only)"]
    return lines


@dataclass
class ImportedModel:
    package: Any  # the medseg ModelPackage
    path: Path  # where it was written
    summary: str  # what it holds, in words


def import_nnunet_folder(folder: str | os.PathLike, out: str | os.PathLike, folds: Sequence[int | str] | None = None,
                         name: str | None = None) -> ImportedModel:
    """Convert an nnU-Net v2 result folder (read without unpickling code) into a medseg package at ``out``."""
    from medseg.model.nnunet_import import import_nnunet  # torch: only when the command runs
    from medseg.model.package import package_summary, save_package

    package = import_nnunet(folder, folds=list(folds) if folds else None)
    if name:
        package.name = name
    path = save_package(package, out)
    return ImportedModel(package, Path(path), package_summary(package))


__all__ = ["InstallRequest", "InstallResult", "install_model", "install_file", "import_models",
           "folders_to_import", "remove_model", "measure_engines",
           "ImportedModel",
           "import_nnunet_folder"]
