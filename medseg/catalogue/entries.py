"""The model catalogue: what each known model is, where its weights come from, its licence.

``resources/models/catalogue.json`` is data (see docs/models.md for its fields). A catalogue
entry is what every interface shows about a model before and after it is installed: title,
structures (value, name, group), configurations with their spacing, the files to download
(with a SHA-256 where the publisher gives one), the licence and how to cite it.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medseg.core.labels import Label
from medseg.core.structure_codes import coded, totalsegmentator_coding
from medseg.errors import ModelError

if TYPE_CHECKING:
    from collections.abc import Iterator

    from medseg.model.kinds.base import Capabilities

FORMAT_NAME = "medseg-model-catalogue"
FORMAT_VERSION = 1
CATALOGUE_FILE = "catalogue.json"
# "publisher/name": what a user types and what every interface shows.
MODEL_ID = re.compile(r"^[a-z0-9][a-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_.-]*$")
SHA256 = re.compile(r"^[0-9a-f]{64}$")
SUPPORT_STATES = {
    "native": "medseg's own model",
    "exact": "runs as its publisher runs it (checked against the publisher's tool)",
    "networks": "its networks run in medseg with nnU-Net's preprocessing, not the publisher's own pipeline",
    "pipeline": "runs through the publisher's own steps reproduced in medseg, not yet checked against the publisher's tool",
    "not-yet": "medseg cannot run it yet",
}


@dataclass(frozen=True)
class Structure:
    value: int
    name: str
    group: str


@dataclass(frozen=True)
class Configuration:
    name: str
    spacing_mm: tuple[float, float, float] | None  # x, y, z; None: the series' own spacing
    datasets: tuple[int, ...]  # nnU-Net dataset ids whose networks make this configuration
    mode: str = ""  # the publisher's name for it (TotalSegmentator: default / fast / fastest)
    trainer: str = ""
    nnunet_configuration: str = ""


@dataclass(frozen=True)
class WeightFile:
    name: str  # file name of the download, e.g. Dataset297_....zip
    urls: tuple[str, ...]
    size: int | None  # bytes, when the publisher says
    sha256: str | None  # as the publisher gives it; None: no published checksum
    dataset: int | None = None
    folder: str = ""  # the folder the zip holds (TotalSegmentator: DatasetNNN_...)
    release: str | None = None
    # a plain file (not a zip): where it goes in the model's folder as the publisher lays it out, e.g.
    # "nnInteractive_v1.0/fold_0/checkpoint_final.pth" (a relative path, never outside the folder)
    path: str = ""


@dataclass(frozen=True)
class Licence:
    spdx: str
    url: str
    commercial_use: bool
    acceptance_required: bool
    terms: str

    @property
    def summary(self) -> str:
        use = "commercial use allowed" if self.commercial_use else "no commercial use without the publisher's licence"
        return f"{self.spdx} ({use})"


@dataclass(frozen=True)
class ModelEntry:
    id: str
    title: str
    publisher: str
    version: str
    modality: str
    description: str
    structures: tuple[Structure, ...]
    configurations: tuple[Configuration, ...]
    files: tuple[WeightFile, ...]
    licence: Licence
    citation: str
    support: str
    support_note: str
    builtin: str | None = None
    task: str | None = None
    raw: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)
    kind: str = "nnunet"  # the model kind (medseg.model.kinds) its weights become once installed

    @property
    def interactive(self) -> bool:
        """It answers prompts (the Interactive AI tool) rather than segmenting a series on its own."""
        return self.capabilities.interactive

    @property
    def capabilities(self) -> Capabilities:
        from medseg.model.kinds import kind_named

        return kind_named(self.kind).capabilities

    @property
    def downloadable(self) -> bool:
        return bool(self.files) and all(f.urls for f in self.files)

    @property
    def size(self) -> int | None:
        """Bytes to download, when every file's size is published."""
        sizes = [f.size for f in self.files]
        known = [s for s in sizes if s is not None]
        return sum(known) if sizes and len(known) == len(sizes) else None

    @property
    def checksums_published(self) -> bool:
        return bool(self.files) and all(f.sha256 for f in self.files)

    def configuration(self, name: str) -> Configuration:
        for configuration in self.configurations:
            if configuration.name == name:
                return configuration
        known = ", ".join(c.name for c in self.configurations)
        raise ModelError(f"{self.id} has no configuration {name!r} (it has {known})")

    def files_for(self, configurations: list[str] | None = None) -> list[WeightFile]:
        """The downloads that ``configurations`` (default: all) need, in catalogue order."""
        wanted = self.configurations if not configurations else [self.configuration(n) for n in configurations]
        datasets = {d for c in wanted for d in c.datasets}
        return [f for f in self.files if f.dataset is None or f.dataset in datasets]

    def configurations_of(self, datasets: set[int]) -> list[Configuration]:
        """The configurations whose networks are all among ``datasets``."""
        return [c for c in self.configurations if c.datasets and set(c.datasets) <= datasets]

    def labels(self) -> dict[int, Label]:
        """The model card's labels: value, name and group as listed; a TotalSegmentator structure also
        carries the coded concepts and colour TotalSegmentator publishes for it (its SNOMED mapping)."""
        labels = {}
        for structure in self.structures:
            label = Label(structure.value, structure.name, group=structure.group)
            if self.task is not None:  # a TotalSegmentator task: its own coding table names the structure
                label = coded(label, totalsegmentator_coding(structure.name))
            labels[structure.value] = label
        return labels

    def groups(self) -> dict[str, list[Structure]]:
        found: dict[str, list[Structure]] = {}
        for structure in self.structures:
            found.setdefault(structure.group, []).append(structure)
        return found


