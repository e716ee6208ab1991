"""Segment a study: every check, the one device choice, the model, its post-processing — once, for every interface.

``medseg segment``, ``medseg batch`` (one case at a time), the GUI's Segment button and the
Train & Export tab's comparison all come here, so a rule added here holds in all of them:

1. the image: opened (:mod:`medseg.workflows.studies`) or an already-open Volume;
2. the checks (:func:`medseg.workflows.checks.check_input`): spacing, image kind (a label map
   given as a CT is refused), modality (another modality than the model's is refused unless
   allowed, and then noted);
3. the device: ``settings.device`` through :func:`medseg.model.backends.resolve_device`, once per
   :class:`Segmenter` (an absent device fails before any image is read);
4. the configuration (chosen by the spacing unless given) and the preprocessing on the device
   (:meth:`Segmenter.prepare`; a batch prepares the next case while the network runs);
5. the network, then the model's own post-processing (:meth:`Segmenter.run`);
6. the result: the label map, its labels (``dict[int, Label]``: names, colours, coded concepts as
   the package states them, provenance AUTOMATIC with the model's name and version), volumes,
   fallbacks and notes.

Progress goes to a :class:`~medseg.progress.Progress` callback; a :class:`~medseg.progress.CancelToken`
stops the work between tiles with :class:`~medseg.errors.Cancelled` and nothing is returned.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.model.kinds import SegmentSettings, SharedRuns
from medseg.progress import CancelToken, ProgressCallback, report
from medseg.workflows.models import ModelCard, OpenedModel, open_model
from medseg.workflows.studies import OpenStudyRequest, open_study


@dataclass(frozen=True)
class SegmentRequest:
    """Segment ``image`` (an open Volume, or a source to open) with ``model`` (a reference or an opened model)."""

    image: Volume | OpenStudyRequest | str | os.PathLike | Sequence[str | os.PathLike]
    model: OpenedModel | str | os.PathLike | None = None  # None: the built-in starter
    settings: SegmentSettings = field(default_factory=SegmentSettings)


@dataclass
class PreparedStudy:
    """An image checked and preprocessed for the model on the run's device (what the network needs next)."""

    image: Volume
    notes: list[str]  # the checks' notes (e.g. a modality the user allowed)
    prepared: Any  # what the model's pipeline prepared (the preprocessed image, or its configuration choice)
    seconds: float


@dataclass
class SegmentedStudy:
    """What segmenting a study gives every interface."""

    image: Volume
    label_map: Volume  # on the image's grid
    labels: dict[int, Label]  # the labels present, as this model's output (codes from the package)
    model: ModelCard
    device: str  # where it ran in the end (after any fallback)
    configuration: str
    seconds: float  # preparing and running (not opening the image)
    volumes_ml: dict[str, float]
    fallbacks: list[str] = field(default_factory=list)  # every degradation, in words
    postprocessing: list[str] = field(default_factory=list)  # the model's steps after the network, as run
    notes: list[str] = field(default_factory=list)  # what the checks said (e.g. an allowed modality)
    reason: str = ""  # why this configuration ran, when the model chooses per series (spacing, estimate, asked for)
    estimates_s: dict[str, float] = field(default_factory=dict)  # each configuration's estimate on this device
    parts: list[str] = field(default_factory=list)  # the networks that ran, when several do
    threads: int = 0  # the CPU threads the run computed with (its share of medseg.threads' budget)
    cpu_engine: dict | None = None  # "auto" on a CPU: the engine measured for this model, and why
    details: dict[str, Any] = field(default_factory=dict)  # the model kind's own facts for --json (reason, parts ...)


def _scaled(progress: ProgressCallback | None, low: float, high: float) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, p.text, p.stage)


