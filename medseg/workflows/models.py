"""Open and list models: the one model opener, and the model card every interface shows.

:func:`open_model` takes a *reference* — ``None`` or ``"starter"`` (the built-in model), a catalogue
id, or a path — turns it into a folder (:func:`model_path`) and opens it with the model kind that
recognises it (:mod:`medseg.model.kinds`: a medseg package, an nnU-Net v2 result folder, a converted
TotalSegmentator task, an interactive model). The :class:`OpenedModel` it returns carries the
:class:`ModelCard` and the pipeline that runs it; every interface (``medseg segment``, ``batch``,
``evaluate``, ``train --from``, ``export``, ``plan``, the GUI's tabs) opens models here and asks the
pipeline's capabilities, never the kind.

Where the model catalogue plugs in: :func:`model_path` is the ONE function that turns a reference
into a path on disk. A catalogue id (``totalsegmentator/total``, spelled publisher/name and not an
existing path) is the folder :mod:`medseg.catalogue` installed it in; another source of models adds
its references with :func:`register_resolver` (the built-in starter is one). The card's ``id`` is
the reference as the user gave it; a model the catalogue lists gets the catalogue's facts (licence,
groups, coded labels) on its card, whatever its kind.
"""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from medseg.core.labels import Label
from medseg.errors import MedsegError, ModelError
from medseg.model.kinds import ModelCard, OpenedModel, open_path
from medseg.model.kinds.package_kind import MEDSEG_PACKAGE, opened_package, package_card

STARTER = "starter"  # what a user types for the built-in model
Resolver = Callable[[str], "Path | None"]
_resolvers: list[Resolver] = []


def register_resolver(resolver: Resolver) -> None:
    """Let another source of models map its references to folders: ``resolver(reference)`` returns the path
    of a model it knows (installed), else None. Asked before the catalogue and before the reference is
    taken as a path."""
    if resolver not in _resolvers:
        _resolvers.append(resolver)


def starter_model_path() -> Path:
    from medseg.model.package import starter_model_path as built_in

    return built_in()


def _starter(reference: str) -> Path | None:
    """The built-in model answers to "starter" unless a file of that name is here."""
    return starter_model_path() if reference == STARTER and not Path(reference).exists() else None


register_resolver(_starter)


def model_path(reference: str | os.PathLike[str] | None) -> Path:
    """The one place a model reference becomes a path: None is the built-in model; a registered resolver's
    reference is its folder; a catalogue id is the folder it is installed in; anything else is a path."""
    from medseg.catalogue import resolve_reference

    reference = STARTER if reference is None else reference
    for resolver in _resolvers:
        found = resolver(str(reference))
        if found is not None:
            return Path(found)
    installed = resolve_reference(str(reference))
    if installed is not None:
        return Path(installed)
    path = Path(reference).expanduser()
    if not path.exists():
        raise ModelError("no such model: not a medseg model package, an nnU-Net v2 result folder or a model id",
                         path=path, hint="give the package's folder or .zip, or 'starter' for the built-in model")
    return path


def open_model(reference: str | os.PathLike[str] | None = None) -> OpenedModel:
    """The one model opener: the kind that recognises the folder opens it (nothing is unpickled)."""
    opened = open_path(model_path(reference), STARTER if reference is None else reference)
    return _with_facts(opened)


def _with_facts(opened: OpenedModel) -> OpenedModel:
    opened.pipeline.card = with_catalogue_facts(opened.card)  # the pipeline describes its results with it
    return OpenedModel(opened.pipeline.card, opened.pipeline)


def with_catalogue_facts(card: ModelCard) -> ModelCard:
    """A model the catalogue lists (by its name, which an install sets to the catalogue id) carries the
    catalogue's licence line, groups and coded labels (its publisher's codes) where the model says none."""
    entry = _catalogue_entry(card.name)
    if entry is None:
        return card
    described = entry.labels()
    labels = {value: _with_listed_facts(label, described.get(value)) for value, label in card.labels.items()}
    return replace(card, licence=card.licence or entry.licence.summary, labels=labels)


def _with_listed_facts(label: Label, listed: Label | None) -> Label:
    """The catalogue's row for the same structure (same value and name) adds its codes, colour and group to a
    label that has no codes, and its group to a coded one that has none (the group lives on the Label only)."""
    if listed is None or listed.name != label.name:
        return label
    if not label.coded:
        return replace(listed, provenance=label.provenance)
    return replace(label, group=listed.group) if listed.group and not label.group else label


def _catalogue_entry(model_id: str) -> Any:
    from medseg.catalogue import load_catalogue

    try:
        return load_catalogue().entries.get(model_id)
    except MedsegError:  # an unreadable catalogue costs the groups and the licence line, not the model
        return None


def model_card(package: Any, reference: str | Path | None = None, kind: str = MEDSEG_PACKAGE) -> ModelCard:
    """The card of a package already in memory (``reference``: how the user named it)."""
    return with_catalogue_facts(package_card(package, reference, kind))


def package_model(package: Any, reference: str | Path | None = None) -> OpenedModel:
    """A package already in memory (a training run's, a benchmark's) as an opened model."""
    return _with_facts(opened_package(package, reference))


def list_models() -> list[ModelCard]:
    """The models medseg can open without a path: the built-in starter (``medseg models list`` lists the
    catalogue's, installed or not, with their state)."""
    return [open_model(STARTER).card]


__all__ = ["ModelCard", "OpenedModel", "open_model", "model_card", "model_path", "list_models", "package_model",
           "register_resolver", "with_catalogue_facts", "STARTER"]
