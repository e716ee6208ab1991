"""Preprocessing as nnU-Net v2 does it, and its exact inverse.

Forward (``preprocess``): transpose to the plan's axis order, crop to the non-zero
bounding box, normalize (CT: clip to the stored 0.5/99.5 percentiles, z-score with the
stored mean/std), resample to the plan's spacing (cubic B-spline, with nearest
neighbour along a much coarser axis: nnU-Net's "separate z").

Inverse (``logits_to_label_map``, in :mod:`medseg.model.logits_grid`): resample the logits back to the cropped original
shape (linear, nearest along the coarse axis), argmax, paste into the uncropped volume,
transpose back. nnU-Net converts the whole C-channel logit array to float64 for this,
which is what runs large CTs out of memory; here it is done in slabs along one axis.
Linear interpolation is separable and local, so slab-wise is exact: each output slab
only needs the input slices that bracket it.

Every function works in the array's (z, y, x) index space, like nnU-Net's
SimpleITK reader, so a mask lands on exactly the grid and geometry of the input.

Both directions run as torch operations on the run's device (``preprocess_to``): on a GPU
the CT goes up as stored (int16: half the bytes) and is normalised and resampled there;
on the CPU the same code uses every intra-op thread. The cubic B-spline is scipy's own
operator applied as matrix products (``medseg.model.device_resample``); ``resample_image``
below is the scipy reference it is tested against. Plans made by nnU-Net's ``*_torchres``
planners (``resample_torch_fornnunet``) are resampled with the same torch calls as nnU-Net.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np
import torch
from scipy import ndimage

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.io.orientation import Reorientation, reorientation_to, reoriented
from medseg.model.device_resample import spline_resample, torch_resample_fornnunet
from medseg.model.plan import is_anisotropic
from medseg.progress import CancelToken

# nnU-Net's default resampling orders: data cubic / nearest across, logits linear / nearest across.
DATA_ORDER, DATA_ORDER_ACROSS = 3, 0


@dataclass
class PreprocessedImage:
    """The network's input and everything needed to put its output back on the original grid.

    All shapes and spacings are in the plan's (transposed) axis order.
    """

    data: np.ndarray | torch.Tensor  # (C, z, y, x) float32, normalized, at the plan's spacing
    transpose_forward: tuple[int, ...]
    spacing_original: tuple[float, float, float]
    spacing_network: tuple[float, float, float]
    shape_before_crop: tuple[int, int, int]
    bbox: tuple[slice, slice, slice]  # crop inside shape_before_crop
    original_shape_zyx: tuple[int, int, int]  # the input Volume's array shape
    # Plan.orientation: the input array was first reoriented by this (None: used as stored)
    reorientation: Reorientation | None = None
    # the plan's resampling of the logits back (resampling_fn_probabilities); nnU-Net's default if empty
    export_resampling: dict[str, Any] = field(default_factory=dict)

    @property
    def shape_after_crop(self) -> tuple[int, int, int]:
        return tuple(s.stop - s.start for s in self.bbox)  # type: ignore[return-value]


# --- plan access (the Plan dataclass lives in medseg.model.plan) ---------------------------------------


def plan_transpose(plan: Any) -> tuple[int, int, int]:
    transpose = getattr(plan, "transpose_forward", None)
    return tuple(int(a) for a in transpose) if transpose else (0, 1, 2)


def network_spacing(plan: Any, spacing_transposed: Sequence[float]) -> tuple[float, float, float]:
    """The spacing the network runs at; a 2D plan keeps the slice axis as it is (as nnU-Net)."""
    if hasattr(plan, "target_spacing_for"):
        return tuple(float(s) for s in plan.target_spacing_for(spacing_transposed))  # type: ignore[return-value]
    target = [float(s) for s in plan.target_spacing_transposed][-3:]
    if int(plan.dim) == 2:
        target = [float(spacing_transposed[0]), *target[-2:]]
    return tuple(target)  # type: ignore[return-value]


# --- cropping -----------------------------------------------------------------------------------------


def nonzero_bbox(data: np.ndarray) -> tuple[slice, slice, slice]:
    """Half-open bounding box of the voxels that are non-zero in any channel.

    nnU-Net fills holes in the mask first; filling holes never grows a bounding box, so
    it is skipped here (it costs seconds and a full-size mask on a large CT).
    """
    nonzero = np.any(data != 0, axis=0) if data.ndim == 4 else data != 0
    slices = []
    for axis in range(nonzero.ndim):
        other = tuple(a for a in range(nonzero.ndim) if a != axis)
        present = np.flatnonzero(np.any(nonzero, axis=other))
        if present.size == 0:  # an all-zero image: keep everything, as there is nothing to crop to
            return tuple(slice(0, n) for n in nonzero.shape)  # type: ignore[return-value]
        slices.append(slice(int(present[0]), int(present[-1]) + 1))
    return tuple(slices)  # type: ignore[return-value]


# --- normalization ------------------------------------------------------------------------------------


def normalize(data: np.ndarray, normalization: dict[str, Any] | None) -> np.ndarray:
    """Normalize a (C, ...) float32 array in place with the plan's scheme and stored statistics."""
    scheme = (normalization or {}).get("scheme", "CTNormalization")
    if scheme == "CTNormalization":
        try:
            low, high = float(normalization["percentile_00_5"]), float(normalization["percentile_99_5"])
            mean, std = float(normalization["mean"]), float(normalization["std"])
        except (KeyError, TypeError) as error:
            raise ModelError(f"CT normalization in the model lacks {error}") from None
        np.clip(data, low, high, out=data)
        data -= np.float32(mean)
        data /= np.float32(max(std, 1e-8))
    elif scheme in ("ZScoreNormalization", "ZScore"):
        for channel in data:  # per-image statistics, as nnU-Net (no mask for CT-sized crops)
            mean, std = float(channel.mean()), float(channel.std())
            channel -= np.float32(mean)
            channel /= np.float32(max(std, 1e-8))
    elif scheme in ("NoNormalization", "none"):
        pass
    else:
        raise ModelError(f"the model uses the intensity normalization {scheme!r}, which medseg does not implement")
    return data


