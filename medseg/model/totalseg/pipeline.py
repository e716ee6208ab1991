"""TotalSegmentator's pipeline around its nnU-Net networks, run by medseg, for any of its CT tasks.

A task's mode (medseg's configuration) is data (medseg.model.totalseg.tasks); the steps and their
arithmetic are TotalSegmentator 2.18.0's ``totalsegmentator()`` and ``nnUNet_predict_image``
(``geometry`` and ``postprocess`` have the details):

1. the crop, when the task has one (or for ``total``'s structure subset): another task's run (the
   6 mm or, with ``robust_crop``, the 3 mm ``total`` network, the 6 mm body network, or a whole task
   such as teeth's craniofacial_structures) finds the crop structures; their bounding box in the
   input's own grid, widened by ``int(mm / voxel size)`` voxels, is cut out and cast to int32;
2. RAS; the resampling to the task's spacing (one value or per axis; linear, corner-aligned, int32
   truncation; none for a task without one: nnU-Net's own preprocessing then resamples to the plans);
3. each network at the task's tile step (0.8 for ``total``, else 0.5), its folds averaged as nnU-Net
   does (each fold's stitched float16 logits summed, then divided), the argmax on the network's grid;
   several networks merged through their local class maps, a later one overwriting an earlier one
   where it predicts foreground; the large-image split into thirds for several networks;
4. the auxiliary labels removed and the task's own clean-up at network resolution (``body``,
   ``vertebrae_pp``);
5. the labels zoomed back with order 0, un-reoriented, un-cropped; vertebrae_pp_refined's refinement
   with the vertebrae_body network's run; the structures not asked for removed; ``remove_outside``
   (heartchambers_highres: outside the crop run's heart, aorta and IVC, dilated).

Each run another run depends on (a crop, a refinement, several crop structures from one network)
is made once per call, and once per multi-task run when the caller passes the run's ``shared``
(medseg.model.kinds.SharedRuns: liver_segments and liver_vessels in one run find the liver once).
Where medseg differs, it is in cost only: the image is loaded, reoriented and
resampled once for all of a configuration's networks (TotalSegmentator writes, re-reads and
re-preprocesses it for each and builds a fresh predictor per network), nothing goes through files,
and every phase runs on all the run's threads.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from medseg import threads as medseg_threads
from medseg.core.labels import Label, Provenance
from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model import backends
from medseg.model.infer import SegmentationResult, label_volumes_ml
from medseg.model.logits_grid import logits_to_label_map
from medseg.model.package import build_networks
from medseg.model.preprocess import preprocess_to
from medseg.model.profiling import phase
from medseg.model.sliding_window import sliding_window_logits
from medseg.model.totalseg import part_engine, postprocess
from medseg.model.totalseg.classes import CROP_ADDON_MM, SPLIT_MARGIN, SPLIT_MIN_SLICES, SPLIT_VOXELS
from medseg.model.totalseg.convert import PartRef, TotalSegConfiguration, TotalSegModel
from medseg.model.totalseg.geometry import (
    canonical_orientation,
    crop_box,
    header_zooms,
    ras_axes_matrix,
    resample_labels_back,
    resample_to_spacing,
    resampled_shape,
    resampled_zooms,
)
from medseg.model.totalseg.tasks import ModeSpec, TaskSpec
from medseg.progress import CancelToken, ProgressCallback, report

if TYPE_CHECKING:
    from medseg.model.kinds.base import SharedRuns


@dataclass
class TotalSegRun:
    """What one run did, beyond the label map: for the CLI's and the GUI's notes."""

    configuration: str
    parts: list[str] = field(default_factory=list)
    resampled_shape_xyz: tuple[int, int, int] | None = None
    split: bool = False
    crop_xyz: tuple[slice, slice, slice] | None = None
    notes: list[str] = field(default_factory=list)
    runs: list[str] = field(default_factory=list)  # the other tasks' runs this one needed (crops, refinements)
    engines: dict[str, str] = field(default_factory=dict)  # each network's CPU engine and why (part_engine)


def structure_values(model: TotalSegModel, structures: Sequence[str] | None) -> list[int] | None:
    """The label values of the named structures (TotalSegmentator's names); unknown names are an error."""
    if structures is None:
        return None
    by_name = {name: value for value, name in model.labels.items()}
    unknown = [name for name in structures if name not in by_name]
    if unknown:
        raise ModelError(f"unknown structure(s) {', '.join(unknown)} for {model.name}",
                         hint=f"`medseg segment --model {model.name} --list-structures` lists them")
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
    shared: SharedRuns | None = None,
    keep: dict | None = None,
) -> tuple[SegmentationResult, TotalSegRun]:
    """Segment a CT as TotalSegmentator's task does; labels on the input's grid, its numbers and names.

    ``structures``: for ``total``, TotalSegmentator's roi_subset (the crop model finds them first, the
    run is cropped around them, only the networks that hold them run); for every task, the other
    labels are removed. ``crop_mask`` (a (z, y, x) mask on the input grid) replaces the crop run's
    finding. The run is one job on the process's thread budget (medseg.threads): it computes with
    its share, at most ``threads``, and the result says how many it had. ``shared``: one multi-task run's
    kept helper runs (a crop another task of the run made on this very image with the same network is
    taken from there, not run again). ``keep``: the caller's dict of the networks loaded, reused by its
    next call and filled by this one (a batch holds every part's weights across its studies; None loads
    each part when it runs and lets it go, as TotalSegmentator does).
    """
    with medseg_threads.job("TotalSegmentator", most=threads) as lease:
        started = time.perf_counter()
        threads_used = lease.apply()
        if configuration not in model.configurations:
            raise ModelError(f"{model.name} has no configuration {configuration!r} installed",
                             hint=f"installed: {', '.join(model.configurations)}")
        config = model.configurations[configuration]
        device_name = backends.resolve_device(device)
        wanted = structure_values(model, structures)
        run = TotalSegRun(configuration=configuration)
        session = _Session(model, device_name, cancel, run, shared, keep)
        # medseg chooses each network's CPU engine (part_engine) only when the user left the device to it
        session.auto = device_name == "cpu" and (device or "auto").strip().lower() == "auto"
        labels = session.run(volume, config.task, config.mode, wanted=wanted, crop_mask=crop_mask,
                             force_split=force_split, progress=progress, main=True)
        threads_used = max(threads_used, session.threads)
        report(progress, 1.0, "done", "done")
        return _result(volume, labels, model, configuration, device_name, session.fallbacks, started,
                       threads_used), run


