"""The inverse of preprocessing: a network's logits back onto the series' own grid.

Resample the logits back to the cropped original shape (linear, nearest along the coarse axis), argmax, paste
into the uncropped volume, transpose back (:func:`logits_to_label_map`; :func:`logits_to_probabilities` keeps the
softmax). nnU-Net converts the whole C-channel logit array to float64 for this, which is what runs large CTs
out of memory; here it is done in slabs along one axis. Linear interpolation is separable and local, so
slab-wise is exact: each output slab only needs the input slices that bracket it. The forward direction is
:mod:`medseg.model.preprocess`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np
import torch
import torch.nn.functional as F

from medseg.model.device_resample import torch_resample_fornnunet
from medseg.model.preprocess import (
    TORCH_RESAMPLING,
    PreprocessedImage,
    nearest_source_indices,
    resampling_axis,
    separate_axis,
)

# Output voxels per slab when resampling logits back (bounds the float32 working set).
SLAB_VOXELS = 4 * 1024 * 1024


def _slab_plan(n_out: int, n_in: int, axis_mode: str, slab: int) -> Iterator[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]:
    """Per output slab along the slab axis: (out_start, out_stop, lower index, upper index, weight)."""
    if n_in == n_out:
        lower = np.arange(n_out)
        upper, weight = lower, np.zeros(n_out, dtype=np.float32)
    elif axis_mode == "nearest":
        lower = nearest_source_indices(n_in, n_out)
        upper, weight = lower, np.zeros(n_out, dtype=np.float32)
    else:  # linear, align_corners=False, edges clamped (scipy mode='nearest' == torch's clamp)
        coords = np.maximum((np.arange(n_out, dtype=np.float64) + 0.5) * (n_in / n_out) - 0.5, 0.0)
        lower = np.minimum(np.floor(coords).astype(np.int64), n_in - 1)
        upper = np.minimum(lower + 1, n_in - 1)
        weight = (coords - lower).astype(np.float32)
    for start in range(0, n_out, slab):
        stop = min(n_out, start + slab)
        yield start, stop, lower[start:stop], upper[start:stop], weight[start:stop]


def _slab_voxels(device: torch.device) -> int:
    return SLAB_VOXELS * (8 if device.type == "cuda" else 1)


def _class_chunks(n_classes: int, plane_voxels: int, budget: int) -> list[slice]:
    """Classes per pass so that one output slice of them fits the budget (117 labels: a few passes)."""
    per_chunk = max(1, min(n_classes, budget // max(1, plane_voxels)))
    return [slice(c, min(n_classes, c + per_chunk)) for c in range(0, n_classes, per_chunk)]


@dataclass
class _Slabs:
    """How logits go back slab by slab: the slab axis, the logits with it first, the output plane, the slabs."""

    axis: int
    moved: torch.Tensor  # (n_axis, C, a, b), a view of the logits
    plane_out: list[int]
    slabs: list[tuple[int, int, np.ndarray, np.ndarray, np.ndarray]]  # _slab_plan's rows


def _slabs(logits: torch.Tensor, out_shape: Sequence[int], current_spacing: Sequence[float],
           new_spacing: Sequence[float], slab_classes: int | None = None) -> _Slabs:
    """The slabs along the slab axis, each sized for ``slab_classes`` classes (default: all) of an output slice."""
    axis = separate_axis(current_spacing, new_spacing)
    axis_mode = "nearest" if axis is not None else "linear"
    axis = 0 if axis is None else axis
    moved = logits.movedim(axis + 1, 0)  # (n_axis, C, a, b)
    plane_out = [n for a, n in enumerate(out_shape) if a != axis]
    n_in, n_out = moved.shape[0], int(out_shape[axis])
    per_slice = int(np.prod(plane_out)) * max(1, slab_classes or moved.shape[1])
    slab = max(1, _slab_voxels(logits.device) // per_slice)
    return _Slabs(axis, moved, plane_out, list(_slab_plan(n_out, n_in, axis_mode, slab)))


def _slab_values(slabs: _Slabs, slab: tuple[int, int, np.ndarray, np.ndarray, np.ndarray],
                 channels: slice | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(values, rows) of one slab: values (n, C, a, b) float32 channels-last, output slice i is values[rows[i]].

    Channels-last, so that the per-voxel argmax/softmax over C reads contiguous memory (5x
    faster than across planes). With nearest neighbour across, each source slice is
    resampled once however many output slices repeat it. ``channels`` restricts the classes.
    """
    start, stop, lower, upper, weight = slab
    moved = slabs.moved if channels is None else slabs.moved[:, channels]
    needed = np.unique(np.concatenate([lower, upper]))
    source = moved[torch.from_numpy(needed).to(moved.device)].float()  # (k, C, a, b)
    source = source.contiguous(memory_format=torch.channels_last)
    if list(source.shape[2:]) != slabs.plane_out:
        # in-plane linear, align_corners=False == skimage/scipy order 1 with mode 'edge'
        source = F.interpolate(source, size=slabs.plane_out, mode="bilinear", align_corners=False)
    position = np.searchsorted(needed, lower)
    if not np.any(weight):
        return source, torch.from_numpy(position)
    low = source[torch.from_numpy(position)]
    high = source[torch.from_numpy(np.searchsorted(needed, upper))]
    w = torch.from_numpy(weight).to(source.device).view(-1, 1, 1, 1)
    return low.mul_(1 - w).add_(high.mul_(w)), torch.arange(stop - start)


