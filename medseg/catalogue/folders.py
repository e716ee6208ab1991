"""Where installed models live, and which one a catalogue id opens.

The user's folder (``$MEDSEG_MODELS``, else ``<data>/models``: medseg.app_dirs) is searched first,
then the read-only system-wide folders IT fills. A model is ``<folder>/<publisher>/<name>/``
with its ``installed.json`` (medseg.catalogue.record).
"""

from __future__ import annotations

from pathlib import Path

from medseg.app_dirs import models_dir, system_models_dirs
from medseg.catalogue.entries import MODEL_ID, load_catalogue
from medseg.catalogue.record import InstallRecord, read_record
from medseg.errors import ModelError


def model_folder(root: Path, model_id: str) -> Path:
    if not MODEL_ID.match(model_id):
        raise ModelError(f"model id {model_id!r} is not publisher/name")
    publisher, name = model_id.split("/")
    return root / publisher / name


def search_roots() -> list[tuple[Path, bool]]:
    """(folder, read_only) in the order they are searched: the user's, then the system's."""
    user = models_dir()
    return [(user, False)] + [(folder, True) for folder in system_models_dirs() if folder != user]


def find_installed(model_id: str) -> InstallRecord | None:
    """The installed record of ``model_id`` (the user's before the system's), or None."""
    for root, read_only in search_roots():
        record = read_record(model_folder(root, model_id), read_only)
        if record is not None:
            return record
    return None


def installed_models() -> list[InstallRecord]:
    """Every installed model, once each (a user's install hides the system-wide one of the same id)."""
    seen: dict[str, InstallRecord] = {}
    for root, read_only in search_roots():
        if not root.is_dir():
            continue
        for publisher in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")):
            for folder in sorted(f for f in publisher.iterdir() if f.is_dir() and not f.name.startswith(".")):
                record = read_record(folder, read_only)
                if record is not None and record.id not in seen:
                    seen[record.id] = record
    return list(seen.values())


def installed_model_path(model_id: str) -> Path:
    """The model package medseg opens for catalogue id ``model_id`` (the built-in starter for ``medseg/starter``).

    Raises ModelError saying how to install it when it is not installed, or why medseg cannot run it.
    """
    catalogue = load_catalogue()
    entry = catalogue.entries.get(model_id)
    if entry is not None and entry.builtin == "starter":
        from medseg.model.package import starter_model_path

        return starter_model_path()
    record = find_installed(model_id)
    if record is None:
        if entry is None:
            catalogue.get(model_id)  # raises: unknown id, with suggestions
        raise ModelError(f"model {model_id} is not installed",
                         hint=f"`medseg models install {model_id}` (or the Models dialog) installs it")
    path = record.run_path()
    if path is None:
        raise ModelError(f"{model_id} is installed, but medseg cannot run it yet: "
                         + (record.entry.get("medseg_support", {}).get("note") or "no configuration runs on its own"),
                         path=record.version_folder)
    if not path.exists():
        raise ModelError(f"{model_id} is damaged: its model files are missing", path=path,
                         hint=f"`medseg models verify {model_id}`; install it again")
    from medseg.catalogue.integrity import check_installed

    check_installed(record)  # a missing, truncated or unreadable file is named here, not deep in a run
    return path


def is_model_id(reference: str) -> bool:
    """True when ``reference`` is spelled as a catalogue id (publisher/name) and is not an existing path."""
    return bool(MODEL_ID.match(reference)) and not Path(reference).exists()


def resolve_reference(reference: str) -> Path | None:
    """A model reference as a catalogue id: the path it opens (ModelError when the id is known but not
    installed, or cannot run); None when ``reference`` is not spelled as an id or is an existing path.
    This is the resolver ``medseg.workflows.models.register_resolver`` takes."""
    if not is_model_id(str(reference)):
        return None
    return installed_model_path(str(reference))
