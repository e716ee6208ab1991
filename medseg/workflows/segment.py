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
from medseg.progress import CancelToken, ProgressCallback, report
from medseg.workflows.models import ModelCard, OpenedModel, open_model
from medseg.workflows.studies import OpenStudyRequest, open_study


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
    structures: tuple[str, ...] | None = None  # a TotalSegmentator model: only these (its roi_subset), by name


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
    prepared: Any  # medseg.model.infer.PreparedInput
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
    reason: str = ""  # why this configuration ran (a TotalSegmentator model: by spacing, device estimate or asked for)
    estimates_s: dict[str, float] = field(default_factory=dict)  # each configuration's estimate on this device
    parts: list[str] = field(default_factory=list)  # the networks that ran (a TotalSegmentator model's parts)
    threads: int = 0  # the CPU threads the run computed with (its share of medseg.threads' budget)
    cpu_engine: dict | None = None  # "auto" on a CPU: the engine measured for this model, and why


def _scaled(progress: ProgressCallback | None, low: float, high: float) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, p.text, p.stage)


class Segmenter:
    """One model with one set of settings, for any number of images (a batch keeps one for its run)."""

    def __init__(self, model: OpenedModel | str | os.PathLike | None = None,
                 settings: SegmentSettings | None = None) -> None:
        from medseg.model.backends import resolve_device

        self.settings = settings or SegmentSettings()
        self.device = resolve_device(self.settings.device)  # the one device decision: absent devices fail now
        self.model = model if isinstance(model, OpenedModel) else open_model(model)
        self.fallbacks: list[str] = []  # what this Segmenter's settings could not have, in words
        if self.model.pipeline is not None:
            from medseg.workflows.totalseg_run import check_settings

            self.device = check_settings(self.model, self.settings, self.device, self.fallbacks)
        elif self.settings.structures is not None:
            from medseg.errors import ModelError

            raise ModelError(f"a structure subset applies to TotalSegmentator models only, not {self.card.name}",
                             hint="choose totalsegmentator/total (or another converted TotalSegmentator task)")
        # "auto" that lands on the CPU stays "auto" for the run: the CPU engine is chosen by measurement
        # per model there (medseg.model.cpu_runtime), not here
        automatic = (self.settings.device or "auto").strip().lower() == "auto"
        self._run_device = "auto" if automatic and self.device == "cpu" else self.device

    def configuration_choice(self, image: Volume) -> Any:
        """A TotalSegmentator model: the configuration that would run on ``image`` here, why, and each one's
        estimate (medseg.model.totalseg.ConfigurationChoice); None for other models (their plan says)."""
        if self.model.pipeline is None:
            return None
        from medseg.workflows.totalseg_run import choose

        return choose(self.model, image, self.settings, self.device)

    @property
    def card(self) -> ModelCard:
        return self.model.card

    def check_fits(self, source: OpenStudyRequest) -> None:
        """Refuse, before a voxel is read, an image file this machine cannot segment: the figure it would need
        (the image and the model's working memory) against the memory available (medseg.io.memory_budget:
        less under an address-space limit), and an absurd plan (medseg.model.run_estimate.check_run). DICOM
        and TotalSegmentator's pipelines are checked once the series is read (:meth:`prepare`)."""
        from medseg.workflows.studies import header_geometry

        if self.model.pipeline is not None:
            return
        geometry = header_geometry(source)
        if geometry is not None:
            check_memory(geometry, self.model.package, self.settings, int(geometry.meta.extra["voxel_bytes"]))

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
        from medseg.model.infer import prepare

        started = time.perf_counter()
        notes = self.check(image)
        if cancel is not None:
            cancel.raise_if_cancelled()
        if self.model.pipeline is not None:  # TotalSegmentator's steps are its pipeline's: only the choice here
            return PreparedStudy(image, notes, self.configuration_choice(image), time.perf_counter() - started)
        report(progress, 0.0, "preparing the image", "preprocess")
        prepared = prepare(image, self.model.package, self.settings.configuration, self.settings.step, self.device,
                           cancel=cancel)  # a Cancel stops the resampling itself, within a slab (#42.17)
        return PreparedStudy(image, notes, prepared, time.perf_counter() - started)

    def run(self, prepared: PreparedStudy, progress: ProgressCallback | None = None,
            cancel: CancelToken | None = None) -> SegmentedStudy:
        """The network and the model's post-processing on a prepared image."""
        from medseg.model.infer import segment

        settings, started = self.settings, time.perf_counter()
        if self.model.pipeline is not None:
            from medseg.workflows.totalseg_run import run

            return SegmentedStudy(**run(self, prepared, progress, cancel))
        result = segment(prepared.image, self.model.package, device=self._run_device, step_size=settings.step,
                         mirror=settings.mirror, tile_batch=settings.tile_batch, postprocess=settings.postprocess,
                         progress=progress, cancel=cancel, prepared=prepared.prepared)
        return SegmentedStudy(
            image=prepared.image, label_map=result.label_map, labels=dict(result.labels), model=self.card,
            device=result.device_used, configuration=result.configuration,
            seconds=prepared.seconds + time.perf_counter() - started, volumes_ml=dict(result.volumes_ml),
            fallbacks=list(result.fallbacks), postprocessing=list(result.postprocessing),
            notes=[*prepared.notes, *result.notes],  # the model's own (e.g. nothing found) after the checks
            threads=result.threads, cpu_engine=result.cpu_engine)

    def segment(self, image: Volume, progress: ProgressCallback | None = None,
                cancel: CancelToken | None = None) -> SegmentedStudy:
        prepared = self.prepare(image, _scaled(progress, 0.0, 0.05), cancel)
        return self.run(prepared, _scaled(progress, 0.05, 1.0), cancel)


def check_memory(image: Volume, package: Any, settings: SegmentSettings, image_bytes: int) -> None:
    """Refuse a run whose image (``image_bytes`` of voxels) and working memory (medseg.model.run_estimate)
    together exceed the memory available, with each figure; then check_run's rules (tiles, resampling)."""
    from medseg.errors import ResourceLimitError
    from medseg.io.memory_budget import HEADROOM_BYTES, available_bytes, format_size
    from medseg.model.infer import choose_configuration
    from medseg.model.run_estimate import check_run, estimate_run

    _name, plan = choose_configuration(package, settings.configuration, image)
    estimate = estimate_run(plan, len(package.labels), image, settings.step)
    where = (image.meta.source_files or [None])[0]
    needed = image_bytes + estimate.total_bytes + HEADROOM_BYTES
    free = available_bytes()
    if needed > free:
        size = " x ".join(str(n) for n in image.size_xyz)
        resampled = " x ".join(str(n) for n in estimate.resampled_shape)
        raise ResourceLimitError(
            f"segmenting this {size}-voxel image needs about {format_size(needed)} of memory (the image "
            f"{format_size(image_bytes)}, the model's working memory {format_size(estimate.total_bytes)} for a "
            f"{resampled} resampled image, {format_size(HEADROOM_BYTES)} for the rest) and "
            f"{format_size(free)} is available; nothing was read", path=where,
            hint="run it on a machine with more memory (or close other programs); a crop of the region "
                 "needed is segmented in less")
    check_run(estimate, where)


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
