"""The CPU engine measurement of a model (medseg.model.cpu_runtime), away from the user's runs (issue #51).

A Segment used to measure the engines on its own image's middle tile the first time a model ran on a
machine: the starter's first Segment in the window took 21.7 s and its second 11.6 s. The measurement
now happens when a model is installed or imported (``medseg models install/import``, the Models
dialog), again on ``medseg models verify --measure``, and in the background while the app is idle for
models a run or a plan found unmeasured (:func:`measure_scheduled`; a changed machine is one).

It runs on one tile at the patch size (2D: a batch of slices up to :data:`TILE_VOXELS` voxels) of the
built-in synthetic CT phantom (medseg.io.phantom) drawn at the configuration's own spacing and
preprocessed as a run preprocesses: real CT intensities through the model's normalisation, so the labels
compared between engines are the kind a run compares, with no patient data and no image needed. A
smaller 3D tile would be quicker but the ONNX exports are static over space (:func:`tile_size`): for a
TotalSegmentator-sized network (128^3 patches) the measurement takes tens of seconds per engine on two
cores, at install or while the app is idle, never in a run.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from medseg.progress import CancelToken, ProgressCallback, report

TILE_VOXELS = 64**3  # a 2D network's measurement runs this many voxels of slices at once (its batch)


def tile_size(plan: Any) -> list[int]:
    """The measurement tile: one patch. Not smaller: the ONNX exports the ONNX engines run are static over
    space (ONNX Runtime refuses another size; OpenVINO reshaped to a 64^3 tile of a 128^3 network computed
    garbage: 39.6 % of labels equal), so a smaller tile would measure something a run never runs."""
    return [int(p) for p in plan.patch_size]


def measurement_tile(package: Any, configuration: str) -> torch.Tensor:
    """A (1, channels, *tile) tensor (2D: a few slices): the phantom preprocessed for ``configuration``, its middle
    cut to the tile."""
    from medseg.io.phantom import phantom_volume
    from medseg.model.infer import prepare
    from medseg.model.sliding_window import middle_tile

    plan = package.configurations[configuration]
    size = tile_size(plan)
    spacing_zyx = [min(20.0, max(0.2, float(s))) for s in plan.target_spacing_image_zyx]
    in_plane = size[-2:]
    shape_zyx = (max(8, size[0] + 4) if plan.dim == 3 else 9, max(8, in_plane[0] + 8), max(8, in_plane[1] + 8))
    volume = phantom_volume(seed=51, shape=shape_zyx, spacing=tuple(reversed(spacing_zyx)))
    image = torch.as_tensor(prepare(volume, package, configuration, device="cpu").image.data).float()
    if image.shape[0] != plan.num_input_channels:  # a model of several channels: the CT in each
        image = image[:1].expand(plan.num_input_channels, *image.shape[1:])
    if plan.dim == 2:  # a batch of the middle slices, as a 2D run passes several at once, up to the tile's voxels
        count = max(1, min(image.shape[1], TILE_VOXELS // math.prod(size), 8))
        first = (image.shape[1] - count) // 2
        return torch.cat([middle_tile(image[:, z:z + 1], size, 1.0) for z in range(first, first + count)])
    return middle_tile(image, size, 1.0)


def measure_model(package: Any, configuration: str, threads: int | None = None,
                  progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> Any:
    """Measure the CPU engines on this model's configuration here and store the choice (cpu_runtime); returns
    it. Pinned ($MEDSEG_CPU_ENGINE) or one engine installed: nothing to measure, the choice as it stands."""
    from medseg import threads as medseg_threads
    from medseg.model import backends, cpu_runtime
    from medseg.model.infer import _make_runner

    with medseg_threads.job("engine measurement", most=threads) as lease:
        count = lease.apply()
        if cpu_runtime.pinned_choice(count) is not None or len(backends.cpu_devices()) == 1:
            return cpu_runtime.planned_choice(package, configuration, count)
        plan = package.configurations[configuration]
        report(progress, 0.0, f"measuring the CPU engines on {package.name} ({configuration}, seconds to a minute; "
                              "once on this computer)", "engine")
        tile = measurement_tile(package, configuration)

        def make_runner(device: str) -> Any:
            if backends.backend(device).engine == backends.OPENVINO:  # compiled for the tile: timed without a recompile
                from medseg.model.openvino_slabs import openvino_runner

                return openvino_runner(package, configuration, tuple(tile.shape), name=device)
            return _make_runner(device, package, configuration, plan)

        def prepare(device: str) -> None:  # OpenVINO's slab parts exported before its peak is measured
            if backends.backend(device).engine == backends.OPENVINO:
                from medseg.model.openvino_slabs import export_parts

                export_parts(package, configuration, tuple(tile.shape))

        return cpu_runtime.measure(package, configuration, tile, count, make_runner, cancel, prepare)


def measure_opened(model: Any, threads: int | None = None, progress: ProgressCallback | None = None,
                   cancel: CancelToken | None = None) -> list[tuple[str, Any]]:
    """Measure every configuration of an opened model (medseg.model.kinds) whose runs choose a CPU engine:
    [(configuration, choice)]. A kind whose networks run in PyTorch only (interactive models, which measure their
    own runtime when installed) has none; a TotalSegmentator task lists each of its networks
    (medseg.model.totalseg.part_engine), named "network (configuration)" here."""
    packages = model.pipeline.engine_packages()
    done = []
    for index, (package, configuration) in enumerate(packages):
        scaled = None if progress is None else (
            lambda p, i=index: progress(type(p)((i + p.fraction) / len(packages), p.text, p.stage)))
        done.append((package.name, configuration, measure_model(package, configuration, threads, scaled, cancel)))
    several = len({name for name, _, _ in done}) > 1  # networks of their own (a TotalSegmentator task): named
    return [(f"{name} ({configuration})" if several else configuration, choice) for name, configuration, choice in done]


def measure_scheduled(progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> int:
    """Measure the models runs and plans asked for (cpu_runtime.schedule), one at a time; returns how many.
    A cancel (the user started work) stops between engines; what is left stays scheduled."""
    from medseg.model import cpu_runtime

    count = 0
    while True:
        wanted = cpu_runtime.scheduled()
        if not wanted:
            return count
        package, configuration, threads = wanted[0]
        try:
            measure_model(package, configuration, threads, progress, cancel)
        finally:
            if cancel is None or not cancel.cancelled:
                cpu_runtime.unschedule(package, configuration, threads)  # measured, or it cannot be: not again
        count += 1


__all__ = ["TILE_VOXELS", "measure_model", "measure_opened", "measure_scheduled", "measurement_tile", "tile_size"]
