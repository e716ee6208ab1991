"""Resample a Volume onto another Volume's grid (SimpleITK's ResampleImageFilter)."""

from __future__ import annotations

import dataclasses

import numpy as np
import SimpleITK as sitk

from medseg.core.volume import Volume
from medseg.errors import GeometryError

INTERPOLATORS = {
    "nearest": sitk.sitkNearestNeighbor,  # label maps: never invent label values
    "linear": sitk.sitkLinear,
    "bspline": sitk.sitkBSpline,
}


def resample_to(volume: Volume, reference: Volume, interpolation: str = "nearest", default_value: float = 0) -> Volume:
    """``volume`` resampled onto ``reference``'s grid, in physical (LPS) space.

    The result keeps ``volume``'s dtype and metadata. Points of the reference grid that
    fall outside ``volume`` get ``default_value``.
    """
    if interpolation not in INTERPOLATORS:
        raise GeometryError(f"unknown interpolation {interpolation!r}; use one of {sorted(INTERPOLATORS)}")
    if volume.same_grid(reference, tol=1e-5):
        return volume.with_array(volume.array.copy())
    image = volume.to_sitk()
    resampler = sitk.ResampleImageFilter()
    resampler.SetSize(reference.size_xyz)
    resampler.SetOutputSpacing(reference.spacing_mm)
    resampler.SetOutputOrigin(reference.origin_mm)
    resampler.SetOutputDirection(tuple(reference.direction.reshape(-1)))
    resampler.SetInterpolator(INTERPOLATORS[interpolation])
    resampler.SetDefaultPixelValue(float(default_value))
    resampler.SetOutputPixelType(image.GetPixelID())
    result = Volume.from_sitk(resampler.Execute(image), dataclasses.replace(volume.meta))
    return result


def slice_origins(volume: Volume) -> np.ndarray:
    """(nz, 3) LPS position of each slice's first voxel: the acquired positions for a raw stack
    (``meta.extra["slice_positions_mm"]``, where the even z step is only a stand-in), else the grid's."""
    positions = volume.meta.extra.get("slice_positions_mm")
    if positions is not None and len(positions) == volume.shape_zyx[0]:
        return np.asarray(positions, dtype=np.float64)
    k = np.arange(volume.shape_zyx[0], dtype=np.float64)
    return np.asarray(volume.origin_mm) + np.outer(k * volume.spacing_mm[2], volume.direction[:, 2])


def place_labels(source: Volume, target: Volume) -> np.ndarray:
    """``source``'s label values on ``target``'s grid in patient space (0 outside), none of them lost.

    Each target voxel takes the label of the source voxel nearest to its centre. Where the target's
    voxels lie farther apart than the source's (7 mm acquired slices over a 4 mm regular grid), that
    sampling skips source voxels, and a label drawn on one skipped slice would vanish. So every labelled
    source voxel also reaches the target voxel nearest to it, and wins it over background and over a
    label with more voxels: the thinner structure is the one at risk, and the large one around it (a body
    around a lesion drawn on one slice) keeps all its other voxels. Where the target is as fine as the
    source, this changes nothing.

    Either grid may be a raw stack whose slices lie where they were acquired rather than on the even
    step its geometry states: a point then belongs to the nearest slice plane and the nearest pixel in
    it. Between two regular grids SimpleITK finds the nearest voxels."""
    if source.same_grid(target, tol=1e-5) and "slice_positions_mm" not in source.meta.extra \
            and "slice_positions_mm" not in target.meta.extra:
        return np.asarray(source.array).copy()
    if "slice_positions_mm" not in source.meta.extra and "slice_positions_mm" not in target.meta.extra:
        out = np.ascontiguousarray(resample_to(source, target, "nearest", 0).array)
        if _moved_only(source, target):
            return out  # the same voxels, shifted or flipped: every source voxel is some target voxel's nearest
    else:
        out = _nearest_labels(source, target)
    _keep_every_label(source, target, out)
    return out


