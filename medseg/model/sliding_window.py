"""The tiles through the network: nnU-Net v2's ``predict_sliding_window_return_logits``, step for step.

The same tile starts (``compute_steps``), the same loop order, the same Gaussian importance map (sigma =
patch/8, peak 10, stored in fp16 with underflowed zeros replaced by the smallest non-zero value) and the same
fp16 accumulators, so labels agree with ``nnUNetPredictor`` on >= 99.99 % of voxels; several tiles per forward
pass, cancellation and progress between tiles, and an out-of-memory fallback chain that is reported.
"""

from __future__ import annotations

import itertools
from functools import lru_cache
from typing import Any, Callable, Sequence

import numpy as np
import torch
from scipy.ndimage import gaussian_filter

from medseg import threads as medseg_threads
from medseg.errors import ModelError
from medseg.model import backends
from medseg.model.profiling import phase
from medseg.model.tiling import tile_slicers
from medseg.progress import CancelToken, ProgressCallback, report

# nnU-Net's Gaussian: sigma = patch * 1/8, scaled so the centre is 10 (was 1000 before
# nnU-Net fixed an fp16 overflow in 2023).
GAUSSIAN_SIGMA_SCALE = 1.0 / 8
GAUSSIAN_PEAK = 10.0
# nnU-Net stitches in float16 (half the memory of float32); same here, for identical labels.
ACCUMULATOR_DTYPE = torch.float16