# --- resampling: shapes and the separate-axis rule (nnU-Net's) --------------------------------------------


def compute_new_shape(shape: Sequence[int], spacing: Sequence[float], new_spacing: Sequence[float]) -> tuple[int, ...]:
    # At least one voxel per axis: nnU-Net's rounding gives 0 for a single thin slice planned at a
    # coarser z (e.g. one 1 mm slice at 5 mm), where it fails; every shape it handles is unchanged.
    return tuple(max(1, int(round(s / n * k))) for s, n, k in zip(spacing, new_spacing, shape))


def _coarse_axis(spacing: Sequence[float]) -> int | None:
    spacing = np.asarray(spacing, dtype=np.float64)
    coarsest = np.flatnonzero(spacing.max() / spacing == 1)
    # two or three axes share the coarsest spacing: no single axis to treat separately
    return int(coarsest[0]) if coarsest.size == 1 else None


def separate_axis(current_spacing: Sequence[float], new_spacing: Sequence[float]) -> int | None:
    """The axis resampled with nearest neighbour, or None (nnU-Net's determine_do_sep_z_and_axis)."""
    # An axis more than ANISOTROPY_THRESHOLD times coarser than the finest is resampled
    # separately (in-plane spline, nearest neighbour across).
    if is_anisotropic(current_spacing):
        return _coarse_axis(current_spacing)
    if is_anisotropic(new_spacing):
        return _coarse_axis(new_spacing)
    return None


def nearest_source_indices(n_in: int, n_out: int) -> np.ndarray:
    """Source index of each output slice for nearest-neighbour resampling along one axis.

    Uses scipy's own order-0 rounding on nnU-Net's (align_corners=False) coordinates so
    ties (.5) resolve exactly as nnU-Net's map_coordinates does.
    """
    coords = (np.arange(n_out, dtype=np.float64) + 0.5) * (float(n_in) / n_out) - 0.5
    source = ndimage.map_coordinates(np.arange(n_in, dtype=np.float64), coords[None], order=0, mode="nearest")
    return source.astype(np.int64)


