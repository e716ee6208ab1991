"""Segment one study with several models (TotalSegmentator's ``total`` and its sub-tasks, or any models) into
one segmentation: one run per model on the same open image, the results merged into one label map.

The first model keeps its own values (what its users' scripts expect); a later model's value that an
earlier model may write (found in this image or not, so the numbering does not depend on the image) moves
to the next free value, and the result says which moved (``moves``, also in the
notes, and so in the sidecar the save writes). Each label keeps its provenance — the model (task) that
made it, its name and version — so the label table shows each structure's source and a DICOM SEG writes
each model as its own algorithm identification. Where models overlap, the later one's structure wins
(a sub-task such as ``liver_segments`` after ``total`` divides the liver); the notes say how many voxels
each earlier structure gave up. Models that share steps share them: a crop model that several
TotalSegmentator tasks run first runs once for the image: the run holds one
:class:`~medseg.model.kinds.SharedRuns`, which every model's pipeline may take a step's answer from (the
TotalSegmentator pipeline keys its crop runs by the crop network's weights, its steps and the device), and
drops it when the run ends.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace
from typing import Sequence

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model.kinds import SegmentSettings, SharedRuns
from medseg.progress import CancelToken, ProgressCallback, report
from medseg.workflows.models import ModelCard, OpenedModel
from medseg.workflows.segment import SegmentedStudy, Segmenter


@dataclass
class CombinedStudy:
    """Several models' results as one segmentation."""

    image: Volume
    label_map: Volume
    labels: dict[int, Label]  # value in the combined map -> the label (its provenance: the model that made it)
    studies: list[SegmentedStudy]  # each model's own result, in the order run
    moves: dict[str, dict[int, int]] = field(default_factory=dict)  # model name -> {its value: value here}
    notes: list[str] = field(default_factory=list)
    seconds: float = 0.0

    @property
    def volumes_ml(self) -> dict[str, float]:
        from medseg.model.infer import label_volumes_ml

        return label_volumes_ml(self.label_map.array, self.labels, self.image.voxel_volume_ml)


def combined_card(models: Sequence[ModelCard], labels: dict[int, Label]) -> ModelCard:
    """One card naming every model of a run ("a + b"), with the merged labels (each keeps its own provenance)."""
    first = models[0]
    return ModelCard(
        id=" + ".join(m.id for m in models), name=" + ".join(m.name for m in models), version="",
        modality=first.modality, licence="; ".join(dict.fromkeys(m.licence for m in models if m.licence)),
        kind=" + ".join(dict.fromkeys(m.kind for m in models)), source=first.source, configurations={},
        labels=dict(labels), postprocessing=[step for m in models for step in m.postprocessing])


def as_segmented(combined: CombinedStudy) -> SegmentedStudy:
    """The run as one result, for what takes one (the GUI's Segment, the edit operation): its card names every
    model, its notes are the merge's (values that moved, overlaps) then each model's, named."""
    studies = combined.studies
    return SegmentedStudy(
        image=combined.image, label_map=combined.label_map, labels=dict(combined.labels),
        model=combined_card([s.model for s in studies], combined.labels),
        device=", ".join(dict.fromkeys(s.device for s in studies)),
        configuration=", ".join(f"{s.model.name.rsplit('/', 1)[-1]} {s.configuration}" for s in studies),
        seconds=combined.seconds, volumes_ml=combined.volumes_ml,
        fallbacks=[f"{s.model.name}: {f}" for s in studies for f in s.fallbacks],
        postprocessing=[step for s in studies for step in s.postprocessing],
        notes=[*combined.notes, *(f"{s.model.name}: {n}" for s in studies for n in s.notes)],
        parts=[part for s in studies for part in s.parts], threads=max((s.threads for s in studies), default=0),
        details={"models": [s.model.name for s in studies], "moves": combined.moves})


def settings_for(model: OpenedModel, settings: SegmentSettings) -> SegmentSettings:
    """``settings`` as they apply to one of several models: a configuration it lacks and a structure subset it
    cannot crop to are the other models' (each refuses the rest in its own check)."""
    configuration = settings.configuration if settings.configuration in model.pipeline.configuration_names() else None
    structures = settings.structures if model.capabilities.structure_subset else None
    return replace(settings, configuration=configuration, structures=structures)