class Catalogue:
    """The known models, by id."""

    def __init__(self, entries: list[ModelEntry], source: Path | None = None) -> None:
        self.entries = {entry.id: entry for entry in entries}
        self.source = source

    def __iter__(self) -> Iterator[ModelEntry]:
        return iter(self.entries.values())

    def __len__(self) -> int:
        return len(self.entries)

    def __contains__(self, model_id: object) -> bool:
        return model_id in self.entries

    def get(self, model_id: str) -> ModelEntry:
        entry = self.entries.get(model_id)
        if entry is None:
            close = [known for known in self.entries if model_id.split("/")[-1] in known]
            hint = f"did you mean {', '.join(close[:3])}?" if close else "`medseg models list` shows every model"
            raise ModelError(f"no model {model_id!r} in the catalogue", hint=hint)
        return entry

    def by_dataset(self, dataset: int) -> list[ModelEntry]:
        """Entries one of whose configurations runs nnU-Net dataset ``dataset``."""
        return [e for e in self if any(dataset in c.datasets for c in e.configurations)]


def catalogue_path() -> Path:
    """``$MEDSEG_CATALOGUE`` (a site's own catalogue, or a newer one than this release's), else the shipped one."""
    override = os.environ.get("MEDSEG_CATALOGUE", "").strip()
    if override:
        return Path(override).expanduser()
    return Path(str(resources.files("medseg.resources") / "models" / CATALOGUE_FILE))


@lru_cache(maxsize=4)
def _cached(path: str, mtime: float) -> Catalogue:
    return parse_catalogue(Path(path))


def load_catalogue(path: str | Path | None = None) -> Catalogue:
    """The catalogue medseg ships (or the file at ``path``), checked field by field."""
    path = Path(path) if path is not None else catalogue_path()
    try:
        mtime = path.stat().st_mtime
    except OSError as error:
        raise ModelError(f"the model catalogue cannot be read ({error.strerror})", path=path) from error
    return _cached(str(path), mtime)


def parse_catalogue(path: Path) -> Catalogue:
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ModelError(f"the model catalogue is not valid JSON: {error}", path=path) from error
    if not isinstance(document, dict) or document.get("format") != FORMAT_NAME:
        raise ModelError(f"not a {FORMAT_NAME} file", path=path)
    version = document.get("format_version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ModelError(f"catalogue format {version} is newer than this medseg understands", path=path,
                         hint="update medseg")
    models = document.get("models")
    if not isinstance(models, list):
        raise ModelError("the catalogue has no list of models", path=path)
    entries = []
    for index, raw in enumerate(models):
        try:
            entries.append(parse_entry(raw))
        except (KeyError, TypeError, ValueError) as error:
            name = raw.get("id", f"#{index}") if isinstance(raw, dict) else f"#{index}"
            raise ModelError(f"catalogue entry {name}: {error!r}", path=path) from error
        except ModelError as error:
            raise ModelError(error.message, path=path) from error
    ids = [e.id for e in entries]
    duplicates = sorted({i for i in ids if ids.count(i) > 1})
    if duplicates:
        raise ModelError(f"the catalogue lists {', '.join(duplicates)} more than once", path=path)
    return Catalogue(entries, path)


