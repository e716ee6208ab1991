"""The one pipeline protocol every model kind implements, and the records it speaks in.

A *kind* (:class:`ModelKind`) recognises its folders and opens them; an opened model
(:class:`OpenedModel`) carries its card (what every interface shows) and its *pipeline*
(:class:`ModelPipeline`): what it can do (:class:`Capabilities`), its configurations, the
checks of a run's settings, the choice and preparation for a series, ``run`` and the plan a
panel shows (:class:`PlanReport`, plain data the GUI renders). Interfaces and ``workflows`` call
these and never ask which kind they hold; a new kind is one module and one registration
(:mod:`medseg.model.kinds`; docs/developer-guide.md says how).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Hashable

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.progress import CancelToken, ProgressCallback


@dataclass(frozen=True)
class ModelCard:
    """What every interface shows of a model (and the catalogue lists)."""

    id: str  # the reference as the user gave it: "starter", a catalogue id, or the path
    name: str
    version: str  # "" when the model says nothing
    modality: str | None  # "CT" for a model that normalises its input as CT; None: not stated
    licence: str  # as the model states it ("" when it does not)
    kind: str  # the kind's title (ModelKind.title), e.g. "medseg model package"
    source: Path
    configurations: dict[str, str]  # name -> one line: dimension, patch, spacing, folds
    labels: dict[int, Label]  # the labels it segments (background excluded), as its output
    postprocessing: list[str] = field(default_factory=list)  # its declared steps after the network

    @property
    def coded(self) -> bool:
        return all(label.coded for label in self.labels.values())

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "name": self.name, "version": self.version, "modality": self.modality,
                "licence": self.licence, "kind": self.kind, "source": str(self.source),
                "configurations": dict(self.configurations),
                "labels": {str(v): label.as_dict() for v, label in self.labels.items()},
                "postprocessing": list(self.postprocessing)}

    def describe(self) -> str:
        """A few lines for a terminal or a tooltip."""
        version = f" {self.version}" if self.version else ""
        lines = [f"{self.name}{version} ({self.kind}; {self.modality or 'modality not stated'}; "
                 f"licence: {self.licence or 'not stated'})",
                 "labels: " + ", ".join(f"{v} {label.name}" for v, label in self.labels.items())]
        lines += [f"  {name}: {summary}" for name, summary in self.configurations.items()]
        return "\n".join(lines)


@dataclass(frozen=True)
class SegmentSettings:
    """How a model runs: what ``medseg segment`` and ``medseg batch`` take as options, the GUI as widgets."""

    device: str = "auto"  # "auto" or one of medseg.model.backends.DEVICES
    configuration: str | None = None  # default: chosen by the series' spacing
    step: float = 0.5  # tile step as a fraction of the patch
    mirror: bool = False  # mirroring test-time augmentation
    tile_batch: int | None = None  # tiles per forward pass (default: by device)
    postprocess: bool = True  # the model's own post-processing steps
    allow_modality: bool = False  # segment a series of another modality than the model's (noted)
    structures: tuple[str, ...] | None = None  # only these structures (a kind whose runs crop to a subset), by name
    precision: str = "f32"  # "f32" (exact) or a faster tier verified here: "int8", "bf16" (medseg.model.precision_tier)


@dataclass(frozen=True)
class Capabilities:
    """What a kind's models can do; interfaces offer what these say and never ask for the kind."""

    segments: bool = True  # Segment, batch, evaluate: a series in, a label map out
    interactive: bool = False  # Interactive AI: prompts in, an object out
    one_package: bool = True  # one network package: export, train from, plan read it
    rewritable: bool = False  # a package folder medseg may rewrite (evaluate --record keeps scores in it)
    structure_subset: bool = False  # a subset of its structures crops the run (TotalSegmentator's roi_subset)
    weighs_speed: bool = False  # its automatic configuration weighs this computer's speed, not the spacing alone
    precision_tiers: bool = False  # a faster tier (int8, bf16) can be verified and run (medseg.model.precision_tier)


@dataclass
class PlanReport:
    """What a panel shows before a run, as plain data (the GUI renders it; a terminal could too)."""

    title: str  # the configuration that would run
    why: str  # why that one
    title_note: str = ""  # after the title on its line (e.g. "(3D U-Net)"); without one, the reason follows there
    lines: list[str] = field(default_factory=list)  # grid, tiles, memory, subset ...
    table_header: tuple[str, ...] = ()
    table_rows: list[tuple[str, ...]] = field(default_factory=list)
    bold_row: int | None = None  # the row of the configuration that would run
    footer: list[str] = field(default_factory=list)  # the steps after the network, where it runs


