"""Resample a Volume onto another Volume's grid (SimpleITK's ResampleImageFilter)."""

from __future__ import annotations

import dataclasses

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