@lru_cache(maxsize=4)
def _gaussian_cpu(patch_size: tuple[int, ...]) -> torch.Tensor:
    impulse = np.zeros(patch_size)
    impulse[tuple(p // 2 for p in patch_size)] = 1
    gaussian = gaussian_filter(impulse, [p * GAUSSIAN_SIGMA_SCALE for p in patch_size], 0, mode="constant", cval=0)
    gaussian /= gaussian.max() / GAUSSIAN_PEAK
    gaussian = torch.from_numpy(gaussian).to(torch.float16)
    # fp16 underflows at the corners; a zero weight would give 0/0 where only corners overlap
    gaussian[gaussian == 0] = gaussian[gaussian != 0].min()
    return gaussian


def gaussian_importance_map(patch_size: Sequence[int], device: torch.device | str = "cpu") -> torch.Tensor:
    return _gaussian_cpu(tuple(int(p) for p in patch_size)).to(device)


def pad_to_patch(image: torch.Tensor, patch_size: Sequence[int]) -> tuple[torch.Tensor, tuple[slice, ...]]:
    """Zero-pad the trailing axes up to the patch, centred (acvl_utils.pad_nd_image); returns the un-pad slicer."""
    spatial = list(image.shape[1:])
    offset = len(spatial) - len(patch_size)
    pads: list[tuple[int, int]] = [(0, 0)] * offset
    for size, patch in zip(spatial[offset:], patch_size):
        missing = max(0, int(patch) - size)
        pads.append((missing // 2, missing - missing // 2))
    unpad = (slice(None), *(slice(low, low + size) for (low, _), size in zip(pads, spatial)))
    if not any(low or high for low, high in pads):
        return image, unpad
    flat = [amount for low_high in reversed(pads) for amount in low_high]  # F.pad wants last axis first
    return torch.nn.functional.pad(image, flat, mode="constant", value=0.0), unpad


def middle_tile(image: torch.Tensor | np.ndarray, patch_size: Sequence[int], step_size: float) -> torch.Tensor:
    """The sliding window's middle tile of a preprocessed (C, z, y, x) image, as a batch of one on the CPU."""
    patch = [int(p) for p in patch_size]
    padded, _ = pad_to_patch(torch.as_tensor(image).cpu().float(), patch)
    slicers = tile_slicers(padded.shape[1:], patch, step_size)
    return padded[slicers[len(slicers) // 2]][None].contiguous()


def mirror_combinations(axes: Sequence[int] | None) -> list[tuple[int, ...]]:
    """Every non-empty combination of the mirror axes (tensor axes, i.e. spatial + 2)."""
    if not axes:
        return []
    tensor_axes = [int(a) + 2 for a in axes]
    return [c for r in range(1, len(tensor_axes) + 1) for c in itertools.combinations(tensor_axes, r)]


# --- the sliding window ------------------------------------------------------------------------------------


def _predict_tiles(runner: Callable[[torch.Tensor], torch.Tensor], tiles: torch.Tensor, flips: list[tuple[int, ...]]) -> torch.Tensor:
    with phase("network"):
        logits = runner(tiles)
        for axes in flips:
            logits += torch.flip(runner(torch.flip(tiles, axes)), axes)
        if flips:
            logits /= len(flips) + 1
    return logits


@torch.inference_mode()
def _accumulate(
    runner: Callable[[torch.Tensor], torch.Tensor],
    image: torch.Tensor,
    slicers: list[tuple[Any, ...]],
    patch_size: Sequence[int],
    results_device: torch.device,
    batching: dict[str, int],
    flips: list[tuple[int, ...]],
    progress: ProgressCallback | None,
    cancel: CancelToken | None,
    fallbacks: list[str],
    keep: tuple[slice, ...] | None = None,
) -> torch.Tensor:
    """Run every tile and stitch; returns (K, *kept) fp16 logits on results_device.

    ``keep`` (spatial slices of the padded image, the image itself by default) is the region whose
    sums are kept: the padding a small image needs to fill one patch is computed, not stored (each kept
    voxel sees the same products and additions, in the same order)."""
    input_device = getattr(runner, "device", torch.device("cpu"))
    image = image.to(results_device)  # host stitching keeps the image in host memory too
    gaussian = gaussian_importance_map(patch_size, results_device)
    keep = keep if keep is not None else tuple(slice(0, n) for n in image.shape[1:])
    kept_shape = tuple(k.stop - k.start for k in keep)
    weight_sum = torch.zeros(kept_shape, dtype=ACCUMULATOR_DTYPE, device=results_device)
    logits_sum: torch.Tensor | None = None
    done, total = 0, len(slicers)
    tile_batch = batching["tiles"]
    while done < total:
        if cancel is not None:
            cancel.raise_if_cancelled()
        batch_slicers = slicers[done : done + tile_batch]
        tiles = torch.stack([image[s] for s in batch_slicers]).to(input_device, non_blocking=True)
        try:
            predictions = _predict_tiles(runner, tiles, flips)
        except Exception as error:
            if not backends.is_out_of_memory(error) or tile_batch == 1:
                raise
            del tiles
            backends.free_device_memory(input_device)
            tile_batch = batching["tiles"] = max(1, tile_batch // 2)  # kept if stitching moves to host
            fallbacks.append(f"out of memory on {getattr(runner, 'name', 'the device')}: now {tile_batch} tile(s) per pass")
            continue
        predictions = predictions.to(results_device)
        if logits_sum is None:
            logits_sum = torch.zeros((predictions.shape[1], *kept_shape), dtype=ACCUMULATOR_DTYPE, device=results_device)
        # Same operations and order as nnU-Net: fp32 (or fp16 under autocast) prediction times the
        # fp16 Gaussian, added into fp16 sums, tile after tile.
        for prediction, slicer in zip(predictions, batch_slicers):
            clipped = _clip_tile(slicer, keep)
            if clipped is None:
                continue
            in_sums, in_tile = clipped
            part = prediction[in_tile]
            part *= gaussian[in_tile[1:]]
            logits_sum[in_sums] += part
            weight_sum[in_sums[1:]] += gaussian[in_tile[1:]]
        done += len(batch_slicers)
        medseg_threads.refresh()  # another job started or ended: this one's share changed
        report(progress, done / total, f"tile {done} of {total}", "tile")
    assert logits_sum is not None
    torch.div(logits_sum, weight_sum, out=logits_sum)
    if torch.isinf(logits_sum).any():
        raise ModelError("the network's logits overflowed float16 during stitching", hint="the model's outputs are out of range")
    if torch.isnan(logits_sum).any():
        raise ModelError("the network's output is not a number (NaN) in some voxels: no segmentation can be made "
                         "from it", hint="the model's weights or its normalisation are broken; use another model")
    return logits_sum


def _clip_tile(slicer: tuple[Any, ...], keep: tuple[slice, ...]) -> tuple[tuple[Any, ...], tuple[Any, ...]] | None:
    """A tile's index into the kept sums and the part of its prediction that lands there (None: none does)."""
    in_sums: list[Any] = [slice(None)]
    in_tile: list[Any] = [slice(None)]
    for axis, kept in zip(slicer[1:], keep):
        if isinstance(axis, int):  # a 2D plan's slice index: that axis is not in the prediction
            if not kept.start <= axis < kept.stop:
                return None
            in_sums.append(axis - kept.start)
            continue
        low, high = max(axis.start, kept.start), min(axis.stop, kept.stop)
        if low >= high:
            return None
        in_sums.append(slice(low - kept.start, high - kept.start))
        in_tile.append(slice(low - axis.start, high - axis.start))
    return tuple(in_sums), tuple(in_tile)


def sliding_window_logits(
    network_or_runner: Callable[[torch.Tensor], torch.Tensor],
    image: torch.Tensor | np.ndarray,
    plan: Any,
    *,
    step_size: float = 0.5,
    mirror_axes: Sequence[int] | None = None,
    tile_batch: int | None = None,
    accumulate_on_device: bool | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    fallbacks: list[str] | None = None,
) -> torch.Tensor:
    """Stitched logits (K, z, y, x) float16 for a preprocessed image (C, z, y, x).

    ``network_or_runner`` is a backends runner or any nn.Module (run on its own device).
    ``mirror_axes`` (spatial axes, e.g. (0, 1, 2)) turns on mirroring TTA. On out of
    memory the tiles per pass are halved; if stitching on the device itself runs out of
    memory, it is redone with the sums in host memory. Both are appended to ``fallbacks``.
    """
    runner = network_or_runner
    if isinstance(runner, torch.nn.Module):
        device = next(runner.parameters()).device
        runner = backends.TorchRunner([runner], device)
    fallbacks = fallbacks if fallbacks is not None else []
    tensor = torch.as_tensor(image, dtype=torch.float32)
    if tensor.ndim != 4:
        raise ModelError(f"sliding window needs a (C, z, y, x) image, got shape {tuple(tensor.shape)}")
    patch = [int(p) for p in plan.patch_size]
    padded, unpad = pad_to_patch(tensor, patch)
    slicers = tile_slicers(padded.shape[1:], patch, step_size)
    device = getattr(runner, "device", torch.device("cpu"))
    on_device = device.type != "cpu" if accumulate_on_device is None else bool(accumulate_on_device)
    if tile_batch is not None and (isinstance(tile_batch, bool) or int(tile_batch) < 1):
        raise ModelError(f"the tiles per pass must be at least 1, not {tile_batch}")
    batching = {"tiles": int(tile_batch or (1 if device.type == "cpu" else 2))}
    flips = mirror_combinations(mirror_axes)
    if on_device:
        try:
            return _accumulate(runner, padded, slicers, patch, device, batching, flips, progress, cancel, fallbacks,
                               unpad[1:])
        except Exception as error:
            if not backends.is_out_of_memory(error):
                raise
            backends.free_device_memory(device)
            fallbacks.append(f"out of memory stitching on {getattr(runner, 'name', device.type)}: stitching in host memory")
    return _accumulate(runner, padded, slicers, patch, torch.device("cpu"), batching, flips, progress, cancel, fallbacks,
                       unpad[1:])
