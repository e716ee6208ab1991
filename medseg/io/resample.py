"""Resample a Volume onto another Volume's grid (SimpleITK's ResampleImageFilter)."""

from __future__ import annotations

import dataclasses

import numpy as np
import SimpleITK as sitk

from medseg.errors import GeometryError
from medseg.core.volume import Volume

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
    """``source``'s label values on ``target``'s grid, nearest voxel in patient space (0 outside).

    Either grid may be a raw stack whose slices lie where they were acquired rather than on the
    even step its geometry states: then each target voxel takes the value of the nearest source
    slice plane and the nearest pixel in it. Otherwise SimpleITK resamples (the same answer)."""
    if source.same_grid(target, tol=1e-5) and "slice_positions_mm" not in source.meta.extra \
            and "slice_positions_mm" not in target.meta.extra:
        return np.asarray(source.array).copy()
    if "slice_positions_mm" not in source.meta.extra and "slice_positions_mm" not in target.meta.extra:
        return resample_to(source, target, "nearest", 0).array
    d0, d1 = source.direction[:, 0], source.direction[:, 1]
    normal = np.cross(d0, d1)
    normal /= np.linalg.norm(normal)
    origins = slice_origins(source)
    offsets = origins @ normal
    order = np.argsort(offsets)
    sorted_offsets = offsets[order]
    steps = np.diff(sorted_offsets)
    # a point belongs to its nearest plane; past the first and last plane, half that end's step at most
    first_half = (float(steps[0]) if steps.size else float(source.spacing_mm[2])) / 2.0
    last_half = (float(steps[-1]) if steps.size else float(source.spacing_mm[2])) / 2.0
    low, high = sorted_offsets[0] - first_half - 1e-6, sorted_offsets[-1] + last_half + 1e-6
    sx, sy = source.spacing_mm[0], source.spacing_mm[1]
    nz, ny, nx = source.shape_zyx
    out = np.zeros(target.shape_zyx, dtype=source.array.dtype)
    tz, ty, tx = target.shape_zyx
    jj, ii = np.meshgrid(np.arange(ty, dtype=np.float64), np.arange(tx, dtype=np.float64), indexing="ij")
    in_plane = (np.multiply.outer(ii * target.spacing_mm[0], target.direction[:, 0])
                + np.multiply.outer(jj * target.spacing_mm[1], target.direction[:, 1]))  # (ty, tx, 3)
    for k, origin in enumerate(slice_origins(target)):
        points = in_plane + origin
        along = points @ normal
        if len(order) == 1:
            pick = np.zeros(along.shape, dtype=np.int64)
        else:
            after = np.clip(np.searchsorted(sorted_offsets, along), 1, len(order) - 1)
            pick = np.where(along - sorted_offsets[after - 1] <= sorted_offsets[after] - along, after - 1, after)
        plane = order[pick]
        inside = (along >= low) & (along <= high)
        relative = points - origins[plane]
        u = np.rint(relative @ d0 / sx).astype(np.int64)
        v = np.rint(relative @ d1 / sy).astype(np.int64)
        inside &= (u >= 0) & (u < nx) & (v >= 0) & (v < ny)
        if inside.any():
            out[k][inside] = source.array[plane[inside], v[inside], u[inside]]
    return out
