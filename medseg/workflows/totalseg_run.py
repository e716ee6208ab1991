"""The segment use case for a TotalSegmentator model (:class:`medseg.workflows.segment.Segmenter` calls here).

A converted TotalSegmentator task (``medseg.model.totalseg``) is several networks and
TotalSegmentator's own steps around them, so the Segmenter's generic preprocessing does not apply:
its settings are checked here once (structure names, configuration, device), the configuration
is chosen per image with its reason and every configuration's estimate, and the pipeline runs with
progress per part and cancellation between tiles. The CLI, batch and the GUI all come through
the Segmenter, so they run a TotalSegmentator model the same way.
"""

from __future__ import annotations

import time
from typing import Any

from medseg.core.volume import Volume
from medseg.errors import DeviceError, ModelError
from medseg.progress import CancelToken, ProgressCallback

# The Segmenter (medseg.workflows.segment) calls here with itself, its settings and its prepared study;
# this module never imports that one (no import cycle), so they are typed Any.

# TotalSegmentator's networks run in PyTorch; the ONNX devices have no export of them.
TORCH_DEVICES = ("cpu", "cuda", "mps")


def check_settings(model: Any, settings: Any, device: str, fallbacks: list[str]) -> str:
    """Refuse what a TotalSegmentator model cannot do, before any image is read; the device it runs on."""
    from medseg.model.totalseg import structure_values

    pipeline = model.pipeline
    if settings.configuration is not None and settings.configuration not in pipeline.configurations:
        raise ModelError(f"{pipeline.name} has no configuration {settings.configuration!r} installed",
                         path=pipeline.path, hint=f"installed: {', '.join(pipeline.configurations)}")
    if settings.mirror:
        raise ModelError("TotalSegmentator's pipeline runs without mirroring (its networks were trained without it)",
                         hint="leave out --mirror for TotalSegmentator models")
    structure_values(pipeline, list(settings.structures) if settings.structures is not None else None)
    if device in TORCH_DEVICES:
        return device
    if (settings.device or "auto").strip().lower() == "auto":
        fallbacks.append(f"TotalSegmentator's networks run in PyTorch: on the CPU instead of {device}")
        return "cpu"
    raise DeviceError(f"TotalSegmentator's networks run in PyTorch, not on {device}",
                      hint="use --device auto, cpu or cuda")


def choose(model: Any, image: Volume, settings: Any, device: str) -> Any:
    """The configuration for ``image``: the user's, else by spacing and this device's estimate (with the reason)."""
    from medseg.model.totalseg import choose_configuration

    return choose_configuration(model.pipeline, image, device, forced=settings.configuration)


def automatic_choice(model: Any, image: Volume, device: str = "auto") -> Any:
    """What the Segment panel shows: the configuration chosen without the user's override, its reason and
    every configuration's estimate on ``device`` (as the user names it; the ONNX devices estimate the CPU)."""
    from medseg.model.backends import resolve_device
    from medseg.model.totalseg import choose_configuration

    resolved = resolve_device(device)
    return choose_configuration(model.pipeline, image, resolved if resolved in TORCH_DEVICES else "cpu")


def run(segmenter: Any, prepared: Any, progress: ProgressCallback | None,
        cancel: CancelToken | None) -> dict[str, Any]:
    """Run the pipeline; the fields of the Segmenter's SegmentedStudy (it builds the study)."""
    from medseg.model.totalseg import segment_totalseg

    started = time.perf_counter()
    choice = prepared.prepared
    structures = list(segmenter.settings.structures) if segmenter.settings.structures is not None else None
    result, run_info = segment_totalseg(prepared.image, segmenter.model.pipeline, choice.name, structures,
                                        device=segmenter.device, progress=progress, cancel=cancel)
    return dict(
        image=prepared.image, label_map=result.label_map, model=segmenter.card,
        labels={value: segmenter.card.labels.get(value, label) for value, label in result.labels.items()},  # coded
        device=result.device_used, configuration=choice.name,
        seconds=prepared.seconds + time.perf_counter() - started, volumes_ml=dict(result.volumes_ml),
        fallbacks=[*segmenter.fallbacks, *result.fallbacks], postprocessing=[],
        notes=[*prepared.notes, f"configuration {choice.summary()}", *run_info.notes],
        reason=choice.reason, estimates_s=dict(choice.estimates_s), parts=list(run_info.parts),
        threads=result.threads)  # the CPU threads the pipeline computed with (its job's share of medseg.threads)


__all__ = ["automatic_choice", "check_settings", "choose", "run", "TORCH_DEVICES"]