def segment_with_models(image: Volume, models: Sequence[OpenedModel], settings: SegmentSettings | None = None,
                        progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> CombinedStudy:
    """Run every model on ``image`` and merge their results (see the module's docstring)."""
    settings = settings or SegmentSettings()
    if not models:
        raise ModelError("no model to segment with")
    names = [model.card.name for model in models]
    twice = sorted({name for name in names if names.count(name) > 1})
    if twice:
        raise ModelError(f"{', '.join(twice)} given more than once")
    if settings.configuration is not None and not any(
            settings.configuration in m.pipeline.configuration_names() for m in models):
        raise ModelError(f"none of the models has a configuration {settings.configuration!r}")
    if settings.structures is not None and not any(m.capabilities.structure_subset for m in models):
        raise ModelError("a structure subset applies to models that crop to it (TotalSegmentator's tasks), "
                         f"not to {', '.join(names)}")
    started = time.perf_counter()
    segmenters = [Segmenter(model, settings_for(model, settings)) for model in models]  # every refusal first
    studies = []
    shared = SharedRuns()  # this run's only: dropped when it returns
    for index, segmenter in enumerate(segmenters):
        low, high = index / len(segmenters), (index + 1) / len(segmenters)
        text = f"{segmenter.card.name} ({index + 1} of {len(segmenters)})"
        studies.append(segmenter.segment(image, _scaled(progress, low, high, text), cancel, shared))
    combined = merge_results(image, studies)
    combined.seconds = time.perf_counter() - started
    report(progress, 1.0, "done", "done")
    return combined


def merge_results(image: Volume, studies: Sequence[SegmentedStudy]) -> CombinedStudy:
    """One label map of several results (the first keeps its values; later ones move where taken)."""
    merged = np.zeros(image.shape_zyx, dtype=np.uint16)
    labels: dict[int, Label] = {}
    moves: dict[str, dict[int, int]] = {}
    notes: list[str] = []
    reserved: set[int] = set()  # every value an earlier model may write, found or not: numbering stays stable
    for study in studies:
        table = {}
        taken = set(reserved)
        own = sorted(study.model.labels)  # every value the model may write, present or not (stable numbering)
        for value in own:  # a taken value moves where neither the others nor this model's own values are
            table[value] = value if value not in taken else _next_free(taken | set(own) | set(table.values()))
        moved = {v: t for v, t in table.items() if v != t}
        if moved:
            moves[study.model.name] = moved
            notes.append(f"{study.model.name}: {len(moved)} label value(s) moved to stay distinct from "
                         f"{', '.join(sorted(moves.keys() - {study.model.name}) or [studies[0].model.name])}'s: "
                         + ", ".join(f"{study.model.labels[v].name} {v}→{t}" for v, t in list(moved.items())[:6])
                         + (" …" if len(moved) > 6 else ""))
        lookup = np.zeros(max(own, default=0) + 1, dtype=np.uint16)
        for value, target in table.items():
            lookup[value] = target
        result = study.label_map.array
        mapped = lookup[np.clip(result, 0, len(lookup) - 1)] * (result < len(lookup))
        overwritten = merged[(mapped != 0) & (merged != 0)]
        if overwritten.size:
            lost = {int(v): int(n) for v, n in zip(*np.unique(overwritten, return_counts=True))}
            notes.append(f"{study.model.name}'s structures replaced earlier ones where they overlap: "
                         + ", ".join(f"{labels[v].name} {n} voxels" for v, n in lost.items() if v in labels))
        np.copyto(merged, mapped, where=mapped != 0)
        for value, label in study.labels.items():  # a moved label records its model's value (the sidecar says it)
            target = table.get(value, value)
            labels[target] = replace(label, value=target, model_value=value if target != value else label.model_value)
        reserved |= set(table.values())
    present = {int(v) for v in np.unique(merged) if v}
    labels = {v: label for v, label in sorted(labels.items()) if v in present}
    dtype = np.uint8 if max(present, default=0) <= 255 else np.uint16
    names = {0: "background", **{v: label.name for v, label in labels.items()}}
    label_map = image.with_array(merged.astype(dtype), labels=names, modality="SEG")
    return CombinedStudy(image, label_map, labels, list(studies), moves, notes)


def _next_free(taken: set[int]) -> int:
    value = max(taken, default=0) + 1
    if value > MAX_LABEL_VALUE:
        free = [v for v in range(1, MAX_LABEL_VALUE + 1) if v not in taken]
        if not free:
            raise ModelError(f"the models segment more than {MAX_LABEL_VALUE} structures together: too many for "
                             "one label map", hint="segment with fewer models at once")
        value = free[0]
    return value


def _scaled(progress: ProgressCallback | None, low: float, high: float, text: str) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, f"{text}: {p.text}", p.stage)


__all__ = ["CombinedStudy", "as_segmented", "combined_card", "merge_results", "segment_with_models", "settings_for"]
