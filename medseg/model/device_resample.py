"""Image resampling as torch operations on the run's device: the GPU, or every core of the CPU.

nnU-Net's default image resampling is skimage's ``resize``, i.e. ``scipy.ndimage.zoom``
with a cubic B-spline (order 3, mode 'nearest', grid_mode=True, then a clip to the input's
range). scipy runs it on one CPU thread: 9.5 of 11.0 s of a warm GPU segmentation of a
512 x 512 x 300 CT (issue #27). A zoom is separable: along each axis it is one linear map
of n_in samples to n_out samples (the spline prefilter, the edge padding and the
interpolation weights together). Here that map is taken from scipy itself, once per
(n_in, n_out, order), by zooming each unit vector, and applied axis by axis as float64
matrix products on whichever device the tensor lives — cuBLAS on a GPU, every intra-op
thread of PyTorch on the CPU. On the CPU the result equals scipy's bit for bit on the
volumes tested, elsewhere within float64 rounding (tests/model/test_device_resample.py
states the tolerance). The spline prefilter decays as 0.268^k, so each block of output
rows multiplies only the band of input samples whose weights are above 1e-20 of the largest.

Apple's MPS has no float64: there the products run in float32 (about 1e-6 relative).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import Callable, Sequence

import numpy as np
import torch
import torch.nn.functional as F
from scipy import ndimage

from medseg.progress import CancelToken

# Output rows per block of a banded product: smaller blocks skip more zeros, larger ones
# make better matrix products (64 measured best between 32 and 256 on 512 -> 266).
BLOCK_ROWS = 64
# Entries this far below an operator's largest are zero in float64 arithmetic anyway.
BAND_TOLERANCE = 1e-20
# float64 working set per slab (bounds the memory whatever the volume's size).
SLAB_BYTES = {"cuda": 512 * 2**20, "cpu": 64 * 2**20}


def compute_dtype(device: torch.device) -> torch.dtype:
    return torch.float32 if device.type == "mps" else torch.float64


@lru_cache(maxsize=64)
def spline_operator(n_in: int, n_out: int, order: int) -> np.ndarray:
    """(n_out, n_in) float64: scipy.ndimage.zoom of a 1D signal of n_in samples to n_out, as a matrix.

    Column j is the zoom of the j-th unit vector, computed by scipy with the same arguments as
    nnU-Net's resampling (via skimage.transform.resize), so the matrix is scipy's own operator.
    """
    if n_in == n_out:
        return np.eye(n_in)
    zoom = 1.0 / (n_in / n_out)  # what skimage passes; scipy derives the output length from it
    unit = np.zeros(n_in)
    columns = np.empty((n_in, n_out))
    for j in range(n_in):
        unit[j] = 1.0
        column = ndimage.zoom(unit, zoom, output=np.float64, order=order, mode="nearest", grid_mode=True)
        if column.shape[0] != n_out:  # cannot happen for shapes from compute_new_shape; checked, not assumed
            raise ValueError(f"zoom of {n_in} samples by {zoom} gives {column.shape[0]}, not {n_out}")
        columns[j] = column
        unit[j] = 0.0
    return np.ascontiguousarray(columns.T)


@dataclass(frozen=True)
class AxisOperator:
    """A (n_out, n_in) linear map on one axis, split into row blocks with the columns each one needs."""

    matrix: torch.Tensor  # (n_out, n_in) on the device, in the compute dtype
    blocks: tuple[tuple[int, int, int, int], ...]  # (row0, row1, col0, col1)

    @property
    def n_out(self) -> int:
        return int(self.matrix.shape[0])


def _blocks(matrix: np.ndarray) -> tuple[tuple[int, int, int, int], ...]:
    significant = np.abs(matrix) > BAND_TOLERANCE * np.abs(matrix).max()
    blocks = []
    for row0 in range(0, matrix.shape[0], BLOCK_ROWS):
        row1 = min(matrix.shape[0], row0 + BLOCK_ROWS)
        columns = np.flatnonzero(significant[row0:row1].any(axis=0))
        col0, col1 = (int(columns[0]), int(columns[-1]) + 1) if columns.size else (0, 1)
        blocks.append((row0, row1, col0, col1))
    return tuple(blocks)


@lru_cache(maxsize=64)
def axis_operator(n_in: int, n_out: int, order: int, device: str, dtype: torch.dtype) -> AxisOperator:
    matrix = spline_operator(n_in, n_out, order)
    return AxisOperator(torch.from_numpy(matrix).to(device=device, dtype=dtype), _blocks(matrix))


def apply_axis(x: torch.Tensor, axis: int, operator: AxisOperator) -> torch.Tensor:
    """The operator along ``axis`` of x (in x's dtype), block by block over its band."""
    shape = list(x.shape)
    n_in = shape[axis]
    pre = int(np.prod(shape[:axis], dtype=np.int64))
    post = int(np.prod(shape[axis + 1:], dtype=np.int64))
    shape[axis] = operator.n_out
    out = x.new_empty(shape)
    matrix = operator.matrix
    if post == 1:  # the last axis: rows of x times the transposed block
        source, target = x.reshape(pre, n_in), out.view(pre, operator.n_out)
        for row0, row1, col0, col1 in operator.blocks:
            torch.matmul(source[:, col0:col1], matrix[row0:row1, col0:col1].T, out=target[:, row0:row1])
        return out
    source, target = x.reshape(pre, n_in, post), out.view(pre, operator.n_out, post)
    for row0, row1, col0, col1 in operator.blocks:
        target[:, row0:row1] = torch.matmul(matrix[row0:row1, col0:col1], source[:, col0:col1])
    return out


def _slab_size(device: torch.device, bytes_per_index: int) -> int:
    budget = SLAB_BYTES.get(device.type, SLAB_BYTES["cuda"])
    return max(1, budget // max(1, bytes_per_index))


def spline_resample(
    image: torch.Tensor,
    new_shape: Sequence[int],
    separate_axis: int | None,
    order: int,
    prepare: Callable[[torch.Tensor], torch.Tensor] | None = None,
    nearest_indices: Callable[[int, int], np.ndarray] | None = None,
    cancel: CancelToken | None = None,
) -> torch.Tensor:
    """Resample a (z, y, x) image as nnU-Net's resample_data_or_seg_to_shape (skimage resize, clip).

    ``cancel`` is looked at before every slab (a fraction of a second of work each), so a Cancel
    while a large CT is prepared stops it within that, not after the whole resampling.

    ``prepare`` turns a slab of the image (any dtype) into float32 values (the normalisation);
    it runs slab by slab, so an int16 CT never exists as a whole float copy. With
    ``separate_axis`` each plane across it is resized on its own (its own clip range) and
    the planes are picked by ``nearest_indices(n_in, n_out)`` along that axis; otherwise the
    whole volume is resized and clipped to its range. Returns float32 on the image's device.
    """
    prepare = prepare or (lambda slab: slab.to(torch.float32))
    device = image.device
    dtype = compute_dtype(device)
    new_shape = tuple(int(n) for n in new_shape)
    check = cancel.raise_if_cancelled if cancel is not None else (lambda: None)
    if tuple(image.shape) == new_shape:
        return _prepared_slabs(image, prepare, check)
    if separate_axis is not None:
        return _separate_axis_resample(image, new_shape, separate_axis, order, prepare, dtype, nearest_indices, check)
    low, high = _value_range(image, prepare)
    operators = {a: axis_operator(image.shape[a], new_shape[a], order, str(device), dtype)
                 for a in range(3) if image.shape[a] != new_shape[a]}
    # The axis that is slabbed for the first passes is done last; do the most shrinking axes first.
    last = max(range(3), key=lambda a: (new_shape[a] / image.shape[a], a))
    first = [a for a in sorted(range(3), key=lambda a: new_shape[a] / image.shape[a]) if a != last]
    plane_elements = int(np.prod([new_shape[a] if a in first else image.shape[a] for a in range(3) if a != last]))
    middle_shape = [new_shape[a] if a in first else image.shape[a] for a in range(3)]
    middle = torch.empty(middle_shape, dtype=dtype, device=device)
    per_index = int(np.prod([image.shape[a] for a in range(3) if a != last])) * 8 * 3
    step = _slab_size(device, per_index)
    for start in range(0, image.shape[last], step):
        check()
        index = [slice(None)] * 3
        index[last] = slice(start, min(image.shape[last], start + step))
        slab = prepare(image[tuple(index)]).to(dtype)
        for axis in first:
            if axis in operators:
                slab = apply_axis(slab, axis, operators[axis])
        middle[tuple(index)] = slab
        del slab
    if last not in operators:
        out = middle.to(torch.float32)
    else:
        out = torch.empty(new_shape, dtype=torch.float32, device=device)
        other = first[0]
        step = _slab_size(device, plane_elements // max(1, middle_shape[other]) * 8 * 3)
        for start in range(0, middle_shape[other], step):
            check()
            index = [slice(None)] * 3
            index[other] = slice(start, min(middle_shape[other], start + step))
            out[tuple(index)] = apply_axis(middle[tuple(index)], last, operators[last]).to(torch.float32)
    del middle
    return _clip(out, low, high)


def _clip(out: torch.Tensor, low: torch.Tensor, high: torch.Tensor) -> torch.Tensor:
    # skimage clips the float64 result to the float64 input range, then it is stored as
    # float32: clipping the float32 result to the float32-rounded range is the same.
    return out.clamp_(low.to(torch.float32), high.to(torch.float32))


def _prepared_slabs(image: torch.Tensor, prepare: Callable[[torch.Tensor], torch.Tensor],
                    check: Callable[[], None] = lambda: None) -> torch.Tensor:
    out = torch.empty(image.shape, dtype=torch.float32, device=image.device)
    step = _slab_size(image.device, int(np.prod(image.shape[1:])) * 8)
    for start in range(0, image.shape[0], step):
        check()
        out[start:start + step] = prepare(image[start:start + step])
    return out


def _value_range(image: torch.Tensor, prepare: Callable[[torch.Tensor], torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """The prepared image's min and max: ``prepare`` is monotone (clip, shift, positive scale)."""
    low, high = torch.aminmax(image)
    ends = prepare(torch.stack([low, high]))
    return ends[0], ends[1]


def _separate_axis_resample(
    image: torch.Tensor, new_shape: tuple[int, ...], axis: int, order: int,
    prepare: Callable[[torch.Tensor], torch.Tensor], dtype: torch.dtype,
    nearest_indices: Callable[[int, int], np.ndarray] | None, check: Callable[[], None] = lambda: None,
) -> torch.Tensor:
    device = image.device
    moved = image.movedim(axis, 0)
    plane_axes = [a for a in range(3) if a != axis]
    plane_out = [new_shape[a] for a in plane_axes]
    operators = [axis_operator(moved.shape[1 + i], plane_out[i], order, str(device), dtype)
                 if moved.shape[1 + i] != plane_out[i] else None for i in range(2)]
    if nearest_indices is None:
        raise ValueError("a separate-axis resampling needs the nearest-neighbour rule along that axis")
    source = nearest_indices(moved.shape[0], new_shape[axis])
    needed = np.unique(source)
    planes = torch.empty((len(needed), *plane_out), dtype=torch.float32, device=device)
    step = _slab_size(device, int(np.prod(moved.shape[1:])) * 8 * 3)
    for start in range(0, len(needed), step):
        check()
        chosen = needed[start:start + step]
        if chosen[-1] - chosen[0] + 1 == len(chosen):  # consecutive planes (upsampling: all of them): a view, no copy
            picked = moved[int(chosen[0]):int(chosen[-1]) + 1]
        else:
            picked = moved.index_select(0, torch.from_numpy(chosen).to(device))
        slab = prepare(picked).to(dtype)
        # skimage resizes each plane on its own: each plane is clipped to its own range
        low = slab.amin(dim=(1, 2), keepdim=True).to(torch.float32)
        high = slab.amax(dim=(1, 2), keepdim=True).to(torch.float32)
        for i, operator in enumerate(operators):
            if operator is not None:
                slab = apply_axis(slab, 1 + i, operator)
        resized = slab.to(torch.float32)
        if any(op is not None for op in operators):
            resized = torch.maximum(torch.minimum(resized, high), low)
        planes[start:start + len(chosen)] = resized
    positions = torch.from_numpy(np.searchsorted(needed, source)).to(device)
    return planes.index_select(0, positions).movedim(0, axis).contiguous()


# --- nnU-Net's own torch resampling (plans made by its *_torchres planners) ----------------------------


def torch_resample_fornnunet(
    data: torch.Tensor, new_shape: Sequence[int], separate_axis: int | None
) -> torch.Tensor:
    """nnU-Net's resample_torch_fornnunet for images (is_seg False): (C, z, y, x) float32 on its device.

    Without a separate axis one trilinear F.interpolate (align_corners False); with one, each
    plane across it bilinear, then 'nearest-exact' along it — the same torch calls as nnU-Net.
    """
    new_shape = [int(n) for n in new_shape]
    if list(data.shape[1:]) == new_shape:
        return data
    if separate_axis is None:
        return F.interpolate(data[None].float(), new_shape, mode="trilinear", antialias=False)[0]
    channels = data.shape[0]
    moved = data.movedim(separate_axis + 1, 1)  # (C, n, a, b)
    plane = [new_shape[a] for a in range(3) if a != separate_axis]
    flat = moved.reshape(channels * moved.shape[1], *moved.shape[2:])
    planes = F.interpolate(flat[None].float(), plane, mode="bilinear", antialias=False)[0]
    stacked = planes.reshape(channels, moved.shape[1], *plane).movedim(1, separate_axis + 1)
    return F.interpolate(stacked[None], new_shape, mode="nearest-exact", antialias=False)[0]