class Segmenter:
    """One model with one set of settings, for any number of images (a batch keeps one for its run).

    Every step is the model's pipeline's (medseg.model.kinds): this class never asks which kind it holds."""

    def __init__(self, model: OpenedModel | str | os.PathLike | None = None,
                 settings: SegmentSettings | None = None, *, keep_loaded: bool = False) -> None:
        """``keep_loaded``: what the first image loads and builds (each network's weights, its engine: an ONNX
        session, an OpenVINO compilation) stays for the next (a batch; :func:`medseg.workflows.segmenter.
        open_segmenter`) until :meth:`close`; otherwise each run loads its networks and lets them go."""
        from medseg.model.backends import resolve_device

        self.settings = settings or SegmentSettings()
        self.device = resolve_device(self.settings.device)  # the one device decision: absent devices fail now
        self.model = model if isinstance(model, OpenedModel) else open_model(model)
        if keep_loaded:
            self.model.pipeline.keep_loaded(True)
        self.fallbacks: list[str] = []  # what this Segmenter's settings could not have, in words
        self.device = self.model.pipeline.check_settings(self.settings, self.device, self.fallbacks)
        # "auto" that lands on the CPU stays "auto" for the run: the CPU engine is chosen by measurement
        # per model there (medseg.model.cpu_runtime), not here
        automatic = (self.settings.device or "auto").strip().lower() == "auto"
        self._run_device = "auto" if automatic and self.device == "cpu" else self.device

    def configuration_choice(self, image: Volume) -> Any:
        """The configuration that would run on ``image`` here, why, and each one's estimate, for a model that
        chooses per series by more than the spacing (None for the others: their plan says)."""
        return self.model.pipeline.choose(image, self.settings, self.device)

    @property
    def card(self) -> ModelCard:
        return self.model.card

    def check_fits(self, source: OpenStudyRequest) -> None:
        """Refuse, before a voxel is read, an image file this machine cannot segment: the figure it would need
        (the image and the model's working memory) against the memory available (medseg.io.memory_budget:
        less under an address-space limit), and an absurd plan (medseg.model.run_estimate.check_run). DICOM
        and the pipelines that estimate no memory ahead are checked once the series is read (:meth:`prepare`)."""
        from medseg.workflows.studies import header_geometry

        geometry = header_geometry(source)
        if geometry is not None:
            self.model.pipeline.check_fits(geometry, self.settings, int(geometry.meta.extra["voxel_bytes"]))

    def open(self, source: OpenStudyRequest | str | os.PathLike | Sequence[str | os.PathLike],
             progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Volume:
        from medseg.model.profiling import phase

        request = source if isinstance(source, OpenStudyRequest) else OpenStudyRequest(source)
        self.check_fits(request)  # too big to segment here: said before it is read
        with phase("load"):
            return open_study(request, progress, cancel).volume

    def check(self, image: Volume) -> list[str]:
        """Every check before the model runs: the notes for the result, or a refusal (a MedsegError)."""
        from medseg.workflows.checks import check_input

        return check_input(image, self.model, self.settings.allow_modality)

    def prepare(self, image: Volume, progress: ProgressCallback | None = None,
                cancel: CancelToken | None = None) -> PreparedStudy:
        """The checks, the configuration and the preprocessing on the run's device (refusals come here)."""
        started = time.perf_counter()
        notes = self.check(image)
        if cancel is not None:
            cancel.raise_if_cancelled()
        prepared = self.model.pipeline.prepare(image, self.settings, self.device, progress, cancel)
        return PreparedStudy(image, notes, prepared, time.perf_counter() - started)

    def prepared_summary(self, prepared: PreparedStudy) -> str | None:
        """One line to show before a long run (the configuration chosen and why), when the model has one."""
        return self.model.pipeline.prepared_summary(prepared.prepared)

    def run(self, prepared: PreparedStudy, progress: ProgressCallback | None = None,
            cancel: CancelToken | None = None, shared: SharedRuns | None = None) -> SegmentedStudy:
        """The network(s) and the model's post-processing on a prepared image; ``shared``: the steps other
        models of the same run made (medseg.workflows.segment_many), which this one's pipeline may reuse."""
        started = time.perf_counter()
        out = self.model.pipeline.run(prepared.image, prepared.prepared, self.settings, self._run_device,
                                      progress, cancel, shared=shared)
        return SegmentedStudy(
            image=prepared.image, label_map=out.label_map, labels=dict(out.labels), model=self.card,
            device=out.device, configuration=out.configuration,
            seconds=prepared.seconds + time.perf_counter() - started, volumes_ml=dict(out.volumes_ml),
            fallbacks=[*self.fallbacks, *out.fallbacks], postprocessing=list(out.postprocessing),
            notes=[*prepared.notes, *out.notes],  # the model's own (e.g. nothing found) after the checks
            reason=out.reason, estimates_s=dict(out.estimates_s), parts=list(out.parts), threads=out.threads,
            cpu_engine=out.cpu_engine, details=dict(out.details))

    def segment(self, image: Volume, progress: ProgressCallback | None = None,
                cancel: CancelToken | None = None, shared: SharedRuns | None = None) -> SegmentedStudy:
        prepared = self.prepare(image, _scaled(progress, 0.0, 0.05), cancel)
        return self.run(prepared, _scaled(progress, 0.05, 1.0), cancel, shared)

    def close(self) -> None:
        """Let go of what was kept loaded (the model itself stays open)."""
        self.model.pipeline.keep_loaded(False)


def segment_study(request: SegmentRequest, progress: ProgressCallback | None = None,
                  cancel: CancelToken | None = None) -> SegmentedStudy:
    """Open (if need be), check and segment one study with one model."""
    report(progress, 0.0, "loading the model", "model")
    segmenter = Segmenter(request.model, request.settings)
    image = request.image
    if not isinstance(image, Volume):
        image = segmenter.open(image, _scaled(progress, 0.0, 0.2), cancel)
        return segmenter.segment(image, _scaled(progress, 0.2, 1.0), cancel)
    return segmenter.segment(image, progress, cancel)


__all__ = ["SegmentSettings", "SegmentRequest", "SegmentedStudy", "PreparedStudy", "Segmenter", "segment_study"]