class _Planes:
    """Where a volume's voxels are: its slice planes (a raw stack's acquired ones) and the pixels in them."""

    def __init__(self, volume: Volume) -> None:
        self.shape = volume.shape_zyx
        self.d0, self.d1 = volume.direction[:, 0], volume.direction[:, 1]
        self.sx, self.sy = float(volume.spacing_mm[0]), float(volume.spacing_mm[1])
        normal = np.cross(self.d0, self.d1)
        self.normal = normal / np.linalg.norm(normal)
        self.origins = slice_origins(volume)
        offsets = self.origins @ self.normal
        self.order = np.argsort(offsets)
        self.sorted_offsets = offsets[self.order]
        steps = np.diff(self.sorted_offsets)
        # a point belongs to its nearest plane; past the first and last plane, half that end's step at most
        first_half = (float(steps[0]) if steps.size else float(volume.spacing_mm[2])) / 2.0
        last_half = (float(steps[-1]) if steps.size else float(volume.spacing_mm[2])) / 2.0
        self.low = self.sorted_offsets[0] - first_half - 1e-6
        self.high = self.sorted_offsets[-1] + last_half + 1e-6

    def points(self, k: int, y: np.ndarray, x: np.ndarray) -> np.ndarray:
        """(N, 3) LPS centres of the voxels (k, y[i], x[i])."""
        return (self.origins[k] + np.multiply.outer(x * self.sx, self.d0) + np.multiply.outer(y * self.sy, self.d1))

    def nearest(self, points: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """The (z, y, x) index of the voxel nearest to each point (any leading shape), and whether it is inside."""
        along = points @ self.normal
        if len(self.order) == 1:
            pick = np.zeros(along.shape, dtype=np.int64)
        else:
            after = np.clip(np.searchsorted(self.sorted_offsets, along), 1, len(self.order) - 1)
            pick = np.where(along - self.sorted_offsets[after - 1] <= self.sorted_offsets[after] - along, after - 1, after)
        plane = self.order[pick]
        relative = points - self.origins[plane]
        u = np.rint(relative @ self.d0 / self.sx).astype(np.int64)
        v = np.rint(relative @ self.d1 / self.sy).astype(np.int64)
        nz, ny, nx = self.shape
        inside = (along >= self.low) & (along <= self.high) & (u >= 0) & (u < nx) & (v >= 0) & (v < ny)
        return plane, v, u, inside


def _nearest_labels(source: Volume, target: Volume) -> np.ndarray:
    """Each target voxel takes the label of the source voxel nearest to its centre (raw stacks by plane)."""
    planes, grid = _Planes(source), _Planes(target)
    out = np.zeros(target.shape_zyx, dtype=source.array.dtype)
    ty, tx = target.shape_zyx[1:]
    jj, ii = np.meshgrid(np.arange(ty), np.arange(tx), indexing="ij")
    for k in range(target.shape_zyx[0]):
        z, y, x, inside = planes.nearest(grid.points(k, jj, ii))
        if inside.any():
            out[k][inside] = source.array[z[inside], y[inside], x[inside]]
    return out


def _moved_only(source: Volume, target: Volume) -> bool:
    """The same spacing and axes (flips and reorderings aside): nearest-voxel sampling skips none."""
    return bool(np.allclose(np.abs(source.direction), np.abs(target.direction), atol=1e-5)
                and np.allclose(source.spacing_mm, target.spacing_mm, rtol=1e-5))


def _keep_every_label(source: Volume, target: Volume, out: np.ndarray) -> None:
    """Give each labelled source voxel's label to the target voxel nearest to it where that voxel holds
    background or a label with more voxels (see :func:`place_labels`)."""
    array = np.asarray(source.array)
    counts = np.bincount(array.reshape(-1).astype(np.int64, copy=False))
    present = np.flatnonzero(counts[1:]) + 1
    if present.size == 0:
        return
    # the fewer voxels a label has, the higher it ranks; background lowest; equal counts by value
    ranked = present[np.lexsort((present, -counts[present]))]
    priority = np.zeros(counts.size, dtype=np.int64)
    priority[ranked] = np.arange(1, ranked.size + 1)
    planes, grid = _Planes(source), _Planes(target)
    flat_out = out.reshape(-1)
    for k in range(array.shape[0]):
        y, x = np.nonzero(array[k])
        if y.size == 0:
            continue
        values = array[k, y, x]
        z, v, u, inside = grid.nearest(planes.points(k, y, x))
        if not inside.any():
            continue
        flat = np.ravel_multi_index((z[inside], v[inside], u[inside]), out.shape)
        values = values[inside]
        wins = priority[values] > priority[flat_out[flat]]
        if not wins.any():
            continue
        flat, values = flat[wins], values[wins]
        order = np.lexsort((priority[values], flat))  # per target voxel, its highest-ranked candidate last
        flat, values = flat[order], values[order]
        last = np.append(flat[1:] != flat[:-1], True)
        flat_out[flat[last]] = values[last]
