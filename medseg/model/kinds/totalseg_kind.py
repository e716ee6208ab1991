"""A converted TotalSegmentator task: several networks and TotalSegmentator's own steps around them
(:mod:`medseg.model.totalseg`). Its settings are checked once (structure names, configuration, device),
the configuration is chosen per series by spacing and this computer's estimate (with the reason and
every configuration's estimate), and the pipeline runs with progress per part."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from medseg.core.labels import Label, Provenance
from medseg.core.volume import Volume
from medseg.errors import DeviceError, ModelError
from medseg.model.kinds.base import (
    Capabilities,
    ModelCard,
    ModelKind,
    ModelPipeline,
    OpenedModel,
    PipelineOutput,
    PlanReport,
    SegmentSettings,
    SharedRuns,
)
from medseg.progress import CancelToken, ProgressCallback

TOTALSEG_MODEL = "TotalSegmentator model"  # several networks run by TotalSegmentator's own pipeline
# TotalSegmentator's networks run in PyTorch on these devices; with --device auto on the CPU each network runs on
# the CPU engine measured for it (medseg.model.totalseg.part_engine), but an ONNX engine cannot be forced.
TORCH_DEVICES = ("cpu", "cuda", "mps")


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 1:
        return "< 1 s"
    if seconds < 90:
        return f"~{seconds:.0f} s"
    if seconds < 5400:
        return f"~{seconds / 60:.0f} min"
    return f"~{seconds / 3600:.1f} h"


def totalseg_card(model: Any, reference: str | Path | None) -> ModelCard:
    """The card of a converted task: its configurations (spacing, networks) and its structures with
    TotalSegmentator's numbers and names (the catalogue's groups and codes join it in workflows)."""
    made_by = Provenance.model(model.name, model.version)
    configurations = {name: (f"{config.spacing_mm:g} mm, {len(config.parts)} network"
                             f"{'s' if len(config.parts) > 1 else ''} merged by TotalSegmentator's pipeline"
                             + (f" (its {config.flag})" if config.flag else "") + f", tile step {config.step:g}")
                      for name, config in model.configurations.items()}
    labels = {value: Label(value, name, provenance=made_by) for value, name in sorted(model.labels.items())}
    return ModelCard(
        id=str(reference) if reference is not None else model.name, name=model.name, version=model.version,
        modality="CT", licence="", kind=TOTALSEG_MODEL, source=Path(model.path), configurations=configurations,
        labels=labels)


def _engine_notes(engines: dict[str, str]) -> list[str]:
    """One line when every network ran on the same engine for the same reason, else one per network."""
    if len(set(engines.values())) == 1:
        return [next(iter(engines.values()))]
    return [f"{title}: {why}" for title, why in engines.items()]


class _PartPackages(Sequence):
    """(package, configuration) of each network, its weights read when asked for (a measurement at install goes
    through them one at a time, not all of `total`'s at once)."""

    def __init__(self, parts: list) -> None:
        self._parts = parts

    def __len__(self) -> int:
        return len(self._parts)

    def __getitem__(self, index):  # type: ignore[override]
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        part = self._parts[index]
        return part.load(), part.configuration


class TotalSegPipeline(ModelPipeline):
    capabilities = Capabilities(one_package=False, structure_subset=True, weighs_speed=True)

    def __init__(self, card: ModelCard, model: Any) -> None:
        super().__init__(card)
        self.model = model

    def configuration_names(self) -> dict[str, str]:
        names = {}
        for name, config in self.model.configurations.items():
            count = len(config.parts)
            names[name] = (f"{count} network{'s' if count > 1 else ''}"
                           + (f", TotalSegmentator {config.flag}" if config.flag else ""))
        return names

    def speed_flags(self) -> dict[str, str]:
        """--fast / --fastest as TotalSegmentator picks them for this task (--fastest falls back to the fast
        mode where there is no fastest one, e.g. body's 6 mm network), where that configuration is installed."""
        from medseg.model.totalseg.tasks import task_spec

        try:
            spec = task_spec(self.model.task)
        except ModelError:  # a task the table does not list: its configurations' own flags
            return {config.flag.lstrip("-"): name for name, config in self.model.configurations.items() if config.flag}
        flags = {}
        for flag in ("fast", "fastest"):
            try:
                chosen = spec.configuration_for(fast=flag == "fast", fastest=flag == "fastest")
            except ModelError:
                continue
            if chosen in self.model.configurations and chosen != spec.configuration_for():
                flags[flag] = chosen
        return flags

    def check_settings(self, settings: SegmentSettings, device: str, fallbacks: list[str]) -> str:
        from medseg.model.totalseg import structure_values

        pipeline = self.model
        if settings.configuration is not None and settings.configuration not in pipeline.configurations:
            raise ModelError(f"{pipeline.name} has no configuration {settings.configuration!r} installed",
                             path=pipeline.path, hint=f"installed: {', '.join(pipeline.configurations)}")
        if settings.mirror:
            raise ModelError("TotalSegmentator's pipeline runs without mirroring (its networks were trained without "
                             "it)", hint="leave out --mirror for TotalSegmentator models")
        structure_values(pipeline, list(settings.structures) if settings.structures is not None else None)
        if device in TORCH_DEVICES:
            return device
        if (settings.device or "auto").strip().lower() == "auto":
            fallbacks.append(f"TotalSegmentator's networks run in PyTorch: on the CPU instead of {device}")
            return "cpu"
        raise DeviceError(f"TotalSegmentator's networks run in PyTorch, not on {device}",
                          hint="use --device auto (on the CPU: the engine measured fastest for each network), cpu "
                               "or cuda")

    def choose(self, image: Volume, settings: SegmentSettings, device: str) -> Any:
        from medseg.model.totalseg import choose_configuration

        return choose_configuration(self.model, image, device if device in TORCH_DEVICES else "cpu",
                                    forced=settings.configuration)

    def prepare(self, image: Volume, settings: SegmentSettings, device: str,
                progress: ProgressCallback | None, cancel: CancelToken | None) -> Any:
        return self.choose(image, settings, device)  # TotalSegmentator's steps are its pipeline's: only the choice

    def prepared_summary(self, prepared: Any) -> str | None:
        return f"configuration {prepared.summary()}"

    def run(self, image: Volume, prepared: Any, settings: SegmentSettings, device: str,
            progress: ProgressCallback | None, cancel: CancelToken | None,
            shared: SharedRuns | None = None) -> PipelineOutput:
        from medseg.model.totalseg import segment_totalseg

        choice = prepared
        structures = list(settings.structures) if settings.structures is not None else None
        # left to medseg (--device auto, on the CPU): each network runs on the CPU engine measured for it
        automatic = device == "auto" or (device == "cpu" and (settings.device or "auto").strip().lower() == "auto")
        result, run_info = segment_totalseg(image, self.model, choice.name, structures,
                                            device="auto" if automatic else device,
                                            progress=progress, cancel=cancel, shared=shared, keep=self.kept)
        return PipelineOutput(
            label_map=result.label_map,
            labels={value: self.card.labels.get(value, label) for value, label in result.labels.items()},  # coded
            device=result.device_used, configuration=choice.name, volumes_ml=dict(result.volumes_ml),
            fallbacks=list(result.fallbacks),
            notes=[f"configuration {choice.summary()}", *run_info.notes, *_engine_notes(run_info.engines)],
            reason=choice.reason,
            estimates_s=dict(choice.estimates_s), parts=list(run_info.parts), threads=result.threads,
            details={"reason": choice.reason, "estimates_s": {k: round(v, 1) for k, v in choice.estimates_s.items()},
                     "parts": list(run_info.parts), "runs": list(run_info.runs), "engines": dict(run_info.engines)})

    def engine_packages(self) -> Sequence[tuple[Any, str]]:
        """Every network of the task (its parts, crop and helper networks), each loaded only when it is measured."""
        return _PartPackages(list({str(part.path): part for part in self.model.parts.values()}.values()))

    def plan(self, volume: Volume, device: str = "auto", configuration: str | None = None,
             structures: tuple[str, ...] | None = None) -> PlanReport:
        from medseg.model.backends import resolve_device
        from medseg.model.totalseg import choose_configuration

        resolved = resolve_device(device)
        automatic = choose_configuration(self.model, volume, resolved if resolved in TORCH_DEVICES else "cpu")
        model = self.model
        chosen = configuration if configuration in model.configurations else automatic.name
        if chosen == automatic.name and configuration is None:
            why = automatic.reason
        elif chosen == automatic.name:
            why = "chosen by you (also the automatic choice)"
        else:
            why = f"chosen by you (automatic would choose {automatic.name}: {automatic.reason})"
        names = list(model.configurations)
        rows = [(name, f"{config.spacing_mm:g} mm", f"{len(config.parts)}",
                 _duration(automatic.estimates_s.get(name))) for name, config in model.configurations.items()]
        subset = (f"{len(structures)} of {len(model.labels)} structures: cropped around them, "
                  f"only their networks run (estimates are for all)" if structures
                  else f"all {len(model.labels)} structures")
        return PlanReport(
            title=chosen, why=why,
            lines=[f"spacing (z, y, x): series {' × '.join(f'{v:.3g}' for v in volume.spacing_zyx)} mm", subset],
            table_header=("configuration", "network grid", "networks", "estimate here"), table_rows=rows,
            bold_row=names.index(chosen),
            footer=[f"TotalSegmentator's steps: resampled to the grid, tiles at step "
                    f"{model.configurations[chosen].step:g}, parts merged, labels back on the series' grid"])


class TotalSegKind(ModelKind):
    id, title = "totalsegmentator", TOTALSEG_MODEL
    capabilities = TotalSegPipeline.capabilities

    def required_datasets(self, task: str | None, configurations: list[str]) -> set[int]:
        """Every network the task's runs use (its crops, recursively, and its refinement), as TotalSegmentator
        downloads them before it runs the task."""
        from medseg.model.totalseg.tasks import required_runs, task_spec

        if task is None:
            return set()
        try:
            runs = required_runs(task, configurations or None)
        except ModelError:  # a task the table does not list (total_v3's, say): its own networks only
            return set()
        return {network.dataset for name, mode in runs for network in task_spec(name).modes[mode].networks}

    def recognises(self, path: Path) -> bool:
        from medseg.model.totalseg import is_totalseg_model

        return path.is_dir() and is_totalseg_model(path)

    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        from medseg.model.totalseg import load_totalseg_model

        model = load_totalseg_model(path)
        card = totalseg_card(model, reference)
        return OpenedModel(card, TotalSegPipeline(card, model))


__all__ = ["TORCH_DEVICES", "TOTALSEG_MODEL", "TotalSegKind", "TotalSegPipeline", "totalseg_card"]
