"""Open and list models: the one model opener, and the model card every interface shows.

:func:`open_model` takes a *reference* — ``None`` or ``"starter"`` (the built-in model), a path
to a medseg package (folder, ``.zip`` or ``.medseg``), or a path to an nnU-Net v2 result folder
— and returns an :class:`OpenedModel`: the :class:`ModelCard` (id, name, version, modality,
licence, configurations, labels with their coded concepts as the package states them) and
the package the engine runs (or, for a converted TotalSegmentator task, the pipeline that runs its
networks: :attr:`OpenedModel.pipeline`). Everything that opens a model comes here: ``medseg segment``,
``batch``, ``evaluate``, ``train --from``, ``export``, ``plan``, and the GUI's Segment and
Train & Export tabs, so each of them opens the same things.

Where the model catalogue plugs in: :func:`model_path` is the ONE function that turns a reference
into a path on disk. A catalogue id (``totalsegmentator/total``, spelled publisher/name and not an
existing path) is the folder :mod:`medseg.catalogue` installed it in
(:func:`medseg.catalogue.resolve_reference`: a ModelError says when it is known but not installed);
another source of models adds its references with :func:`register_resolver`. Every interface
opens what this function opens, with no other change. The card's ``id`` is the reference as the
user gave it (the catalogue id, ``starter``, or the path).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from medseg.core.labels import Label
from medseg.errors import MedsegError, ModelError

STARTER = "starter"  # what a user types for the built-in model
NNUNET_RESULT, MEDSEG_PACKAGE = "nnU-Net v2 result folder", "medseg model package"
TOTALSEG_MODEL = "TotalSegmentator model"  # several networks run by TotalSegmentator's own pipeline
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


def model_path(reference: str | Path | None) -> Path:
    """The one place a model reference becomes a path: None or "starter" (when no such file is here) is
    the built-in model; a registered resolver's reference is its folder; a catalogue id is the folder
    it is installed in; anything else is taken as a path."""
    from medseg.catalogue import resolve_reference

    if reference is None or (str(reference) == STARTER and not Path(reference).exists()):
        return starter_model_path()
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


def is_totalseg_folder(path: Path) -> bool:
    from medseg.model.totalseg import is_totalseg_model

    return path.is_dir() and is_totalseg_model(path)


def is_nnunet_result(path: Path) -> bool:
    return path.is_dir() and (path / "plans.json").is_file() and (path / "dataset.json").is_file()


@dataclass(frozen=True)
class ModelCard:
    """What every interface shows of a model (and the catalogue lists)."""

    id: str  # the reference as the user gave it: "starter", a catalogue id, or the path
    name: str
    version: str  # "" when the model says nothing
    modality: str | None  # "CT" for a model that normalises its input as CT; None: not stated
    licence: str  # as the model states it ("" when it does not)
    kind: str  # MEDSEG_PACKAGE or NNUNET_RESULT
    source: Path
    configurations: dict[str, str]  # name -> one line: dimension, patch, spacing, folds
    labels: dict[int, Label]  # the labels it segments (background excluded), as its output
    postprocessing: list[str] = field(default_factory=list)  # its declared steps after the network
    groups: dict[int, str] = field(default_factory=dict)  # label value -> its group (the catalogue's), when known

    @property
    def coded(self) -> bool:
        return all(label.coded for label in self.labels.values())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "version": self.version, "modality": self.modality,
                "licence": self.licence, "kind": self.kind, "source": str(self.source),
                "configurations": dict(self.configurations),
                "labels": {str(v): label.as_dict() for v, label in self.labels.items()},
                "postprocessing": list(self.postprocessing), "groups": {str(v): g for v, g in self.groups.items()}}

    def describe(self) -> str:
        """A few lines for a terminal or a tooltip."""
        version = f" {self.version}" if self.version else ""
        lines = [f"{self.name}{version} ({self.kind}; {self.modality or 'modality not stated'}; "
                 f"licence: {self.licence or 'not stated'})",
                 "labels: " + ", ".join(f"{v} {label.name}" for v, label in self.labels.items())]
        lines += [f"  {name}: {summary}" for name, summary in self.configurations.items()]
        return "\n".join(lines)


@dataclass
class OpenedModel:
    """An opened model: its card, and the package the engine runs — or, for a TotalSegmentator model,
    ``pipeline`` (medseg.model.totalseg.TotalSegModel: several networks and TotalSegmentator's own steps)."""

    card: ModelCard
    _package: Any = None  # medseg.model.package_model.ModelPackage
    pipeline: Any = None  # medseg.model.totalseg.TotalSegModel

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def package(self) -> Any:
        """The one package the engine runs; a TotalSegmentator model has none (a ModelError says so)."""
        if self._package is None:
            raise ModelError(f"{self.card.name} is a TotalSegmentator model: several networks run by TotalSegmentator's "
                             "own pipeline, which segments but is not one package to export, train from or plan",
                             path=self.card.source, hint="segment with it (medseg segment, batch or the GUI)")
        return self._package


def model_card(package: Any, reference: str | Path | None = None, kind: str = MEDSEG_PACKAGE) -> ModelCard:
    """The card of a package already in memory (``reference``: how the user named it)."""
    from medseg.model.modality import model_modality

    configurations = {}
    for name, plan in package.configurations.items():
        spacing = " x ".join(f"{s:.3g}" for s in plan.target_spacing_image_zyx)
        configurations[name] = (f"{plan.dim}D, patch {' x '.join(str(p) for p in plan.patch_size)}, spacing "
                                f"{spacing} mm, {package.num_folds(name)} fold(s)" + (", ONNX" if name in package.onnx else ""))
    provenance = package.provenance or {}
    licence = str(provenance.get("licence") or provenance.get("license") or "") or _catalogue_licence(provenance)
    source = package.source_path if package.source_path is not None else Path(str(reference or package.name))
    return ModelCard(
        id=str(reference) if reference is not None else STARTER, name=package.name, version=package.version,
        modality=model_modality(package), licence=licence, kind=kind, source=Path(source),
        configurations=configurations, labels=package.label_table(),
        postprocessing=[step.describe(package.names) for step in package.postprocess_steps()])


def totalseg_card(model: Any, reference: str | Path | None) -> ModelCard:
    """The card of a converted TotalSegmentator task: its configurations (spacing, networks), its
    structures with the catalogue's groups and TotalSegmentator's numbers and names."""
    from medseg.core.labels import Provenance

    made_by = Provenance.model(model.name, model.version)
    configurations = {name: (f"{config.spacing_mm:g} mm, {len(config.parts)} network"
                             f"{'s' if len(config.parts) > 1 else ''} merged by TotalSegmentator's pipeline"
                             + (f" (its {config.flag})" if config.flag else "") + f", tile step {config.step:g}")
                      for name, config in model.configurations.items()}
    entry = _catalogue_entry(model.name)
    groups = {s.value: s.group for s in entry.structures} if entry is not None else {}
    # the catalogue's labels carry each structure's group, codes and colour (TotalSegmentator's own table),
    # so the label tree groups a result and its DICOM SEG is coded; TotalSegmentator's name decides a match
    described = entry.labels() if entry is not None else {}
    labels = {value: replace(described[value], provenance=made_by)
              if value in described and described[value].name == name else Label(value, name, provenance=made_by)
              for value, name in sorted(model.labels.items())}
    return ModelCard(
        id=str(reference) if reference is not None else model.name, name=model.name, version=model.version,
        modality="CT", licence=entry.licence.summary if entry is not None else "", kind=TOTALSEG_MODEL,
        source=Path(model.path), configurations=configurations, labels=labels,
        groups={value: groups[value] for value in model.labels if value in groups})


def _catalogue_entry(model_id: str) -> Any:
    from medseg.catalogue import load_catalogue

    try:
        return load_catalogue().entries.get(model_id)
    except MedsegError:  # an unreadable catalogue costs the groups and the licence line, not the model
        return None


def _catalogue_licence(provenance: dict[str, Any]) -> str:
    """A model the catalogue installed: the licence its entry states ("" for any other model)."""
    model_id = provenance.get("catalogue_id")
    if not model_id:
        return ""
    from medseg.catalogue import load_catalogue

    entry = load_catalogue().entries.get(str(model_id))
    return entry.licence.summary if entry is not None else ""


def open_model(reference: str | Path | None = None) -> OpenedModel:
    """The one model opener: a built-in name ("starter"), a medseg package (folder/.zip/.medseg), an nnU-Net
    v2 result folder (converted on the fly; nothing is unpickled), or an id a registered catalogue knows."""
    from medseg.model.nnunet_import import import_nnunet
    from medseg.model.package import load_package

    path = model_path(reference)
    if is_totalseg_folder(path):
        from medseg.model.totalseg import load_totalseg_model

        model = load_totalseg_model(path)
        return OpenedModel(totalseg_card(model, reference), pipeline=model)
    if is_nnunet_result(path):
        package, kind = import_nnunet(path), NNUNET_RESULT
    elif path.is_dir() and not (path / "model.json").is_file():
        # Said here, where every kind of folder medseg runs is known, rather than as the package reader's
        # "model.json is missing", which sends a user with TotalSegmentator's weights on a wrong track.
        raise ModelError("this folder is not a model medseg can run: no model.json (a medseg package), no plans.json "
                         "with dataset.json (an nnU-Net v2 result folder)", path=path,
                         hint="TotalSegmentator's or nnInteractive's weights folder: `medseg models import FOLDER` "
                              "(Segmentation ▸ Models… ▸ Import), then choose the model by its id")
    else:
        package, kind = load_package(path), MEDSEG_PACKAGE
    return OpenedModel(model_card(package, reference, kind), package)


def list_models() -> list[ModelCard]:
    """The models medseg can open without a path: the built-in starter (``medseg models list`` lists the
    catalogue's, installed or not, with their state)."""
    return [open_model(STARTER).card]


__all__ = ["ModelCard", "OpenedModel", "open_model", "model_card", "model_path", "list_models", "register_resolver",
           "totalseg_card", "STARTER", "NNUNET_RESULT", "MEDSEG_PACKAGE", "TOTALSEG_MODEL"]
