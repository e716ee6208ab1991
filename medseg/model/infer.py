"""``segment``: a model package on a volume, with sliding-window inference tiled exactly as nnU-Net v2 does it
(the tiles through the network: :mod:`medseg.model.sliding_window`).

The tiling reproduces nnU-Net's ``predict_sliding_window_return_logits``: the same tile
starts (``compute_steps``), the same loop order, the same Gaussian importance map
(sigma = patch/8, peak 10, stored in fp16 with underflowed zeros replaced by the
smallest non-zero value) and the same fp16 accumulators, so labels agree with
``nnUNetPredictor`` on ≥ 99.99 % of voxels. Differences from nnU-Net, all about cost:
several tiles per forward pass, folds averaged per tile, cancellation and progress
between tiles, an explicit out-of-memory fallback chain that is reported, the
preprocessing and the chunked resampling back to the original grid done as torch
operations on the run's device (``medseg.model.preprocess``), and on the
CPU a lean network forward (``medseg.model.lean_forward``: same numbers, about a third
of the activation memory) with the networks sharing the package's weight tensors.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Mapping

import numpy as np
import torch

from medseg import threads as medseg_threads
from medseg.core.label_arrays import label_values
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import DeviceError, ModelError
from medseg.model import backends
from medseg.model.logits_grid import logits_to_label_map, logits_to_probabilities
from medseg.model.postprocess import apply_steps
from medseg.model.preprocess import preprocess_to
from medseg.model.profiling import phase
from medseg.model.run_estimate import check_run, estimate_run
from medseg.model.sliding_window import sliding_window_logits
from medseg.progress import CancelToken, ProgressCallback, report


@dataclass
class SegmentationResult:
    label_map: Volume  # same grid and geometry as the input; meta.labels: the package's, as its output
    probabilities: np.ndarray | None  # (K, z, y, x) float32 softmax, only when asked for
    device_used: str
    configuration: str
    fallbacks: list[str] = field(default_factory=list)  # every degradation, in words (never silent)
    volumes_ml: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    # the package's post-processing steps as run, with what each changed (medseg.model.postprocess)
    postprocessing: list[str] = field(default_factory=list)
    labels: dict[int, Label] = field(default_factory=dict)  # the labels present, as this model's output
    notes: list[str] = field(default_factory=list)  # what the user must know about the result (e.g. nothing found)
    threads: int = 0  # the CPU threads the run computed with (its share of medseg.threads' budget; the most it had)
    cpu_engine: dict | None = None  # on the CPU with device "auto": the engine chosen and why (medseg.model.cpu_runtime)
    precision: str = "f32"  # what the network computed in: "f32" (exact) or a verified tier (medseg.model.precision_tier)


# --- the whole job -------------------------------------------------------------------------------------------


def _choose_configuration(package: Any, configuration: str | None, volume: Volume) -> tuple[str, Any]:
    configurations = dict(package.configurations)
    if not configurations:
        raise ModelError(f"model {package.name!r} has no configuration")
    if configuration is not None:
        if configuration not in configurations:
            raise ModelError(
                f"model {package.name!r} has no configuration {configuration!r}",
                hint=f"it has {', '.join(configurations)}",
            )
        return configuration, configurations[configuration]
    if len(configurations) == 1:
        return next(iter(configurations.items()))
    plan = package.select(volume.spacing_zyx, volume.shape_zyx)
    for name, candidate in configurations.items():
        if candidate is plan:
            return name, plan
    return getattr(plan, "name", next(iter(configurations))), plan


def choose_configuration(package: Any, configuration: str | None, volume: Volume) -> tuple[str, Any]:
    """(name, plan) of the configuration that runs on ``volume`` (``configuration``: the one asked for)."""
    return _choose_configuration(package, configuration, volume)


def _mirror_axes(plan: Any) -> tuple[int, ...] | None:
    """The mirroring axes the model was trained with (nnU-Net checkpoints store them); None = all."""
    axes = getattr(plan, "mirror_axes", None)
    if axes is None:
        return tuple(range(int(plan.dim)))
    return tuple(int(a) for a in axes) or None


def _make_runner(device: str, package: Any, configuration: str, plan: Any) -> backends.TileRunner:
    if backends.uses_onnx(device) and not package.weights.get(configuration) and configuration in package.onnx:
        # an exported ONNX model (medseg.model.onnx_model): its file is the network, with no weights to export again
        from medseg.model.onnx_graph import package_onnx

        return backends.OnnxRunner(package_onnx(package, configuration), device)
    if device == "directml":  # the package's export (InstanceNormalization), which DirectML has run since #16
        from medseg.model.onnx_graph import package_onnx

        return backends.OnnxRunner(package_onnx(package, configuration), device)
    if backends.uses_onnx(device):  # the CPU ONNX engines: the exact-norm export (medseg.model.cpu_runtime)
        from medseg.model.cpu_runtime import exact_onnx

        if backends.backend(device).engine == backends.OPENVINO:
            shape = (1, plan.num_input_channels, *plan.patch_size)  # one tile a pass on the CPU (more: recompiled)
            from medseg.model.openvino_slabs import openvino_runner  # the full-resolution stage slab by slab

            return openvino_runner(package, configuration, shape, name=device)
        return backends.OnnxRunner(exact_onnx(package, configuration), device)
    from medseg.model.package import build_networks

    networks = build_networks(package, configuration, device, share_weights=True)
    return backends.TorchRunner(networks, device, name=device, onednn=True, lean=True)


def _scaled(progress: ProgressCallback | None, low: float, high: float) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: report(progress, low + (high - low) * p.fraction, p.text, p.stage)


@dataclass
class PreparedInput:
    """A Volume chosen a configuration for and preprocessed for it: what ``segment`` does before the network,
    done ahead (a batch prepares the next case while the network runs on this one)."""

    configuration: str
    plan: Any
    image: Any  # medseg.model.preprocess.PreprocessedImage
    fallbacks: list[str] = field(default_factory=list)  # preprocessing's degradations, for the run's own list


def prepare(volume: Volume, package: Any, configuration: str | None = None, step_size: float = 0.5,
            device: str = "cpu", fallbacks: list[str] | None = None,
            cancel: CancelToken | None = None) -> PreparedInput:
    """The volume resampled and normalised for the chosen configuration, on ``device`` (a run's device
    name); an absurd run (resampled size, tiles, memory) is refused here, before any work. ``cancel`` is
    looked at throughout (a Cancel while a large CT is prepared stops it within a slab's work)."""
    with medseg_threads.job("prepare"):  # a batch prepares the next case beside the running one: two jobs
        return _prepare(volume, package, configuration, step_size, device, fallbacks, cancel)


def _prepare(volume: Volume, package: Any, configuration: str | None, step_size: float, device: str,
             fallbacks: list[str] | None, cancel: CancelToken | None) -> PreparedInput:
    config_name, plan = _choose_configuration(package, configuration, volume)
    check_run(estimate_run(plan, len(package.labels), volume, step_size),
              (volume.meta.source_files or [None])[0])
    own: list[str] = []
    with phase("preprocess"):
        image = _preprocess_on(volume, plan, device, own, cancel)
    if fallbacks is not None:
        fallbacks.extend(own)
    return PreparedInput(config_name, plan, image, own)


def label_volumes_ml(label_map: np.ndarray, labels: Mapping[int, Label], voxel_ml: float) -> dict[str, float]:
    """Each label's volume by its name (background left out), 0 for a label without voxels."""
    # torch counts uint8/int16 labels as they are (intra-op threads); numpy's bincount first copies the
    # map into 8-byte integers: 0.36 s of a 1.1 s GPU segmentation (issue #27), 6x torch's time here
    flat = torch.from_numpy(np.ascontiguousarray(label_map).reshape(-1))
    if flat.dtype not in (torch.uint8, torch.int16, torch.int32, torch.int64):
        flat = flat.to(torch.int64)
    counts = torch.bincount(flat, minlength=max(labels, default=0) + 1).numpy()
    return {label.name: float(counts[value] * voxel_ml) for value, label in sorted(labels.items()) if value != 0}


def segment(
    volume: Volume,
    package: Any,
    device: str = "auto",
    configuration: str | None = None,
    step_size: float = 0.5,
    mirror: bool = False,
    tile_batch: int | None = None,
    return_probabilities: bool = False,
    postprocess: bool = True,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    prepared: PreparedInput | None = None,
    keep: dict | None = None,
    precision: str = "f32",
) -> SegmentationResult:
    """Segment a CT Volume with a model package; the label map has the input's grid and geometry.

    Device "auto" picks CUDA, then DirectML, then the CPU, where the engine (PyTorch, ONNX Runtime or
    OpenVINO) is the one measured fastest for this model with equal labels (medseg.model.cpu_runtime;
    ``cpu_engine`` in the result says which and why). Running out of GPU memory falls
    back to fewer tiles per pass, then host-memory stitching, then the CPU, and each step
    is listed in ``fallbacks``. A cancel stops between tiles with Cancelled; nothing is returned.
    The package's post-processing steps run on the label map unless ``postprocess`` is False
    (the probabilities are the network's, never post-processed). ``prepared`` is this volume
    already through :func:`prepare` (``configuration`` is then ignored). ``keep``: the caller's dict of the
    engines built (networks, ONNX sessions, OpenVINO compilations), reused by its next run and filled by this
    one (a batch, :func:`medseg.workflows.segmenter.open_segmenter`); None builds them for this run only.
    ``precision``: "f32" (the exact path), or a faster tier ("int8", "bf16") verified for this model on this
    machine (medseg.model.precision_tier; refused when it is not offered, the exact path when its files are damaged).
    """
    with medseg_threads.job("segment") as lease:
        result = _segment(volume, package, device, configuration, step_size, mirror, tile_batch, return_probabilities,
                          postprocess, progress, cancel, prepared, lease, keep, precision)
    return result


def _segment(volume: Volume, package: Any, device: str, configuration: str | None, step_size: float, mirror: bool,
             tile_batch: int | None, return_probabilities: bool, postprocess: bool, progress: ProgressCallback | None,
             cancel: CancelToken | None, prepared: PreparedInput | None, lease: Any,
             keep: dict | None = None, precision: str = "f32") -> SegmentationResult:
    started = time.perf_counter()
    device_name = backends.resolve_device(device)
    fallbacks: list[str] = []
    most_threads = lease.apply()
    report(progress, 0.0, "preparing the image", "preprocess")
    if prepared is None:
        prepared = prepare(volume, package, configuration, step_size, device_name, fallbacks, cancel)
    else:  # prepared ahead (a batch's next case): its degradations are this run's too
        fallbacks.extend(prepared.fallbacks)
    config_name, plan, prep = prepared.configuration, prepared.plan, prepared.image
    if cancel is not None:
        cancel.raise_if_cancelled()
    mirror_axes = _mirror_axes(plan) if mirror else None
    image = torch.as_tensor(prep.data)  # a tensor on the run's device (numpy from an older caller)
    prep.data = np.empty(0, np.float32)  # the tensor above is the only reference now
    runtime = None
    if device_name == "cpu" and (device or "auto").strip().lower() == "auto":  # which CPU engine: measured per model
        runtime = _choose_cpu_engine(package, config_name, lease.threads)
        device_name = runtime.device
    tier = _tier_runner(package, config_name, plan, precision, device_name, lease.threads, fallbacks)
    if tier is not None:
        device_name = "openvino-cpu"
    logits = None
    for attempt in (device_name, "cpu"):
        try:
            with phase("load"):
                runner = keep.get((attempt, config_name)) if keep is not None and tier is None else None
                if tier is not None and attempt != "cpu":
                    runner = tier
                elif runner is None:
                    runner = _make_runner(attempt, package, config_name, plan)
                    if keep is not None:  # the next study of a batch runs it as it is (built, compiled)
                        keep[(attempt, config_name)] = runner
            with phase("stitching"):
                logits = sliding_window_logits(
                    runner, image, plan, step_size=step_size, mirror_axes=mirror_axes, tile_batch=tile_batch,
                    progress=_scaled(progress, 0.05, 0.9), cancel=cancel, fallbacks=fallbacks,
                )  # fmt: skip
            device_name = attempt
            break
        except Exception as error:
            recoverable = backends.is_out_of_memory(error) or isinstance(error, DeviceError) or (
                backends.uses_onnx(attempt) and isinstance(error, ModelError)  # e.g. the ONNX export failed
            )
            if attempt == "cpu" or not recoverable:
                raise
            fallbacks.append(f"{attempt} failed ({_short(error)}): running on the CPU instead")
            runner = None
            if keep is not None:
                keep.pop((attempt, config_name), None)
            tier = None  # the exact path runs instead
            backends.free_device_memory(backends.torch_device(attempt))
    del image
    ran = tier.name.removeprefix("openvino-") if tier is not None else "f32"  # "int8", "bf16" or the exact path
    runner = tier = None  # OpenVINO keeps its activation buffers while its model lives: not through the export
    if cancel is not None:
        cancel.raise_if_cancelled()
    report(progress, 0.9, "resampling to the original grid", "resample")
    with phase("export"):
        most_threads = max(most_threads, lease.apply())
        labels = _export_labels(logits, prep, fallbacks)
        result_notes = _check_label_map(labels, package)
        probabilities = logits_to_probabilities(logits, prep) if return_probabilities else None
        del logits
        names = package.names
        steps = package.postprocess_steps() if postprocess else []
        notes = [outcome.describe(names) for outcome in apply_steps(labels, steps, volume.voxel_volume_ml)]
        label_map = volume.with_array(labels, labels={0: package.labels[0], **_made_in(package.label_table(), package, ran)},
                                      modality="SEG")
        volumes = label_volumes_ml(labels, package.labels, volume.voxel_volume_ml)
    report(progress, 1.0, "done", "done")
    return SegmentationResult(
        label_map=label_map,
        probabilities=probabilities,
        device_used=device_name,
        configuration=config_name,
        fallbacks=fallbacks,
        volumes_ml=volumes,
        seconds=time.perf_counter() - started,
        postprocessing=notes,
        labels=_made_in(package.label_table(label_values(labels)), package, ran),
        notes=result_notes,
        threads=most_threads,
        cpu_engine=runtime.to_dict() if runtime is not None else None,
        precision=ran,
    )


def _tier_runner(package: Any, configuration: str, plan: Any, precision: str, device: str, threads: int,
                 fallbacks: list[str]) -> Any:
    """The runner of a verified faster tier (None: the exact path). Not offered: ModelError; damaged: the exact
    path, said in ``fallbacks`` with the file."""
    from medseg.model import precision_tier

    precision = precision_tier.check_precision(precision)
    if precision == precision_tier.EXACT:
        return None
    if backends.backend(device).gpu:
        raise ModelError(f"--precision {precision} is a CPU tier; this run is on {device}",
                         hint="use --device cpu (or auto on a computer without a GPU), or leave out --precision")
    try:
        return precision_tier.tier_runner(package, configuration, precision,
                                          (1, plan.num_input_channels, *plan.patch_size), threads)
    except precision_tier.TierDamaged as error:
        fallbacks.append(f"{error}: the exact float32 path ran instead")
        return None


def _made_in(table: dict[int, Label], package: Any, precision: str) -> dict[int, Label]:
    """The labels' algorithm version names a faster tier that ran (the SEG and the sidecar say it)."""
    if precision == "f32":
        return table
    from dataclasses import replace

    from medseg.core.labels import Provenance
    from medseg.model.precision_tier import algorithm_version

    made_by = Provenance.model(package.name, algorithm_version(package.version, precision))
    return {value: replace(label, provenance=made_by) for value, label in table.items()}


def _check_label_map(labels: np.ndarray, package: Any) -> list[str]:
    """A network whose every voxel is one structure has not segmented anything (NaN weights gave this,
    a result with 34 % agreement): an error. Every voxel background is a result a model may give (the
    structure is absent), said as a note."""
    if labels.size == 0:
        return []
    low, high = int(labels.min()), int(labels.max())
    if low != high:
        return []
    if low != 0:
        entry = dict(getattr(package, "names", None) or package.labels).get(low, low)
        name = str(getattr(entry, "name", entry))
        raise ModelError(f"the model labelled every voxel of the image {name!r}: that is not a segmentation",
                         hint="the model is broken or not made for this kind of image; use another model")
    return ["the model found no structure in this image: every voxel is background"]


def _choose_cpu_engine(package: Any, configuration: str, threads: int) -> Any:
    """The CPU engine for this model (medseg.model.cpu_runtime): the one measured before on this machine, else
    the default at once (a run never waits for a measurement; the model is scheduled for one in the background)."""
    from medseg.model import cpu_runtime

    return cpu_runtime.planned_choice(package, configuration, threads)


def _preprocess_on(volume: Volume, plan: Any, device_name: str, fallbacks: list[str],
                   cancel: CancelToken | None = None) -> Any:
    """Preprocessing on the run's device; out of memory there: on the CPU, said in ``fallbacks``."""
    device = backends.torch_device(device_name)
    if device.type != "cpu":
        try:
            return preprocess_to(volume, plan, device, cancel)
        except Exception as error:
            if not backends.is_out_of_memory(error):
                raise
            backends.free_device_memory(device)
            fallbacks.append(f"out of memory preprocessing on {device_name}: preprocessing on the CPU")
    return preprocess_to(volume, plan, "cpu", cancel)


def _export_labels(logits: torch.Tensor, prep: Any, fallbacks: list[str]) -> np.ndarray:
    """Logits back to the original grid on their device; out of memory there: on the CPU, said so."""
    if logits.device.type != "cpu":
        try:
            return logits_to_label_map(logits, prep)
        except Exception as error:
            if not backends.is_out_of_memory(error):
                raise
            backends.free_device_memory(logits.device)
            fallbacks.append(f"out of memory resampling the result on {logits.device.type}: resampling on the CPU")
            logits = logits.cpu()
    return logits_to_label_map(logits, prep)


def _short(error: BaseException) -> str:
    text = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return text[:160]
