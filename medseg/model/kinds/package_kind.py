"""One network package: medseg's own (a folder, ``.zip`` or ``.medseg``; the built-in starter is one) and an
nnU-Net v2 result folder (converted on the fly, nothing unpickled). Both run through medseg's engine:
the series' spacing chooses the configuration, the preprocessing runs on the device, then the network,
then the package's declared post-processing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medseg.core.volume import Volume
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
from medseg.progress import CancelToken, ProgressCallback, report

MEDSEG_PACKAGE, NNUNET_RESULT = "medseg model package", "nnU-Net v2 result folder"


def _mm(values) -> str:
    return " × ".join(f"{v:.3g}" for v in values)


def package_card(package: Any, reference: str | Path | None = None, kind: str = MEDSEG_PACKAGE) -> ModelCard:
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
        id=str(reference) if reference is not None else "starter", name=package.name, version=package.version,
        modality=model_modality(package), licence=licence, kind=kind, source=Path(source),
        configurations=configurations, labels=package.label_table(),
        postprocessing=[step.describe(package.names) for step in package.postprocess_steps()])


def _catalogue_licence(provenance: dict[str, Any]) -> str:
    """A model the catalogue installed records its licence line in its provenance (catalogue_licence);
    older installs name their entry only, and say nothing here (model/ never reads the catalogue)."""
    return str(provenance.get("catalogue_licence") or "")


class PackagePipeline(ModelPipeline):
    """Runs one package through medseg's engine (the sliding window, the CPU engine measured per model)."""

    def __init__(self, card: ModelCard, package: Any, rewritable: bool) -> None:
        super().__init__(card)
        self._package = package
        self.capabilities = Capabilities(rewritable=rewritable, precision_tiers=True)

    def package(self) -> Any:
        return self._package

    def configuration_names(self) -> dict[str, str]:
        return {name: f"{plan.dim}D" for name, plan in self._package.configurations.items()}

    def engine_packages(self) -> list[tuple[Any, str]]:
        return [(self._package, name) for name in self._package.configurations]

    def identity(self) -> str:
        return package_identity(self._package)

    @property
    def postprocessing(self) -> list[str]:
        return list(self._package.postprocessing)

    def check_fits(self, geometry: Volume, settings: SegmentSettings, image_bytes: int) -> None:
        check_memory(geometry, self._package, settings, image_bytes)

    def check_settings(self, settings: SegmentSettings, device: str, fallbacks: list[str]) -> str:
        device = super().check_settings(settings, device, fallbacks)
        if (settings.precision or "f32") != "f32":  # a tier not offered is refused before the series is read
            from medseg.errors import ModelError
            from medseg.model.precision_tier import TierDamaged, check_precision, offered_record

            precision = check_precision(settings.precision)
            names = [settings.configuration] if settings.configuration else list(self._package.configurations)
            refusals = []
            for name in names:
                try:
                    offered_record(self._package, name, precision)
                    return device
                except TierDamaged:
                    return device  # the run names the damaged file and goes the exact way
                except ModelError as refusal:
                    refusals.append(refusal)
            raise refusals[0]
        return device

    def prepare(self, image: Volume, settings: SegmentSettings, device: str,
                progress: ProgressCallback | None, cancel: CancelToken | None) -> Any:
        from medseg.model.infer import prepare

        report(progress, 0.0, "preparing the image", "preprocess")
        # a Cancel stops the resampling itself, within a slab (#42.17)
        return prepare(image, self._package, settings.configuration, settings.step, device, cancel=cancel)

    def run(self, image: Volume, prepared: Any, settings: SegmentSettings, device: str,
            progress: ProgressCallback | None, cancel: CancelToken | None,
            shared: SharedRuns | None = None) -> PipelineOutput:
        from medseg.model.infer import segment

        result = segment(image, self._package, device=device, step_size=settings.step, mirror=settings.mirror,
                         tile_batch=settings.tile_batch, postprocess=settings.postprocess, progress=progress,
                         cancel=cancel, prepared=prepared, keep=self.kept, precision=settings.precision)
        return PipelineOutput(
            label_map=result.label_map, labels=dict(result.labels), device=result.device_used,
            configuration=result.configuration, volumes_ml=dict(result.volumes_ml), fallbacks=list(result.fallbacks),
            postprocessing=list(result.postprocessing), notes=list(result.notes), threads=result.threads,
            cpu_engine=result.cpu_engine, details={"precision": result.precision})

    def plan(self, volume: Volume, device: str = "auto", configuration: str | None = None,
             structures: tuple[str, ...] | None = None, step_size: float = 0.5) -> PlanReport:
        from medseg.model.run_estimate import estimate_run

        package = self._package
        spacing_zyx, shape_zyx = volume.spacing_zyx, volume.shape_zyx
        choice = package.choose(spacing_zyx, shape_zyx)
        if configuration is not None and configuration in package.configurations:
            plan = package.configurations[configuration]
            why = (f"chosen by you (the spacing would choose {choice.chosen.name})" if plan is not choice.chosen
                   else "chosen by you (also the spacing's choice)")
        else:
            plan, why = choice.chosen, choice.reason
        lines = [f"    {name}: target {_mm(package.configurations[name].target_spacing_image_zyx)} mm"
                 for name, _, _ in choice.candidates] if len(package.configurations) > 1 else []
        estimate = estimate_run(plan, len(package.labels), volume, step_size)  # what the sliding window will run
        stitching_mb, tile_mb = estimate.stitching_bytes / 1e6, estimate.tile_bytes / 1e6
        axes = "z, y, x" if plan.dim == 3 else "y, x"
        lines += [f"spacing (z, y, x): series {_mm(spacing_zyx)} mm",
                  f"→ network grid {_mm(estimate.network_spacing)} mm, "
                  f"{' × '.join(str(n) for n in estimate.resampled_shape)} voxels",
                  f"patch ({axes}) {' × '.join(str(p) for p in plan.patch_size)}, {len(plan.strides)} stages, "
                  f"{estimate.tiles} tiles at step {step_size:g}",
                  f"memory ≈ {stitching_mb + tile_mb:.0f} MB",
                  f"({stitching_mb:.0f} MB stitching, {tile_mb:.0f} MB per tile)"]
        rows = [(str(i), "×".join(str(v) for v in stride), str(f))
                for i, (stride, f) in enumerate(zip(plan.strides, plan.features_per_stage))]
        footer = [f"then: {step.describe(package.names)}" for step in package.postprocess_steps()]
        return PlanReport(title=plan.name, why=why, title_note=f"({plan.dim}D U-Net)", lines=lines,
                          table_header=("stage", "stride", "features"), table_rows=rows,
                          footer=footer + where_it_runs(package, plan.name, device))


