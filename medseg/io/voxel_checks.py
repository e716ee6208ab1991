"""What every loaded image must satisfy before a number is computed from it, whatever its format.

- Voxels are numbers: a NaN in a float NRRD blanked its whole slice in the segmentation
  (the network's normalisation spreads it over the tile), with no word. Non-finite voxels
  are set to the image's lowest value (air in a CT) and a finding says how many and where.
- The spacing is plausible: a header spacing of 1e-30 mm gave 0 ml, one of 1e30 mm a
  traceback, and a series at 100 mm planned 36 504 tiles. Spacing outside
  :data:`SANE_SPACING_MM` is refused with the file named, unless the user gives the
  spacing (``--spacing`` on the command line), which a finding then records.
- One rule for a spacing the header does not give usably, in every format and interface: a
  header that states none is read as 1 mm with a finding (``no_pixel_spacing``); one that states
  0, a negative number, NaN or infinity (an ``unusable_spacing`` finding of the DICOM scan, or
  the image reader's own check) is refused unless the user gives the true spacing.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import numpy as np

from medseg.core.volume import GeometryFinding, Volume
from medseg.errors import GeometryError

SANE_SPACING_MM = (0.05, 50.0)  # finer than any CT detector, coarser than any CT slice
# The way out of a refused spacing, from the command line and from the window alike.
SPACING_HINT = ("if you know the true spacing, give it with --spacing X Y Z (mm); for the window, make a copy with "
                "`medseg convert IN OUT.nii.gz --spacing X Y Z` and open that")


def replace_non_finite(volume: Volume) -> int:
    """Set NaN/inf voxels to the lowest finite value, in place, with a finding; returns how many.

    An image with no number at all is refused."""
    array = volume.array
    if array.dtype.kind != "f":
        return 0
    bad_slices: list[int] = []
    count = 0
    lowest = np.inf
    for z in range(array.shape[0]):  # slice by slice: no volume-sized temporary
        finite = np.isfinite(array[z])
        if not finite.all():
            bad_slices.append(z)
            count += int(finite.size - np.count_nonzero(finite))
        if finite.any():
            lowest = min(lowest, float(array[z][finite].min()))
    if not count:
        return 0
    if not np.isfinite(lowest):
        raise GeometryError("every voxel of the image is NaN or infinite", path=_source(volume))
    plane_size = array.shape[1] * array.shape[2]
    whole = [z for z in bad_slices if not np.isfinite(array[z]).any()] if count >= plane_size else []
    for z in bad_slices:
        plane = array[z]
        plane[~np.isfinite(plane)] = lowest
    # slices counted from 1 in the message, as the viewer shows them (0-based in the details)
    shown = ", ".join(str(z + 1) for z in bad_slices[:10]) + (" ..." if len(bad_slices) > 10 else "")
    message = (f"{count} voxel{'s were' if count != 1 else ' was'} not a number (NaN or infinite) in slice"
               f"{'s' if len(bad_slices) != 1 else ''} {shown}; set to {lowest:g}, the image's lowest value.")
    if whole:
        listed = ", ".join(str(z + 1) for z in whole[:10]) + (" ..." if len(whole) > 10 else "")
        message += (f" {len(whole)} of the {array.shape[0]} slices ({listed}) hold no number at all: nothing can be "
                    "found there, and volumes across them are too small.")
    volume.meta.findings.append(GeometryFinding(
        "non_finite_voxels", message,
        {"count": count, "slices": bad_slices[:1000], "whole_slices": whole[:1000], "replaced_by": lowest}))
    return count


def check_spacing(volume: Volume, override_mm: Sequence[float] | None = None) -> Volume:
    """Refuse an implausible spacing, or apply the user's (x, y, z) spacing with a finding."""
    if override_mm is not None:
        values = check_override(override_mm)
        stated = volume.meta.extra.pop("header_spacing_mm", None) or list(volume.spacing_mm)
        volume.meta.findings[:] = [f for f in volume.meta.findings if f.kind not in ("unusable_spacing",
                                                                                     "no_pixel_spacing")]
        volume.meta.findings.append(GeometryFinding(
            "spacing_override", f"Voxel spacing set by the user to {_mm(values)} mm (the file says "
                                f"{_mm(stated)} mm).", {"file_spacing_mm": list(stated)}))
        volume.spacing_mm = values  # type: ignore[assignment]
        return volume
    low, high = SANE_SPACING_MM
    odd = [v for v in volume.spacing_mm if not (np.isfinite(v) and low <= v <= high)]
    if odd:
        raise GeometryError(
            f"the voxel spacing {_mm(volume.spacing_mm)} mm is outside the range of any CT "
            f"({low}–{high:g} mm per axis); volumes and the segmentation would be wrong", path=_source(volume),
            hint=SPACING_HINT)
    return volume


def check_override(override_mm: Sequence[float]) -> tuple[float, float, float]:
    """The user's spacing (x, y, z): three numbers inside :data:`SANE_SPACING_MM`, else a clear error."""
    values = tuple(float(v) for v in override_mm)
    low, high = SANE_SPACING_MM
    if len(values) != 3 or not all(np.isfinite(v) and low <= v <= high for v in values):
        raise GeometryError(f"--spacing needs three numbers of {low}–{high:g} mm (x y z), got "
                            f"{' '.join(f'{v:g}' for v in values)}")
    return values  # type: ignore[return-value]


def refuse_unusable_spacing(findings: Sequence[GeometryFinding], path: str | os.PathLike | None) -> None:
    """Refuse a series whose scan found a stated but unusable spacing (0, negative, NaN), unless given."""
    for finding in findings:
        if finding.kind == "unusable_spacing":
            raise GeometryError(finding.message[:1].lower() + finding.message[1:].rstrip("."), path=path,
                                hint=SPACING_HINT)


def _mm(values: Sequence[float]) -> str:
    return " x ".join(f"{v:.6g}" for v in values)


def _source(volume: Volume) -> str | os.PathLike | None:
    files = volume.meta.source_files
    if not files:
        return None
    return files[0] if len(files) == 1 else os.path.dirname(str(files[0])) or files[0]
