"""NIfTI files ITK cannot read: NIfTI-2 (SimpleITK refuses it: "Unable to determine ImageIO"), and a
NIfTI-1 whose voxel spacing is unusable (0, NaN, infinite, negative) when the user gives the true one.

The voxels are read with nibabel (the NIfTI reference library in Python); the geometry is made here
from the header's fields, in ITK's conventions so that the Volume is the one ITK would give for the
same header: the sform when its code is set, else the qform, else the axes as stored; RAS to LPS.
An axis whose direction the header cannot give (a zero or NaN sform column) is taken from the qform,
else made perpendicular to the other two, and a finding says so.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from medseg.core.volume import GeometryFinding, Volume, VolumeMeta
from medseg.errors import ImageFormatError
from medseg.io.header_facts import ImageHeader
from medseg.io.memory_budget import check_allocation

RAS_TO_LPS = np.diag([-1.0, -1.0, 1.0])


def read_nifti(path: Path, header: ImageHeader, meta: VolumeMeta, spacing_mm: Sequence[float] | None) -> Volume:
    """The Volume of a NIfTI-1/2 file (``spacing_mm``, x y z: the spacing to use instead of the header's)."""
    import nibabel

    check_allocation(3 * header.voxel_bytes, f"reading an image of {header.voxel_bytes / 2**30:.1f} GiB", path)
    from nibabel.imageglobals import LoggingOutputSuppressor

    try:
        # nibabel warns (and logs to the terminal) about the pixdim this reader is here for
        with warnings.catch_warnings(), LoggingOutputSuppressor():
            warnings.simplefilter("ignore")
            image = nibabel.load(str(path))
            stored = np.asanyarray(image.dataobj.get_unscaled())
    except Exception as error:  # nibabel raises many types on a damaged file
        raise ImageFormatError(f"cannot read the image ({type(error).__name__}: {error})"[:300], path=path,
                               hint="the file may be truncated or corrupt") from error
    fields = header.nifti
    assert fields is not None
    array = stored.reshape(stored.shape[:3] if stored.ndim >= 3 else stored.shape + (1,) * (3 - stored.ndim))
    array = np.ascontiguousarray(array.T).astype(array.dtype.newbyteorder("="), copy=False)
    slope, inter = fields["scl_slope"], fields["scl_inter"]
    if slope and math.isfinite(slope) and (slope != 1 or inter != 0):
        array = array.astype(np.float32) * np.float32(slope) + np.float32(inter)
    try:
        spacing, direction, origin, findings = nifti_geometry(fields, spacing_mm)
    except ImageFormatError as error:
        raise ImageFormatError(error.message, path=path, hint=error.hint) from error
    meta.findings.extend(findings)
    return Volume(array, spacing, origin, direction, meta)


def nifti_geometry(fields: dict, spacing_mm: Sequence[float] | None = None
                   ) -> tuple[tuple[float, float, float], np.ndarray, tuple[float, float, float], list[GeometryFinding]]:
    """(spacing x y z, LPS direction columns, LPS origin, findings) from a NIfTI header's fields."""
    n = max(2, min(3, fields["dims"][0]))
    pixdim = [float(v) for v in fields["pixdim"][1:n + 1]] + [1.0] * (3 - n)
    spacing = [float(v) for v in spacing_mm] if spacing_mm is not None else pixdim
    findings: list[GeometryFinding] = []
    columns: list[np.ndarray | None] = [None, None, None]
    origin = np.zeros(3)
    quaternion = _qform_rotation(fields) if fields["qform_code"] > 0 else None
    if fields["sform_code"] > 0:
        srow = np.asarray(fields["srow"], dtype=np.float64).reshape(3, 4)
        origin = srow[:, 3]
        for axis in range(3):
            column = srow[:, axis]
            length = float(np.linalg.norm(column))
            if math.isfinite(length) and length > 0:
                columns[axis] = column / length
                if spacing_mm is None:
                    spacing[axis] = length
    elif quaternion is not None:
        columns = [quaternion[:, axis] for axis in range(3)]
        origin = np.asarray(fields["quatern"][3:6], dtype=np.float64)
    elif fields["qform_code"] > 0:  # a qform that is not a number: ITK's reading, NIfTI's axes at the qform's offset
        columns = [np.eye(3)[:, axis] for axis in range(3)]  # (the reader adds the orientation_unusable finding)
        origin = np.asarray(fields["quatern"][3:6], dtype=np.float64)
    else:  # no transform: ITK's reading (the axes as stored, at the origin)
        return tuple(spacing), np.eye(3), (0.0, 0.0, 0.0), findings  # type: ignore[return-value]
    missing = [axis for axis in range(3) if columns[axis] is None]
    if missing:
        how = "the qform's rotation" if quaternion is not None else "perpendicular to the other axes"
        for axis in missing:
            if quaternion is not None:
                columns[axis] = quaternion[:, axis]
        for axis in [a for a in missing if columns[a] is None]:
            others = [columns[a] for a in range(3) if a != axis and columns[a] is not None]
            columns[axis] = np.cross(*others) if len(others) == 2 else np.eye(3)[:, axis]
            if axis == 1:
                columns[axis] = -columns[axis]  # y = z x x keeps the axes right-handed
        findings.append(GeometryFinding(
            "orientation_assumed", f"The header's sform gives no direction for the {', '.join('xyz'[a] for a in missing)} "
                                   f"axis; it is taken {how}. Check the image's orientation.",
            {"axes": ["xyz"[a] for a in missing], "source": how}))
    direction_ras = np.column_stack(columns)
    if not np.all(np.isfinite(direction_ras)) or not np.all(np.isfinite(origin)) \
            or abs(abs(np.linalg.det(direction_ras)) - 1) > 1e-3:
        raise ImageFormatError("the header's orientation (sform/qform) is not a rotation: the image cannot be placed "
                               "in patient space", hint="the header is corrupt")
    return (tuple(spacing), RAS_TO_LPS @ direction_ras,  # type: ignore[return-value]
            tuple(float(v) for v in RAS_TO_LPS @ origin), findings)


def _qform_rotation(fields: dict) -> np.ndarray | None:
    b, c, d = (float(v) for v in fields["quatern"][:3])
    if not all(map(math.isfinite, (b, c, d))):
        return None
    a = 1.0 - (b * b + c * c + d * d)
    a = math.sqrt(a) if a > 0 else 0.0
    rotation = np.array([[a * a + b * b - c * c - d * d, 2 * (b * c - a * d), 2 * (b * d + a * c)],
                         [2 * (b * c + a * d), a * a + c * c - b * b - d * d, 2 * (c * d - a * b)],
                         [2 * (b * d - a * c), 2 * (c * d + a * b), a * a + d * d - c * c - b * b]])
    qfac = -1.0 if float(fields["pixdim"][0]) < 0 else 1.0
    rotation[:, 2] *= qfac
    return rotation
