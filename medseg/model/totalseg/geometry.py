"""TotalSegmentator's image geometry steps, in the same arithmetic: RAS, resampling, the crop.

TotalSegmentator works on nibabel images: arrays indexed (x, y, z) with a RAS affine. A
medseg Volume's array is (z, y, x) with an LPS direction; its transpose is the very array
nibabel holds (same axes, same values), so every step here works on that (x, y, z) view:

* ``canonical_orientation``: nibabel's ``io_orientation`` rule (the closest orthogonal matrix,
  then each voxel axis in turn takes the world axis it points along most) - a permutation and
  flips, never an interpolation.
* ``resample_to_spacing``: ``scipy.ndimage.zoom(order=1, mode="nearest")`` (corner-aligned grid,
  the output shape rounded from the float32 header zooms) and the ``int32`` truncation toward zero;
  no change at all when the zooms already equal the target.
* ``resample_labels_back``: the order-0 zoom back to the shape before resampling, done as the
  index look-up scipy computes (``nearest_zoom_indices``), which is the same result bit for bit.
* ``crop_box``: the roi_subset crop: the mask's bounding box in the input's own voxel grid, widened
  by ``int(mm / zoom)`` voxels per axis, clipped (half-open).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
from scipy import ndimage

from medseg.core.volume import Volume
from medseg.progress import CancelToken

_LPS_TO_RAS = np.diag([-1.0, -1.0, 1.0])


def ras_axes_matrix(volume: Volume) -> np.ndarray:
    """The 3x3 part of the volume's RAS affine (nibabel's), columns = voxel axes x, y, z."""
    return _LPS_TO_RAS @ volume.direction @ np.diag(volume.spacing_mm)


def header_zooms(volume: Volume) -> np.ndarray:
    """The voxel size nibabel's header gives (float32 column lengths of the affine), x, y, z."""
    return np.sqrt(np.sum(ras_axes_matrix(volume) ** 2, axis=0)).astype(np.float32)


@dataclass(frozen=True)
class Canonical:
    """Canonical (RAS) axis w is input axis ``source[w]``, reversed where ``flip[w]`` (x, y, z order)."""

    source: tuple[int, int, int]
    flip: tuple[bool, bool, bool]

    def apply_xyz(self, array_xyz: np.ndarray) -> np.ndarray:
        out = np.transpose(array_xyz, self.source)
        flips = [w for w in range(3) if self.flip[w]]
        return np.flip(out, flips) if flips else out

    def undo_xyz(self, array_xyz: np.ndarray) -> np.ndarray:
        flips = [w for w in range(3) if self.flip[w]]
        out = np.flip(array_xyz, flips) if flips else array_xyz
        return np.transpose(out, np.argsort(self.source))

    def zooms(self, zooms_xyz: np.ndarray) -> np.ndarray:
        return np.asarray(zooms_xyz)[list(self.source)]

    def columns(self, matrix: np.ndarray) -> np.ndarray:
        """The RAS affine's 3 x 3 part after the reorientation (columns permuted and negated)."""
        signs = np.where(np.array(self.flip), -1.0, 1.0)
        return np.asarray(matrix)[:, list(self.source)] * signs


def canonical_orientation(volume: Volume) -> Canonical:
    """The axis permutation and flips that bring the volume's voxel axes to RAS, by nibabel's rule."""
    rzs = ras_axes_matrix(volume)
    zooms = np.sqrt(np.sum(rzs * rzs, axis=0))
    zooms[zooms == 0] = 1
    rs = rzs / zooms
    p, s, qs = np.linalg.svd(rs, full_matrices=False)
    tol = s.max() * max(rs.shape) * np.finfo(s.dtype).eps
    keep = s > tol
    r = p[:, keep] @ qs[keep]
    world_of = [0, 0, 0]
    sign_of = [1, 1, 1]
    for axis in range(3):
        column = r[:, axis]
        world = int(np.argmax(np.abs(column)))
        world_of[axis] = world
        sign_of[axis] = -1 if column[world] < 0 else 1
        r[world, :] = 0
    source = tuple(int(a) for a in np.argsort(world_of))
    flip = tuple(sign_of[source[w]] < 0 for w in range(3))
    return Canonical(source, flip)  # type: ignore[arg-type]


def _per_axis(spacing_mm: float | Sequence[float]) -> np.ndarray:
    values = np.atleast_1d(np.asarray(spacing_mm, dtype=np.float64))
    return np.repeat(values, 3) if values.size == 1 else values


def resample_zoom(zooms_xyz: np.ndarray, spacing_mm: float | Sequence[float]) -> np.ndarray:
    """TotalSegmentator's zoom factors: the float32 header zooms over the target spacing (float64)."""
    return np.asarray(zooms_xyz, dtype=np.float32) / _per_axis(spacing_mm)


def resampled_shape(shape_xyz: tuple[int, ...], zooms_xyz: np.ndarray,
                    spacing_mm: float | Sequence[float]) -> tuple[int, int, int]:
    zoom = resample_zoom(zooms_xyz, spacing_mm)
    return tuple(int(round(n * z)) for n, z in zip(shape_xyz, zoom))  # type: ignore[return-value]


def needs_resampling(zooms_xyz: np.ndarray, spacing_mm: float | Sequence[float]) -> bool:
    return not np.array_equal(np.asarray(zooms_xyz, dtype=np.float32), _per_axis(spacing_mm))