class _Session:
    """One call's runs: each (task, mode) another run needs is made once and kept."""

    def __init__(self, model: TotalSegModel, device: str, cancel: CancelToken | None, run: TotalSegRun,
                 shared: SharedRuns | None = None, keep: dict | None = None):
        self.keep = keep
        self.model = model
        self.shared = shared
        self.device = device
        self.cancel = cancel
        self.info = run
        self.fallbacks: list[str] = []
        self.threads = 0
        self.auto = False  # --device auto on the CPU: each network runs on its measured engine (part_engine)
        self.done: dict[tuple[str, str], np.ndarray] = {}

    def check(self) -> None:
        if self.cancel is not None:
            self.cancel.raise_if_cancelled()

    def whole(self, volume: Volume, task: str, mode: str, progress: ProgressCallback | None) -> np.ndarray:
        """Another task's full run (a crop's, a refinement's), once per call."""
        key = (task, mode)
        if key not in self.done:
            configuration = self.model.spec(task).modes[mode].configuration
            if self.shared is None:
                self.info.runs.append(f"{task} ({configuration})")
                self.done[key] = self.run(volume, task, mode, progress=progress)
            else:
                made = []

                def make() -> np.ndarray:
                    made.append(True)
                    return self.run(volume, task, mode, progress=progress)

                self.done[key] = self.shared.get(self._shared_key(task, mode), volume, make)
                self.info.runs.append(f"{task} ({configuration})" + ("" if made else ", made once for this run's "
                                                                                     "tasks"))
        return self.done[key]

    def _shared_key(self, task: str, mode: str) -> tuple:
        """What another task's identical run must match: the task table's steps for it and each network's weights
        (their checksum where the conversion kept it, else the folder), recursively its own helpers', and the
        device. Two installed tasks that carry the same crop network share its answer."""
        import json

        from medseg.model.totalseg.tasks import required_runs

        def weights(dataset: int) -> str:
            part = self.model.part(dataset)
            digest = part.provenance.get("checkpoint_sha256")
            return json.dumps(digest, sort_keys=True) if digest else str(part.path.resolve())

        configuration = self.model.spec(task).modes[mode].configuration
        steps = set()
        for name, mode_name in [(task, mode), *required_runs(task, [configuration], self.model.tasks)]:
            spec_mode = self.model.spec(name).modes[mode_name]
            steps.add((name, mode_name, repr(spec_mode), tuple((n.dataset, weights(n.dataset))
                                                                for n in spec_mode.networks)))
        return ("totalsegmentator", self.device, tuple(sorted(steps)))

    def run(self, volume: Volume, task: str, mode_name: str, *, wanted: list[int] | None = None,
            crop_mask: np.ndarray | None = None, force_split: bool = False,
            progress: ProgressCallback | None = None, main: bool = False) -> np.ndarray:
        spec = self.model.spec(task)
        mode = spec.modes[mode_name]
        if mode.networks and len(mode.networks) > 1 and wanted is not None:
            networks = [n for n in mode.networks if any(_global_values(n, spec).get(v) for v in wanted)]
        else:
            networks = list(mode.networks)
        if main:
            self.info.parts = [self.model.part(n.dataset).name for n in networks]
        image_xyz = volume.array.T  # nibabel's (x, y, z) array: the same voxels, no copy
        zooms_in = header_zooms(volume)
        helpers = main and (mode.crop is not None or spec.refine is not None or wanted is not None)
        own_progress = _scaled(progress, 0.3, 1.0, None) if helpers else progress  # its texts as they are
        refine_mask = None
        if spec.refine is not None:  # TotalSegmentator runs the refining network first
            refine = spec.refine
            refine_mask = self.whole(volume, refine.task, refine.mode, _scaled(progress, 0.0, 0.3, refine.task))

        # 1. the crop
        crop = self._crop_mask(volume, task, spec, mode, wanted, crop_mask, _scaled(progress, 0.0, 0.3, "crop"),
                               main)
        progress = own_progress
        box = None
        crop_labels = None
        if crop is not None:
            mask_zyx, addon, crop_labels = crop
            mask_xyz = np.asarray(mask_zyx).T
            if mask_xyz.shape != image_xyz.shape:
                raise ModelError(f"the crop mask's shape {mask_xyz.shape[::-1]} is not the image's {volume.shape_zyx}")
            box = crop_box(mask_xyz, zooms_in, addon)
            if box is None:  # only the structure subset gets here (a task's own crop is refused before)
                self.info.notes.append("the crop model found none of the structures asked for: the result is empty")
                return np.zeros(volume.shape_zyx, np.uint8)
            if main:
                self.info.crop_xyz = box
            image_xyz = image_xyz[box].astype(np.int32)  # TotalSegmentator casts the cropped image to int32

        # 2. RAS and the task's resampling
        with phase("preprocess"):
            report(progress, 0.02, "reorienting and resampling", "preprocess")
            canonical = canonical_orientation(volume)
            zooms = canonical.zooms(zooms_in)
            canonical_xyz = canonical.apply_xyz(image_xyz)
            shape_before = tuple(canonical_xyz.shape)
            if mode.resample is not None:
                target = resampled_shape(shape_before, zooms, mode.resample)
                if min(target) < 1:
                    raise ModelError(
                        f"the series is too small for TotalSegmentator's {task}: "
                        + (f"the crop around {', '.join(mode.crop.structures) if mode.crop else 'the structures'} is "
                           if box is not None else "it is ")
                        + f"{' x '.join(str(n) for n in shape_before)} voxels of "
                        f"{' x '.join(f'{z:.2g}' for z in zooms)} mm, less than one "
                        f"{' x '.join(f'{s:g}' for s in mode.resample)} mm voxel along an axis")
            resampled_xyz = (resample_to_spacing(canonical_xyz, zooms, mode.resample, cancel=self.cancel)
                             if mode.resample is not None else canonical_xyz)
            network_zooms = resampled_zooms(canonical.columns(ras_axes_matrix(volume)), zooms, mode.resample)
            if main:
                self.info.resampled_shape_xyz = tuple(int(n) for n in resampled_xyz.shape)  # type: ignore[assignment]
        self.check()

        # 3. the networks
        chunks = _split_chunks(resampled_xyz.shape, len(mode.networks) > 1 or force_split, force_split)
        if main:
            self.info.split = len(chunks) > 1
        combined = np.zeros(resampled_xyz.shape, dtype=np.uint8)
        steps = len(networks) * len(chunks)
        for index, network in enumerate(networks):
            part = self.model.part(network.dataset)
            lookup = _lookup_table(network, spec, part)
            labels_xyz = np.zeros(resampled_xyz.shape, dtype=np.uint8)
            for chunk_index, (source, keep, target) in enumerate(chunks):
                step = index * len(chunks) + chunk_index
                title = f"{task}: " if not main else ""
                text = title + (f"part {index + 1} of {len(networks)} ({part.title})" if len(networks) > 1
                                else part.title) + (f", third {chunk_index + 1} of 3" if len(chunks) > 1 else "")
                sub = Volume(resampled_xyz[:, :, source].T, tuple(float(z) for z in network_zooms))  # x, y, z
                labels_zyx = self._predict(part, mode, sub, _scaled(progress, 0.05 + 0.85 * step / steps,
                                                                    0.05 + 0.85 * (step + 1) / steps, text))
                labels_xyz[:, :, target] = labels_zyx.T[:, :, keep]
            mapped = lookup[labels_xyz]
            np.copyto(combined, mapped, where=mapped != 0)
            del mapped, labels_xyz
            self.check()

        # 4. TotalSegmentator's clean-up at network resolution
        postprocess.remove_values(combined, sorted(spec.auxiliary_labels))
        if spec.postprocess is not None:
            kind = spec.postprocess["kind"]
            clean = {"body": postprocess.body, "vertebrae_pp": postprocess.vertebrae_pp}.get(kind)
            if clean is None:
                raise ModelError(f"TotalSegmentator's post-processing {kind!r} of {task} is not known to this medseg",
                                 hint="update medseg")
            combined = clean(combined, spec.labels, spec.postprocess, network_zooms)

        # 5. back onto the input's grid, and what TotalSegmentator does there
        with phase("export"):
            self.threads = max(self.threads, medseg_threads.refresh())
            report(progress, 0.92, "resampling the labels back", "resample")
            labels_xyz = resample_labels_back(combined, shape_before) if mode.resample is not None else combined
            labels_xyz = canonical.undo_xyz(labels_xyz)
            if box is not None:
                full = np.zeros(volume.array.T.shape, dtype=np.uint8)
                full[box] = labels_xyz
                labels_xyz = full
            if spec.refine is not None and refine_mask is not None:
                labels_xyz = postprocess.refine_with_mask(np.ascontiguousarray(labels_xyz), refine_mask.T, spec.labels,
                                                          spec.refine.keep_value, zooms_in,
                                                          _number(spec.refine.dilation_mm))
            labels = np.ascontiguousarray(labels_xyz.T)
            if wanted is not None:
                labels[~np.isin(labels, wanted)] = 0
            if mode.remove_outside is not None and crop_labels is not None:
                outside = mode.remove_outside
                source = self.model.spec(mode.crop.task).labels  # type: ignore[union-attr]
                values = [v for v, name in source.items() if name in outside.structures]
                iterations = int(_number(outside.dilation_mm) / np.mean(zooms_in))
                labels = postprocess.remove_outside(labels, np.isin(crop_labels, values), iterations)
        return labels

    def _crop_mask(self, volume: Volume, task: str, spec: TaskSpec, mode: ModeSpec, wanted: list[int] | None,
                   given: np.ndarray | None, progress: ProgressCallback | None,
                   main: bool) -> tuple[np.ndarray, Any, np.ndarray | None] | None:
        """(mask on the input grid, margin in mm, the crop run's labels) or None when the run is not cropped."""
        if mode.crop is not None:
            crop = mode.crop
            source = self.model.spec(crop.task)
            values = [v for v, name in source.labels.items() if name in crop.structures]
            if given is not None and main:
                labels = self.whole(volume, crop.task, crop.mode, progress) if mode.remove_outside else None
                return np.asarray(given, dtype=bool), crop.addon_mm, labels
            report(progress, 0.0, f"finding {', '.join(crop.structures)} with TotalSegmentator's {crop.task}", "crop")
            labels = self.whole(volume, crop.task, crop.mode, progress)
            found = set(np.unique(labels).tolist())
            missing = [name for v, name in source.labels.items() if name in crop.structures and v not in found]
            if len(missing) == len(crop.structures):
                configuration = source.modes[crop.mode].configuration
                raise ModelError(
                    f"TotalSegmentator's {task} runs on the region of {', '.join(crop.structures)}, and its "
                    f"{crop.task} network ({configuration}) found none of them in this series: the series may not "
                    "cover them", hint=f"choose a series that shows {' or '.join(crop.structures)}")
            if missing:
                self.info.notes.append(f"{task}: the crop run did not find {', '.join(missing)}; the crop is around "
                                       f"the others, as TotalSegmentator does")
            return np.isin(labels, values), crop.addon_mm, labels
        if wanted is not None and self.model.structures_crop is not None and task == self.model.structures_crop[0]:
            if given is not None:
                return np.asarray(given, dtype=bool), (CROP_ADDON_MM,) * 3, None
            crop_task, crop_mode = self.model.structures_crop
            report(progress, 0.0, "finding the structures with the crop model", "crop")
            labels = self.whole(volume, crop_task, crop_mode, progress)
            return np.isin(labels, wanted), (CROP_ADDON_MM,) * 3, None
        if wanted is not None and task == "total":
            raise ModelError(f"{self.model.name} has no crop model installed; --structures needs it",
                             path=self.model.path)
        return None

    def _predict(self, part: PartRef, mode: ModeSpec, image: Volume, progress: ProgressCallback | None) -> np.ndarray:
        """One network on the resampled image: its folds averaged as nnU-Net's predictor does."""
        self.threads = max(self.threads, medseg_threads.refresh())  # a job started or ended: the share changed
        plan = dataclasses.replace(part.plan, orientation=None)  # the image is RAS already
        device = backends.torch_device(self.device)
        with phase("load"):
            kept = self.keep.get((str(part.path), "package")) if self.keep is not None else None
            package = kept if kept is not None else part.load()
            if self.keep is not None:
                self.keep[(str(part.path), "package")] = package
        with phase("preprocess"):
            prep = preprocess_to(image, plan, device, cancel=self.cancel)
        engine, why = part_engine.choose(package, part.configuration, self.threads, self.auto)
        self.info.engines[part.title] = why
        logits = None
        if engine != part_engine.PYTORCH:  # an ONNX engine measured faster with equal labels (--device auto)
            logits = part_engine.onnx_logits(engine, package, part.configuration, plan, prep.data, mode.step,
                                             progress, self.cancel, self.fallbacks, self.keep,
                                             (str(part.path), part.configuration, engine))
            if logits is None:
                self.info.engines[part.title] = "CPU engine: PyTorch (the measured engine failed in this run)"
        if logits is None:
            logits = self._torch_logits(part, package, plan, prep, mode, device, progress)
        del package
        with phase("export"):
            labels = logits_to_label_map(logits, prep, np.uint8)  # type: ignore[arg-type]
        return labels

    def _torch_logits(self, part: PartRef, package: Any, plan: Any, prep: Any, mode: ModeSpec, device: Any,
                      progress: ProgressCallback | None) -> Any:
        """The network's folds in PyTorch, their logits summed in float16 and averaged as nnU-Net's predictor."""
        with phase("load"):
            key = (str(part.path), part.configuration, str(device))
            networks = self.keep.get(key) if self.keep is not None else None
            if networks is None:
                networks = build_networks(package, part.configuration, device, share_weights=True)
                if self.keep is not None:  # the next study of a batch runs them as they are
                    self.keep[key] = networks
        logits = None
        for fold, network in enumerate(networks):
            runner = backends.TorchRunner([network], device, name=self.device, onednn=True, lean=True)
            with phase("stitching"):
                low = fold / len(networks)
                fold_progress = _scaled(progress, low, (fold + 1) / len(networks),
                                        f"fold {fold + 1} of {len(networks)}") if len(networks) > 1 else progress
                fold_logits = sliding_window_logits(runner, prep.data, plan, step_size=mode.step,
                                                    progress=fold_progress, cancel=self.cancel,
                                                    fallbacks=self.fallbacks)
            if len(networks) > 1:  # nnU-Net sums the folds' logits in host memory
                fold_logits = fold_logits.to("cpu")
            logits = fold_logits if logits is None else logits + fold_logits  # float16, as nnU-Net's sum
            del runner, fold_logits
        if len(networks) > 1:
            logits = logits / len(networks)  # type: ignore[operator]
        return logits