def package_identity(package: Any) -> str:
    """The package's name and a digest of its plans, labels, post-processing and every weight."""
    import hashlib
    import json

    import torch

    digest = hashlib.sha256()
    described = {"name": package.name, "labels": package.names, "postprocessing": package.postprocessing,
                 "configurations": {name: plan.to_dict() for name, plan in package.configurations.items()}}
    codes = {value: label.as_dict() for value, label in package.labels.items() if label.coded}
    if codes:  # the labels' codes shape a SEG's segments (absent: the ids of uncoded models stay as they were)
        described["codes"] = codes
    digest.update(json.dumps(described, sort_keys=True, default=repr).encode())
    for config_name in sorted(package.weights):
        for fold in package.weights[config_name]:
            for key in sorted(fold):
                tensor = fold[key].detach().to("cpu").contiguous()
                digest.update(f"{config_name}/{key}/{tensor.dtype}/{tuple(tensor.shape)}".encode())
                digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    return f"{package.name}@{digest.hexdigest()[:16]}"


def where_it_runs(package: Any, configuration: str, device: str) -> list[str]:
    """"runs on: the CPU, 2 threads — engine (why)" for the plan (the engine as --device auto chooses it)."""
    from medseg import threads
    from medseg.errors import MedsegError
    from medseg.model.backends import backend, describe, resolve_device

    try:
        resolved = resolve_device(device)
    except MedsegError as error:
        return [f"runs on: {error}"]
    if backend(resolved).gpu:
        return [f"runs on: {describe(resolved)}"]
    count = threads.budget_count()
    where = f"runs on: the CPU, {count.threads} thread{'s' if count.threads != 1 else ''} ({count.source})"
    from medseg.model.cpu_runtime import planned_choice
    from medseg.model.precision_tier import plan_line

    if device != "auto":
        return [where, f"engine: {backend(resolved).engine} (chosen by you)", plan_line(package, configuration)]
    choice = planned_choice(package, configuration, count.threads)
    return [where, f"engine: {choice.engine} ({choice.reason})", plan_line(package, configuration)]


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



class MedsegPackageKind(ModelKind):
    id, title = "medseg", MEDSEG_PACKAGE

    def recognises(self, path: Path) -> bool:
        # any file: the package reader says what is wrong with one that is not a package
        return path.is_file() or (path / "model.json").is_file()

    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        from medseg.model.package import load_package

        package = load_package(path)
        card = package_card(package, reference, self.title)
        rewritable = package.source_path is not None and Path(package.source_path).is_dir()
        return OpenedModel(card, PackagePipeline(card, package, rewritable))


class NnUNetResultKind(ModelKind):
    id, title = "nnunet", NNUNET_RESULT

    def recognises(self, path: Path) -> bool:
        return path.is_dir() and (path / "plans.json").is_file() and (path / "dataset.json").is_file()

    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        from medseg.model.nnunet_import import import_nnunet

        package = import_nnunet(path)
        card = package_card(package, reference, self.title)
        return OpenedModel(card, PackagePipeline(card, package, rewritable=False))


def opened_package(package: Any, reference: str | Path | None = None) -> OpenedModel:
    """A package already in memory (a training run's, a benchmark's) as an opened model."""
    card = package_card(package, reference)
    rewritable = package.source_path is not None and Path(package.source_path).is_dir()
    return OpenedModel(card, PackagePipeline(card, package, rewritable))


__all__ = ["MEDSEG_PACKAGE", "NNUNET_RESULT", "MedsegPackageKind", "NnUNetResultKind", "PackagePipeline",
           "check_memory", "opened_package", "package_card", "where_it_runs"]