def resampled_zooms(columns_xyz: np.ndarray, zooms_xyz: np.ndarray,
                    spacing_mm: float | Sequence[float] | None) -> np.ndarray:
    """The voxel size nibabel reads back from TotalSegmentator's resampled image (x, y, z, float32): the
    affine's columns (``columns_xyz``, 3 x 3) divided by the zoom, their lengths rounded to float32."""
    if spacing_mm is None or not needs_resampling(zooms_xyz, spacing_mm):
        return np.asarray(zooms_xyz, dtype=np.float32)
    columns = np.asarray(columns_xyz, dtype=np.float64) / resample_zoom(zooms_xyz, spacing_mm)
    return np.sqrt(np.sum(columns ** 2, axis=0)).astype(np.float32)


try:  # the C routine behind ndimage.zoom (scipy >= 1.6); without it the resampling is done in one piece
    from scipy.ndimage import _nd_image

    _zoom_shift = _nd_image.zoom_shift
    _NEAREST = 0  # scipy's code of mode "nearest"
except (ImportError, AttributeError):  # pragma: no cover - other scipy layouts
    _zoom_shift = None

# Output slices per slab of the input resampling: a slab takes well under a second, so a cancel is
# seen within about one.
RESAMPLE_SLAB_VOXELS = 4_000_000


def resample_to_spacing(array_xyz: np.ndarray, zooms_xyz: np.ndarray, spacing_mm: float | Sequence[float],
                        cancel: CancelToken | None = None) -> np.ndarray:
    """TotalSegmentator's input resampling: linear, corner-aligned, truncated to int32 (x, y, z arrays).

    The same numbers as ``ndimage.zoom(array, zoom, order=1, mode="nearest")`` cast to int32, made slab by
    slab along z so that ``cancel`` is looked at between slabs: scipy's zoom computes each output voxel
    from its own coordinate, index x factor per axis (``zoom_shift``); a slab starting at output slice
    ``a`` is the same routine with the shift ``a`` (``affine_transform`` with a diagonal matrix), whose
    coordinates are bit for bit those of the whole zoom (tests/model/test_totalseg.py checks it).
    """
    if not needs_resampling(zooms_xyz, spacing_mm):
        return array_xyz
    zoom = resample_zoom(zooms_xyz, spacing_mm)
    shape = tuple(int(round(n * z)) for n, z in zip(array_xyz.shape, zoom))
    factors = np.array([(n_in - 1) / (n_out - 1) if n_out > 1 else 1.0
                        for n_in, n_out in zip(array_xyz.shape, shape)], dtype=np.float64)
    out = np.empty(shape, dtype=np.int32)
    input_array = np.asarray(array_xyz)
    per_slab = max(1, RESAMPLE_SLAB_VOXELS // max(1, shape[0] * shape[1]))
    for start in range(0, shape[2], per_slab):
        if cancel is not None:
            cancel.raise_if_cancelled()
        stop = min(shape[2], start + per_slab)
        if (start == 0 and stop == shape[2]) or _zoom_shift is None:
            out[:] = ndimage.zoom(array_xyz, zoom, order=1, mode="nearest", output=np.float64).astype(np.int32)
            break
        slab = np.empty((shape[0], shape[1], stop - start), dtype=np.float64)
        # scipy.ndimage.zoom's own routine, with the slab's first output slice as the shift along z
        _zoom_shift(input_array, factors, np.array([0.0, 0.0, float(start)]), slab, 1, _NEAREST, 0.0, 0, False)
        out[:, :, start:stop] = slab.astype(np.int32)
    if cancel is not None:
        cancel.raise_if_cancelled()
    return out


def nearest_zoom_indices(n_in: int, n_out: int) -> np.ndarray:
    """The source index of each output index in ``ndimage.zoom(order=0)`` along one axis (grid_mode False)."""
    factor = (n_in - 1) / (n_out - 1) if n_out > 1 else 1.0
    coordinates = np.arange(n_out, dtype=np.float64) * factor
    return np.clip(np.floor(coordinates + 0.5).astype(np.int64), 0, n_in - 1)


def resample_labels_back(labels_xyz: np.ndarray, shape_xyz: tuple[int, ...]) -> np.ndarray:
    """The label map at network resolution zoomed (order 0) onto the shape before resampling."""
    if tuple(labels_xyz.shape) == tuple(shape_xyz):
        return labels_xyz
    x, y, z = (nearest_zoom_indices(n_in, n_out) for n_in, n_out in zip(labels_xyz.shape, shape_xyz))
    return labels_xyz[np.ix_(x, y, z)]


def crop_box(mask_xyz: np.ndarray, zooms_xyz: np.ndarray,
             addon_mm: float | Sequence[float]) -> tuple[slice, slice, slice] | None:
    """TotalSegmentator's crop (x, y, z slices in the input's grid), or None when the mask is empty."""
    present = [np.flatnonzero(np.any(mask_xyz, axis=tuple(a for a in range(3) if a != axis))) for axis in range(3)]
    if any(p.size == 0 for p in present):
        return None
    addon = (_per_axis(addon_mm) / np.asarray(zooms_xyz, dtype=np.float32)).astype(int)
    return tuple(slice(max(0, int(p[0]) - int(a)), min(n, int(p[-1]) + 1 + int(a)))
                 for p, a, n in zip(present, addon, mask_xyz.shape))  # type: ignore[return-value]