def _spline_resize(image: np.ndarray, new_shape: Sequence[int], order: int) -> np.ndarray:
    """skimage.transform.resize(order, mode='edge', anti_aliasing=False, clip=True) into float32.

    scipy computes in float64 internally whatever the output dtype, so writing float32
    directly gives the same numbers as nnU-Net's float64 result stored as float32.
    """
    zoom = [1.0 / (i / o) for i, o in zip(image.shape, new_shape)]
    out = ndimage.zoom(image, zoom, output=np.float32, order=order, mode="nearest", grid_mode=True)
    np.clip(out, image.min(), image.max(), out=out)
    return out


def resample_image(
    data: np.ndarray, new_shape: Sequence[int], current_spacing: Sequence[float], new_spacing: Sequence[float]
) -> np.ndarray:
    """Resample a (C, z, y, x) float32 image as nnU-Net's resample_data_or_seg_to_shape (order 3, order_z 0)."""
    new_shape = tuple(int(n) for n in new_shape)
    if tuple(data.shape[1:]) == new_shape:
        return data
    axis = separate_axis(current_spacing, new_spacing)
    out = np.empty((data.shape[0], *new_shape), dtype=np.float32)
    for c, channel in enumerate(data):
        if axis is None:
            out[c] = _spline_resize(channel, new_shape, DATA_ORDER)
            continue
        plane_shape = [n for a, n in enumerate(new_shape) if a != axis]
        source = nearest_source_indices(channel.shape[axis], new_shape[axis])
        resized: dict[int, np.ndarray] = {}
        out_c = np.moveaxis(out[c], axis, 0)
        for k, index in enumerate(source):
            # each source slice is resized once, however many output slices copy it
            if index not in resized:
                resized.clear()
                resized[index] = _spline_resize(np.take(channel, index, axis=axis), plane_shape, DATA_ORDER)
            out_c[k] = resized[index]
    return out


# --- the forward pipeline ------------------------------------------------------------------------------


TORCH_RESAMPLING = "resample_torch_fornnunet"  # nnU-Net's torch resampling (its *_torchres planners)


def data_resampling(plan: Any) -> dict[str, Any]:
    """The plan's image resampling settings (nnU-Net's default when it names none)."""
    return dict((getattr(plan, "resampling", None) or {}).get("data") or {})


def resampling_axis(settings: dict[str, Any], current: Sequence[float], new: Sequence[float]) -> int | None:
    """The separately resampled axis: nnU-Net's determine_do_sep_z_and_axis, with the plan's force_separate_z."""
    force = settings.get("force_separate_z")
    if force is None:
        return separate_axis(current, new)
    return _coarse_axis(current) if force else None


def normalize_tensor(data: torch.Tensor, normalization: dict[str, Any] | None) -> torch.Tensor:
    """``normalize`` for a (C, ...) float32 tensor on any device, with numpy's float32 arithmetic, bit for bit.

    Per-image schemes (z-score) need the whole image: those go through ``normalize`` on the host.
    """
    scheme = (normalization or {}).get("scheme", "CTNormalization")
    if scheme in ("NoNormalization", "none"):
        return data
    if scheme != "CTNormalization":
        return torch.from_numpy(normalize(data.cpu().numpy(), normalization)).to(data.device)
    try:
        low, high = float(normalization["percentile_00_5"]), float(normalization["percentile_99_5"])
        mean, std = float(normalization["mean"]), float(normalization["std"])
    except (KeyError, TypeError) as error:
        raise ModelError(f"CT normalization in the model lacks {error}") from None
    # numpy rounds the bounds and the statistics to float32 first; so does this. The divisor is a
    # device tensor, not a Python scalar: CUDA divides by a host scalar as a multiplication by its
    # reciprocal, which is not always the same float32.
    data.clamp_(float(np.float32(low)), float(np.float32(high)))
    data.sub_(torch.tensor(np.float32(mean), device=data.device))
    data.div_(torch.tensor(np.float32(max(std, 1e-8)), device=data.device))
    return data