# --- pieces -------------------------------------------------------------------------------------


def _number(value: Any) -> Any:
    """An integer-valued float from the table as the int TotalSegmentator's code holds."""
    return int(value) if float(value).is_integer() else float(value)


def _global_values(network: Any, spec: TaskSpec) -> dict[int, int]:
    """Task value -> 1 for each value a network can put in the result."""
    if network.classes is None:
        return {value: 1 for value in spec.labels}
    by_name = {name: value for value, name in spec.labels.items()}
    return {by_name[name]: 1 for name in network.classes.values() if name in by_name}


def _lookup_table(network: Any, spec: TaskSpec, part: PartRef) -> np.ndarray:
    """Network value -> task value: a merged network's local class map by name (unknown values 0, as
    TotalSegmentator's look-up table); another network's values are the task's own."""
    if network.classes is None:
        return np.arange(256, dtype=np.uint8)
    by_name = {name: value for value, name in spec.labels.items()}
    table = np.zeros(256, dtype=np.uint8)
    for value, name in network.classes.items():
        if name not in by_name:
            raise ModelError(f"{part.name} predicts {name!r}, which TotalSegmentator's {spec.name} does not list",
                             path=part.path)
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


def _scaled(progress: ProgressCallback | None, low: float, high: float, text: str | None) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, f"{text}: {p.text}" if text else p.text, p.stage)


def _result(volume: Volume, labels: np.ndarray, model: TotalSegModel, configuration: str, device: str,
            fallbacks: list[str], started: float, threads: int) -> SegmentationResult:
    names = {0: "background", **model.labels}
    made_by = Provenance.model(model.name, model.version)
    present = sorted(int(v) for v in np.unique(labels) if v)
    for value in present:  # a value no class map names (TotalSegmentator keeps it too)
        names.setdefault(value, f"label_{value}")
    label_map = volume.with_array(labels, labels=names, modality="SEG")
    return SegmentationResult(
        label_map=label_map,
        probabilities=None,
        device_used=device,
        configuration=configuration,
        fallbacks=fallbacks,
        volumes_ml=label_volumes_ml(labels, label_map.meta.labels, volume.voxel_volume_ml),
        seconds=time.perf_counter() - started,
        labels={value: Label(value, names[value], None, provenance=made_by) for value in present},
        threads=threads,
    )


__all__ = ["TotalSegConfiguration", "TotalSegRun", "segment_totalseg", "structure_values"]