@dataclass
class PipelineOutput:
    """What a run gives the segment use case (it adds the image, the card, the checks' notes and the time)."""

    label_map: Volume  # on the image's grid
    labels: dict[int, Label]  # the labels present, as the model's output (its codes)
    device: str  # where it ran in the end (after any fallback)
    configuration: str
    volumes_ml: dict[str, float]
    fallbacks: list[str] = field(default_factory=list)
    postprocessing: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    reason: str = ""  # why this configuration ran, when the kind chooses per series
    estimates_s: dict[str, float] = field(default_factory=dict)  # each configuration's estimate on this device
    parts: list[str] = field(default_factory=list)  # the networks that ran, when several do
    threads: int = 0
    cpu_engine: dict | None = None
    details: dict[str, Any] = field(default_factory=dict)  # kind-specific facts for --json (reason, parts ...)


class SharedRuns:
    """What the models of one run share: a step several of them take on the same image (a TotalSegmentator
    crop model that finds the liver for liver_segments and liver_vessels) is made once and kept here, under
    a key naming everything its answer depends on (the image, the network's weights, its settings, the
    device). One is made per run (medseg.workflows.segment_many) and dropped with it: never a cache that
    outlives the run, so nothing here can be stale."""

    def __init__(self) -> None:
        self._kept: dict[Hashable, tuple[Any, Any]] = {}
        self.made: list[Hashable] = []  # the keys computed, in order (a key once, however many asked)
        self.reused: list[Hashable] = []  # each answer given again

    def get(self, key: Hashable, image: Any, make: Callable[[], Any]) -> Any:
        """The answer kept for ``key`` on ``image`` (the very object: the key holds its ``id``), else ``make()``."""
        full = (id(image), key)
        found = self._kept.get(full)
        if found is not None and found[0] is image:
            self.reused.append(key)
            return found[1]
        value = make()
        self._kept[full] = (image, value)  # the image is held too, so its id cannot be reused in this run
        self.made.append(key)
        return value