def parse_entry(raw: dict[str, Any]) -> ModelEntry:
    """One catalogue entry (also the copy a pack or an install record carries)."""
    model_id = str(raw["id"])
    if not MODEL_ID.match(model_id):
        raise ModelError(f"model id {model_id!r} is not publisher/name")
    structures = tuple(Structure(int(s["value"]), str(s["name"]), str(s.get("group", ""))) for s in raw["structures"])
    values = [s.value for s in structures]
    if len(set(values)) != len(values) or any(v <= 0 for v in values):
        raise ModelError(f"{model_id}: structure values must be distinct and above 0")
    configurations = tuple(
        Configuration(str(c["name"]), _spacing(c.get("spacing_mm")), tuple(int(d) for d in c.get("datasets", [])),
                      str(c.get("mode", "")), str(c.get("trainer", "")), str(c.get("nnunet_configuration", "")))
        for c in raw["configurations"])
    files = []
    for f in raw.get("files", []):
        digest = f.get("sha256")
        if digest is not None and not SHA256.match(str(digest)):
            raise ModelError(f"{model_id}: {f['name']} has a SHA-256 that is not 64 hex digits")
        name = str(f["name"])
        if Path(name).name != name or name.startswith("."):
            raise ModelError(f"{model_id}: download name {name!r} is not a plain file name")
        place = str(f.get("path", ""))
        if place and (Path(place).is_absolute() or ".." in Path(place).parts or "\\" in place):
            raise ModelError(f"{model_id}: file path {place!r} leaves the model's folder")
        files.append(WeightFile(name, tuple(str(u) for u in f.get("urls", [])),
                                int(f["size"]) if f.get("size") is not None else None,
                                str(digest) if digest else None,
                                int(f["dataset"]) if f.get("dataset") is not None else None,
                                str(f.get("folder", "")), f.get("release"), place))
    licence_raw = raw["licence"]
    licence = Licence(str(licence_raw["spdx"]), str(licence_raw.get("url", "")), bool(licence_raw["commercial_use"]),
                      bool(licence_raw["acceptance_required"]), str(licence_raw.get("terms", "")))
    support = raw.get("medseg_support") or {}
    status = str(support.get("status", "networks"))
    if status not in SUPPORT_STATES:
        raise ModelError(f"{model_id}: medseg_support status {status!r} is not one of {sorted(SUPPORT_STATES)}")
    return ModelEntry(
        id=model_id, title=str(raw["title"]), publisher=str(raw.get("publisher", "")), version=str(raw["version"]),
        modality=str(raw.get("modality", "CT")), description=str(raw.get("description", "")), structures=structures,
        configurations=configurations, files=tuple(files), licence=licence, citation=str(raw.get("citation", "")),
        support=status, support_note=str(support.get("note", "")), builtin=raw.get("builtin"),
        task=raw.get("task"), raw=dict(raw), kind=_kind(model_id, raw))


# Before model kinds were plug-ins an entry said only whether it was interactive; a segmentation entry's kind
# followed from its task (TotalSegmentator's) and a pack or install record may still say so.
_FORMER_KINDS = {"interactive": "nninteractive"}


def _kind(model_id: str, raw: dict[str, Any]) -> str:
    """The entry's model kind, one of medseg.model.kinds' (the one list of kinds). An entry that names none
    is, by its data: a publisher's task (``task``: TotalSegmentator's) or medseg's built-in model, else nnU-Net
    networks."""
    from medseg.model.kinds import kind_ids

    kind = raw.get("kind") if raw.get("kind") != "segmentation" else None
    kind = kind or ("totalsegmentator" if raw.get("task") else "medseg" if raw.get("builtin") else "nnunet")
    kind = _FORMER_KINDS.get(kind, kind)  # install records and packs written before kinds were plug-ins
    if kind not in kind_ids():
        raise ModelError(f"{model_id}: kind {kind!r} is not one of {', '.join(kind_ids())}")
    return str(kind)


def _spacing(value: Any) -> tuple[float, float, float] | None:
    if value is None:
        return None
    spacing = tuple(float(v) for v in value)
    if len(spacing) != 3 or any(not s > 0 for s in spacing):
        raise ValueError(f"spacing {value!r} is not three positive numbers")
    return spacing[0], spacing[1], spacing[2]