def _resampled_slabs(
    logits: torch.Tensor, out_shape: Sequence[int], current_spacing: Sequence[float], new_spacing: Sequence[float],
) -> Iterator[tuple[int, int, int, torch.Tensor, torch.Tensor]]:
    """Yield (axis, start, stop, values, rows) per output slab along the slab axis (``_slab_values``)."""
    slabs = _slabs(logits, out_shape, current_spacing, new_spacing)
    for slab in slabs.slabs:
        values, rows = _slab_values(slabs, slab)
        yield slabs.axis, slab[0], slab[1], values, rows


def _running_argmax(best: tuple[torch.Tensor, torch.Tensor] | None, values: torch.Tensor, offset: int,
                    dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(max, argmax) over classes so far, extended by ``values`` (classes offset.. along ``dim``).

    Ties keep the lower class, as one argmax over all classes does.
    """
    top, index = values.max(dim=dim)
    classes = offset + values.shape[dim]
    index = index.to(torch.uint8 if classes <= 256 else torch.int16 if classes <= 32768 else torch.int32).add_(offset)
    if best is None:
        return top, index
    better = top > best[0]
    return torch.where(better, top, best[0]), torch.where(better, index, best[1])


def logits_to_label_map(
    logits: torch.Tensor, prep: PreprocessedImage, label_dtype: np.dtype | None = None
) -> np.ndarray:
    """Argmax label map on the original (z, y, x) grid from network-space logits (C, z, y, x).

    The resampled logits are rounded to float16 before the argmax, as nnU-Net stores them,
    so ties break the same way (lowest label). Memory stays bounded whatever the number of
    classes: slabs along one axis, and when one slice of every class is too much (a
    117-label model), classes in chunks with the argmax carried from chunk to chunk.
    A plan with nnU-Net's torch resampling goes back as nnU-Net does it (``_torch_labels``).
    """
    n_classes = int(logits.shape[0])
    dtype = label_dtype or (np.uint8 if n_classes <= 255 else np.uint16)
    full = np.zeros(prep.shape_before_crop, dtype=dtype)
    cropped = full[prep.bbox]
    if prep.export_resampling.get("function") == TORCH_RESAMPLING:
        _torch_labels(logits, prep, cropped)
    else:
        axis = separate_axis(prep.spacing_network, prep.spacing_original)
        plane = int(np.prod([n for a, n in enumerate(prep.shape_after_crop) if a != (axis or 0)]))
        chunks = _class_chunks(n_classes, plane, _slab_voxels(logits.device))
        if len(chunks) == 1:
            for axis, start, stop, values, rows in _resampled_slabs(logits, prep.shape_after_crop,
                                                                    prep.spacing_network, prep.spacing_original):
                labels = values.half().argmax(dim=1).cpu().numpy().astype(dtype, copy=False)  # (n, a, b)
                np.moveaxis(cropped, axis, 0)[start:stop] = labels[rows.numpy()]
        else:
            _chunked_labels(logits, prep, cropped, chunks)
    labels = np.transpose(full, np.argsort(prep.transpose_forward))
    return prep.reorientation.undo(labels) if prep.reorientation else np.ascontiguousarray(labels)


def _chunked_labels(logits: torch.Tensor, prep: PreprocessedImage, cropped: np.ndarray, chunks: list[slice]) -> None:
    """The slab-wise argmax, each slab over the classes chunk by chunk: one chunk's slab alive at a time."""
    slabs = _slabs(logits, prep.shape_after_crop, prep.spacing_network, prep.spacing_original,
                   slab_classes=chunks[0].stop - chunks[0].start)
    for slab in slabs.slabs:
        best = None
        for chunk in chunks:
            values, rows = _slab_values(slabs, slab, chunk)
            rounded = values.half()  # as nnU-Net stores the resampled logits
            del values
            if len(rows) != len(rounded) or not torch.equal(rows, torch.arange(len(rows))):
                rounded = rounded[rows.to(rounded.device)]
            best = _running_argmax(best, rounded, chunk.start, dim=1)
            del rounded
        assert best is not None
        np.moveaxis(cropped, slabs.axis, 0)[slab[0]:slab[1]] = best[1].cpu().numpy()


def _torch_labels(logits: torch.Tensor, prep: PreprocessedImage, cropped: np.ndarray) -> None:
    """nnU-Net's export for torch-resampled plans: resample_torch_fornnunet on the float32 logits, argmax.

    Here class by class (as many as fit one class's float32 volume), the argmax carried along:
    the same numbers as nnU-Net's one call over all classes, in a fraction of the memory.
    """
    settings = prep.export_resampling
    axis = resampling_axis(settings, prep.spacing_network, prep.spacing_original)
    shape = prep.shape_after_crop
    budget = max(_slab_voxels(logits.device), int(np.prod(shape)))
    best = None
    for chunk in _class_chunks(int(logits.shape[0]), int(np.prod(shape)), budget):
        values = torch_resample_fornnunet(logits[chunk].float(), shape, axis)
        best = _running_argmax(best, values, chunk.start, dim=0)
        del values
    assert best is not None, "a network has at least one class"
    cropped[...] = best[1].cpu().numpy()


def logits_to_probabilities(logits: torch.Tensor, prep: PreprocessedImage) -> np.ndarray:
    """Softmax probabilities (C, z, y, x) float32 on the original grid; background is 1 outside the crop."""
    n_classes = int(logits.shape[0])
    full = np.zeros((n_classes, *prep.shape_before_crop), dtype=np.float32)
    full[0] = 1.0
    cropped = full[(slice(None), *prep.bbox)]
    for axis, start, stop, values, rows in _resampled_slabs(logits, prep.shape_after_crop, prep.spacing_network, prep.spacing_original):
        slab = torch.softmax(values[rows].half().float(), dim=1).movedim(1, 0)  # (C, k, a, b)
        np.moveaxis(cropped, axis + 1, 1)[:, start:stop] = slab.cpu().numpy()
    order = [0, *(int(a) + 1 for a in np.argsort(prep.transpose_forward))]
    probabilities = np.transpose(full, order)
    return prep.reorientation.undo(probabilities) if prep.reorientation else np.ascontiguousarray(probabilities)