class ModelPipeline(ABC):
    """An opened model's behaviour. The defaults refuse what a kind does not offer, in words."""

    capabilities = Capabilities()

    def __init__(self, card: ModelCard) -> None:
        self.card = card
        self.kept: dict | None = None  # the networks and engines a run built, while they are kept (keep_loaded)

    # --- what it is -------------------------------------------------------------------------------

    def package(self) -> Any:
        """The one network package (export, train from, plan); kinds without one refuse in words."""
        raise ModelError(f"{self.card.name} is a {self.card.kind}, not one package (one network) to export, train "
                         "from or plan", path=self.card.source, hint="segment with it (medseg segment, batch or the GUI)")

    @abstractmethod
    def configuration_names(self) -> dict[str, str]:
        """Configuration name -> the short text a picker shows after it (e.g. "3D", "2 networks")."""

    def speed_flags(self) -> dict[str, str]:
        """A publisher's speed flags -> the configuration each names (TotalSegmentator's fast -> 3mm)."""
        return {}

    @property
    def postprocessing(self) -> list[str]:
        return list(self.card.postprocessing)

    def engine_packages(self) -> list[tuple[Any, str]]:
        """(package, configuration) of each network whose CPU engine a run chooses by measurement
        (medseg.model.engine_measurement measures them at install); none for a kind that runs PyTorch only."""
        return []

    def identity(self) -> str:
        """"name@digest": the model's name and a digest of everything that shapes its output (its files), so that a
        batch knows a case done with it from one done with another model (``medseg batch`` resumes by it)."""
        import hashlib

        digest = hashlib.sha256(self.card.name.encode())
        source = Path(self.card.source)
        files = sorted(p for p in source.rglob("*") if p.is_file()) if source.is_dir() else [source]
        for path in files:
            digest.update(path.relative_to(source).as_posix().encode() if source.is_dir() else b"")
            with path.open("rb") as stream:
                for block in iter(lambda: stream.read(1 << 22), b""):
                    digest.update(block)
        return f"{self.card.name}@{digest.hexdigest()[:16]}"

    def keep_loaded(self, keep: bool = True) -> None:
        """Keep what a run loads and builds (weights, networks, engines) for the next run of this model (a batch,
        :func:`medseg.workflows.segmenter.open_segmenter`), or (False) let it go when the run ends."""
        self.kept = {} if keep else None

    # --- a run ------------------------------------------------------------------------------------

    def check_settings(self, settings: SegmentSettings, device: str, fallbacks: list[str]) -> str:
        """Refuse what this model cannot do with ``settings`` before any image is read; the device it runs on."""
        if not self.capabilities.segments:
            raise ModelError(f"{self.card.name} is a {self.card.kind}: it answers prompts, it does not segment a "
                             "series on its own", path=self.card.source,
                             hint="use it with the Interactive AI tool (or medseg edit --prompt)")
        if settings.structures is not None and not self.capabilities.structure_subset:
            raise ModelError(f"a structure subset applies to TotalSegmentator models only (they crop their run to "
                             f"it), not {self.card.name}",
                             hint="choose totalsegmentator/total (or another converted TotalSegmentator task)")
        if (settings.precision or "f32") != "f32" and not self.capabilities.precision_tiers:
            raise ModelError(f"--precision {settings.precision} is not available for {self.card.name} (a "
                             f"{self.card.kind}): only its exact float32 path runs", hint="leave out --precision")
        if settings.configuration is not None and settings.configuration not in self.configuration_names():
            raise ModelError(f"{self.card.name} has no configuration {settings.configuration!r}",
                             path=self.card.source, hint=f"it has: {', '.join(self.configuration_names())}")
        return device

    def check_fits(self, geometry: Volume, settings: SegmentSettings, image_bytes: int) -> None:
        """Refuse, from the header's geometry alone (``geometry``: an image without its voxels), a run this
        machine cannot hold, with each figure; kinds that estimate no memory ahead check nothing here."""

    def choose(self, image: Volume, settings: SegmentSettings, device: str) -> Any:
        """The configuration choice for ``image`` (with its reason) when the kind makes one per series, else None."""
        return None

    @abstractmethod
    def prepare(self, image: Volume, settings: SegmentSettings, device: str,
                progress: ProgressCallback | None, cancel: CancelToken | None) -> Any:
        """What ``run`` needs next (the preprocessed image, or the configuration choice)."""

    def prepared_summary(self, prepared: Any) -> str | None:
        """One line to print before a long run (e.g. the configuration chosen and why), or None."""
        return None

    @abstractmethod
    def run(self, image: Volume, prepared: Any, settings: SegmentSettings, device: str,
            progress: ProgressCallback | None, cancel: CancelToken | None,
            shared: SharedRuns | None = None) -> PipelineOutput:
        """Segment ``image``; ``device`` is where it runs ("auto" on a CPU: the engine is measured per model).
        ``shared``: the run's steps other models of the same run may have made already (a kind that shares
        none ignores it)."""

    @abstractmethod
    def plan(self, volume: Volume, device: str = "auto", configuration: str | None = None,
             structures: tuple[str, ...] | None = None) -> PlanReport:
        """What would run on ``volume`` here, and why."""


@dataclass
class OpenedModel:
    """An opened model: its card and its pipeline (the one object that knows its kind)."""

    card: ModelCard
    pipeline: ModelPipeline

    @property
    def name(self) -> str:
        return self.card.name

    @property
    def capabilities(self) -> Capabilities:
        return self.pipeline.capabilities

    @property
    def package(self) -> Any:
        """The one package the engine runs; a kind without one refuses in words (a ModelError)."""
        return self.pipeline.package()


class ModelKind(ABC):
    """One kind of model folder medseg runs: recognised by its files, opened into an OpenedModel."""

    id: str = ""  # what a catalogue entry names (its "kind")
    title: str = ""  # what a card says (ModelCard.kind)
    capabilities = Capabilities()  # what its models can do (before one is opened: a catalogue entry's)

    @abstractmethod
    def recognises(self, path: Path) -> bool:
        """Whether ``path`` is a model of this kind (cheap: file names and small JSON only)."""

    def required_datasets(self, task: str | None, configurations: list[str]) -> set[int]:
        """The networks (nnU-Net dataset ids) a model of this kind needs beyond its configurations' own to run
        them: e.g. the network that crops a TotalSegmentator task. An install fetches them with it."""
        return set()

    @abstractmethod
    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        """Read it (safely: nothing unpickled); ``reference`` is how the user named it."""


__all__ = ["Capabilities", "ModelCard", "ModelKind", "ModelPipeline", "OpenedModel", "PipelineOutput", "PlanReport",
           "SegmentSettings", "SharedRuns"]