# dtypes a CT travels to the device in as stored; any other is converted to float32 first
# (the preprocessing's first step anyway), e.g. uint16, which torch cannot compute with
_DEVICE_DTYPES = (np.dtype(np.int8), np.dtype(np.uint8), np.dtype(np.int16), np.dtype(np.int32), np.dtype(np.float32))


def _device_image(array: np.ndarray, device: torch.device) -> torch.Tensor:
    if array.dtype not in _DEVICE_DTYPES:
        array = array.astype(np.float32)
    return torch.from_numpy(np.ascontiguousarray(array)).to(device)


def preprocess_to(volume: Volume, plan: Any, device: str | torch.device = "cpu",
                  cancel: CancelToken | None = None) -> PreprocessedImage:
    """Crop, normalize and resample a CT Volume for the plan's network, on ``device``.

    ``data`` of the result is a (C, z, y, x) float32 tensor on the device. ``cancel`` is looked at
    between the steps and before every slab of the resampling (Cancelled: nothing is returned).
    """
    check = cancel.raise_if_cancelled if cancel is not None else (lambda: None)
    device = torch.device(device)
    channels = int(getattr(plan, "num_input_channels", 1) or 1)
    if channels != 1:
        raise ModelError(f"the model expects {channels} input channels; medseg segments single CT volumes")
    original_shape = volume.shape_zyx
    reorientation = None
    if getattr(plan, "orientation", None):
        reorientation = reorientation_to(volume, plan.orientation)
        volume = reoriented(volume, reorientation)
    check()
    transpose = plan_transpose(plan)
    spacing = tuple(float(volume.spacing_zyx[a]) for a in transpose)
    image = np.transpose(volume.array, transpose)
    bbox = nonzero_bbox(image[None])
    check()
    target = network_spacing(plan, spacing)
    cropped = image[bbox]
    new_shape = compute_new_shape(cropped.shape, spacing, target)
    normalization = getattr(plan, "normalization", None)
    settings = data_resampling(plan)
    axis = resampling_axis(settings, spacing, target)
    # on the CPU a float32 CT is a view of the Volume's own array: every step below that normalises in
    # place does it on a copy (.to(..., copy=True)), or the caller's image would change
    raw = _device_image(cropped, device)
    check()
    if settings.get("function") == TORCH_RESAMPLING:
        data = normalize_tensor(raw.to(torch.float32, copy=True)[None], normalization)
        data = torch_resample_fornnunet(data, new_shape, axis)
    else:
        if (normalization or {}).get("scheme", "CTNormalization") not in ("CTNormalization", "NoNormalization", "none"):
            raw = normalize_tensor(raw.to(torch.float32, copy=True)[None], normalization)[0]  # whole-image statistics first
            normalization = {"scheme": "NoNormalization"}
        data = spline_resample(raw, new_shape, axis, int(settings.get("order", DATA_ORDER)),
                               prepare=lambda slab: normalize_tensor(slab.to(torch.float32, copy=True), normalization),
                               nearest_indices=nearest_source_indices, cancel=cancel)[None]
    del raw
    check()
    return PreprocessedImage(
        data=data,  # type: ignore[arg-type]
        transpose_forward=transpose,
        spacing_original=spacing,  # type: ignore[arg-type]
        spacing_network=target,
        shape_before_crop=tuple(image.shape),  # type: ignore[arg-type]
        bbox=bbox,
        original_shape_zyx=original_shape,
        reorientation=reorientation,
        export_resampling=dict((getattr(plan, "resampling", None) or {}).get("probabilities") or {}),
    )


def preprocess(volume: Volume, plan: Any) -> PreprocessedImage:
    """``preprocess_to`` on the CPU, with ``data`` as a numpy array."""
    prep = preprocess_to(volume, plan, "cpu")
    prep.data = prep.data.numpy()  # type: ignore[union-attr]
    return prep
