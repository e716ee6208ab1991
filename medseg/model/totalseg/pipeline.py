"""TotalSegmentator's ``total`` pipeline around its nnU-Net networks, run by medseg.

The steps and their arithmetic are TotalSegmentator 2.18.0's (``geometry`` has the details):
the optional roi_subset crop (the crop model's labels, widened by 20 mm, cast to int32), RAS,
linear resampling to the configuration's spacing with the int32 truncation, each network at
tile step 0.8 with its argmax at network resolution, the parts merged into TotalSegmentator's
numbering (a later part overwrites an earlier one where it predicts foreground), the large-image
split into thirds, the labels zoomed back with order 0, un-reoriented, un-cropped, and the
structures not asked for removed.

Where medseg differs, it is in cost only: the image is loaded, reoriented and resampled once
for all five 1.5 mm parts (TotalSegmentator writes, re-reads and re-preprocesses it for each and
builds a fresh predictor per part), nothing goes through files, and every phase runs on all the
run's threads.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from medseg import threads as medseg_threads
from medseg.core.labels import Label, Provenance
from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model import backends
from medseg.model.infer import SegmentationResult, label_volumes_ml, sliding_window_logits
from medseg.model.package import build_networks
from medseg.model.preprocess import logits_to_label_map, preprocess_to
from medseg.model.profiling import phase
from medseg.model.totalseg.classes import CROP_ADDON_MM, SPLIT_MARGIN, SPLIT_MIN_SLICES, SPLIT_VOXELS
from medseg.model.totalseg.convert import PartRef, TotalSegConfiguration, TotalSegModel
from medseg.model.totalseg.geometry import (
    canonical_orientation, crop_box, header_zooms, needs_resampling, resample_labels_back, resample_to_spacing,
)
from medseg.progress import CancelToken, ProgressCallback, report

NNUNET_CONFIGURATION = "3d_fullres"


@dataclass
class TotalSegRun:
    """What one run did, beyond the label map: for the CLI's and the GUI's notes."""

    configuration: str
    parts: list[str] = field(default_factory=list)
    resampled_shape_xyz: tuple[int, int, int] | None = None
    split: bool = False
    crop_xyz: tuple[slice, slice, slice] | None = None
    notes: list[str] = field(default_factory=list)


def structure_values(model: TotalSegModel, structures: Sequence[str] | None) -> list[int] | None:
    """The label values of the named structures (TotalSegmentator's names); unknown names are an error."""
    if structures is None:
        return None
    by_name = {name: value for value, name in model.labels.items()}
    unknown = [name for name in structures if name not in by_name]
    if unknown:
        raise ModelError(f"unknown structure(s) {', '.join(unknown)} for {model.name}",
                         hint="`medseg segment --model totalsegmentator/total --list-structures` lists them")
    if not structures:
        raise ModelError("no structures given")
    return sorted({by_name[name] for name in structures})


def segment_totalseg(
    volume: Volume,
    model: TotalSegModel,
    configuration: str,
    structures: Sequence[str] | None = None,
    device: str = "auto",
    force_split: bool = False,
    crop_mask: np.ndarray | None = None,
    threads: int | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
) -> tuple[SegmentationResult, TotalSegRun]:
    """Segment a CT as TotalSegmentator's ``total`` task does; labels on the input's grid, its numbers and names.

    ``structures`` is TotalSegmentator's roi_subset: the crop model finds them first, the run is
    cropped around them (``crop_mask``, a (z, y, x) mask on the input grid, replaces the crop
    model's finding), only the parts that hold them run, and the other labels are removed.
    The run is one job on the process's thread budget (medseg.threads): it computes with its share,
    at most ``threads``, and the result says how many it had.
    """
    with medseg_threads.job("TotalSegmentator", most=threads) as lease:
        result, run = _segment_totalseg(volume, model, configuration, structures, device, force_split, crop_mask,
                                        lease, progress, cancel)
    return result, run


def _segment_totalseg(volume: Volume, model: TotalSegModel, configuration: str, structures: Sequence[str] | None,
                      device: str, force_split: bool, crop_mask: np.ndarray | None, lease: Any,
                      progress: ProgressCallback | None, cancel: CancelToken | None,
                      ) -> tuple[SegmentationResult, TotalSegRun]:
    started = time.perf_counter()
    threads_used = lease.apply()
    if configuration not in model.configurations:
        raise ModelError(f"{model.name} has no configuration {configuration!r} installed",
                         hint=f"installed: {', '.join(model.configurations)}")
    config = model.configurations[configuration]
    device_name = backends.resolve_device(device)
    wanted = structure_values(model, structures)
    run = TotalSegRun(configuration=configuration)
    parts = _parts_for(config, wanted, model)
    run.parts = [p.name for p in parts]
    fallbacks: list[str] = []

    image_xyz = volume.array.T  # nibabel's (x, y, z) array: the same voxels, no copy
    box = None
    if wanted is not None:
        if crop_mask is None:
            crop_mask = _crop_model_mask(volume, model, wanted, device_name, progress, cancel)
        mask_xyz = np.asarray(crop_mask).T
        if mask_xyz.shape != image_xyz.shape:
            raise ModelError(f"the crop mask's shape {mask_xyz.shape[::-1]} is not the image's {volume.shape_zyx}")
        box = crop_box(mask_xyz, header_zooms(volume), CROP_ADDON_MM)
        if box is None:
            run.notes.append("the crop model found none of the structures asked for: the result is empty")
            return _result(volume, np.zeros(volume.shape_zyx, np.uint8), model, configuration, device_name,
                           fallbacks, started, threads_used), run
        run.crop_xyz = box
        image_xyz = image_xyz[box].astype(np.int32)  # TotalSegmentator casts the cropped image to int32

    with phase("preprocess"):
        report(progress, 0.02, "reorienting and resampling", "preprocess")
        canonical = canonical_orientation(volume)
        zooms = canonical.zooms(header_zooms(volume))
        canonical_xyz = canonical.apply_xyz(image_xyz)
        shape_before = tuple(canonical_xyz.shape)
        resampled_xyz = resample_to_spacing(canonical_xyz, zooms, config.spacing_mm, cancel=cancel)
        run.resampled_shape_xyz = tuple(int(n) for n in resampled_xyz.shape)  # type: ignore[assignment]
    if cancel is not None:
        cancel.raise_if_cancelled()

    chunks = _split_chunks(resampled_xyz.shape, len(config.parts) > 1 or force_split, force_split)
    run.split = len(chunks) > 1
    combined = np.zeros(resampled_xyz.shape, dtype=np.uint8)
    steps = len(parts) * len(chunks)
    for part_index, part in enumerate(parts):
        lookup = _lookup_table(part, model)
        threads_used = max(threads_used, medseg_threads.refresh())  # a job started or ended: the share changed
        plan = dataclasses.replace(part.plan, orientation=None)  # the image is RAS already
        with phase("load"):
            package = part.load()
            networks = build_networks(package, NNUNET_CONFIGURATION, backends.torch_device(device_name),
                                      share_weights=True)
            runner = backends.TorchRunner(networks, backends.torch_device(device_name), name=device_name, onednn=True,
                                          lean=True)
        part_labels = np.zeros(resampled_xyz.shape, dtype=np.uint8)
        for chunk_index, (source, keep, target) in enumerate(chunks):
            step = part_index * len(chunks) + chunk_index
            text = (f"part {part_index + 1} of {len(parts)} ({part.title})" if len(parts) > 1 else part.title) + (
                f", third {chunk_index + 1} of 3" if len(chunks) > 1 else "")
            sub = _network_volume(resampled_xyz[:, :, source], config.spacing_mm)
            with phase("preprocess"):
                prep = preprocess_to(sub, plan, backends.torch_device(device_name))
            with phase("stitching"):
                logits = sliding_window_logits(runner, prep.data, plan, step_size=config.step,
                                               progress=_scaled(progress, 0.05 + 0.85 * step / steps,
                                                                0.05 + 0.85 * (step + 1) / steps, text),
                                               cancel=cancel, fallbacks=fallbacks)
            with phase("export"):
                labels_zyx = logits_to_label_map(logits, prep, np.uint8)
            del logits, prep
            part_labels[:, :, target] = labels_zyx.T[:, :, keep]
        del runner, networks, package
        mapped = lookup[part_labels]
        np.copyto(combined, mapped, where=mapped != 0)
        del mapped, part_labels
        if cancel is not None:
            cancel.raise_if_cancelled()

    with phase("export"):
        threads_used = max(threads_used, medseg_threads.refresh())
        report(progress, 0.92, "resampling the labels back", "resample")
        labels_xyz = resample_labels_back(combined, shape_before)
        labels_xyz = canonical.undo_xyz(labels_xyz)
        if box is not None:
            full = np.zeros(volume.array.T.shape, dtype=np.uint8)
            full[box] = labels_xyz
            labels_xyz = full
        labels = np.ascontiguousarray(labels_xyz.T)
        if wanted is not None:
            labels[~np.isin(labels, wanted)] = 0
    report(progress, 1.0, "done", "done")
    return _result(volume, labels, model, configuration, device_name, fallbacks, started, threads_used), run


# --- pieces -------------------------------------------------------------------------------------


def _parts_for(config: TotalSegConfiguration, wanted: list[int] | None, model: TotalSegModel) -> list[PartRef]:
    """The configuration's networks; with a structure subset only those that predict one of them."""
    if wanted is None or len(config.parts) == 1:
        return list(config.parts)
    chosen = [part for part in config.parts if any(int(v) in wanted for v in _lookup_table(part, model) if v)]
    return chosen


def _lookup_table(part: PartRef, model: TotalSegModel) -> np.ndarray:
    """Part label value -> TotalSegmentator's number, by name."""
    by_name = {name: value for value, name in model.labels.items()}
    table = np.zeros(256, dtype=np.uint8)
    for value, name in part.labels.items():
        if value:
            if name not in by_name:
                raise ModelError(f"{part.name} predicts {name!r}, which {model.name} does not list", path=model.path)
            table[value] = by_name[name]
    return table


def _split_chunks(shape_xyz: tuple[int, ...], multimodel: bool, force: bool) -> list[tuple[slice, slice, slice]]:
    """(source slices, kept part of the prediction, target slices) along z, as TotalSegmentator's triple split."""
    whole = slice(0, shape_xyz[2])
    big = int(np.prod(shape_xyz)) > SPLIT_VOXELS and shape_xyz[2] > SPLIT_MIN_SLICES and multimodel
    if not (big or force):
        return [(whole, slice(None), whole)]
    third, margin, n = shape_xyz[2] // 3, SPLIT_MARGIN, shape_xyz[2]
    return [
        (slice(0, third + margin), slice(0, third), slice(0, third)),
        (slice(third + 1 - margin, third * 2 + margin), slice(margin - 1, margin - 1 + third), slice(third, third * 2)),
        (slice(third * 2 + 1 - margin, n), slice(margin - 1, margin - 1 + n - third * 2), slice(third * 2, n)),
    ]


def _network_volume(array_xyz: np.ndarray, spacing_mm: float) -> Volume:
    """The resampled RAS image as the networks see it: (z, y, x) = nibabel's array transposed."""
    return Volume(array_xyz.T, (spacing_mm,) * 3)


def _crop_model_mask(volume: Volume, model: TotalSegModel, wanted: list[int], device: str,
                     progress: ProgressCallback | None, cancel: CancelToken | None) -> np.ndarray:
    """TotalSegmentator's rough segmentation for the crop: the crop model over the whole image."""
    if model.crop_part is None:
        raise ModelError(f"{model.name} has no crop model installed; --structures needs it", path=model.path)
    spacing = model.crop_part.spacing_mm
    crop_model = TotalSegModel(path=model.path, labels=model.labels, name=model.name, configurations={
        "crop": TotalSegConfiguration("crop", spacing, [model.crop_part])})
    report(progress, 0.0, "finding the structures with the crop model", "crop")
    result, _ = segment_totalseg(volume, crop_model, "crop", device=device, cancel=cancel)
    return np.isin(result.label_map.array, wanted)


def _scaled(progress: ProgressCallback | None, low: float, high: float, text: str) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, f"{text}: {p.text}", p.stage)


def _result(volume: Volume, labels: np.ndarray, model: TotalSegModel, configuration: str, device: str,
            fallbacks: list[str], started: float, threads: int) -> SegmentationResult:
    names = {0: "background", **model.labels}
    made_by = Provenance.model(model.name, model.version)
    present = sorted(int(v) for v in np.unique(labels) if v)
    return SegmentationResult(
        label_map=volume.with_array(labels, labels=names, modality="SEG"),
        probabilities=None,
        device_used=device,
        configuration=configuration,
        fallbacks=fallbacks,
        volumes_ml=label_volumes_ml(labels, names, volume.voxel_volume_ml),
        seconds=time.perf_counter() - started,
        labels={value: Label(value, model.labels[value], None, provenance=made_by) for value in present},
        threads=threads,
    )
