"""Put an irregular slice stack onto a regular, axis-aligned grid.

Like 3D Slicer's acquisition-geometry regularization: the output grid keeps the
acquired image planes' row and column directions, and its third axis is the slice
normal (so a gantry-tilted, sheared stack becomes an orthogonal grid). Its slice step is
the typical spacing, so missing slices and variable spacing become regular too. Each
output plane is linearly interpolated between the two acquired planes around it, and
each acquired plane is shifted in-plane by its shear offset (bilinear). The in-plane
field of view grows to hold every acquired plane; uncovered voxels get ``fill``.
"""

from __future__ import annotations

import numpy as np

from medseg.io.dicom_geometry import StackGeometry


def regularize_stack(stack: np.ndarray, geometry: StackGeometry) -> tuple[np.ndarray, tuple, tuple, dict]:
    """(array, spacing_mm (x,y,z), origin_mm, details) of the regular grid."""
    positions = np.array([s.position for s in geometry.slices], dtype=np.float64)
    sx, sy, dz = geometry.spacing_mm
    relative = positions - positions[0]
    offset_u = relative @ geometry.row  # in-plane shift of each plane, mm
    offset_v = relative @ geometry.col
    along = geometry.along_normal - geometry.along_normal[0]

    n_rows, n_cols = stack.shape[1:]
    u_min, u_max = offset_u.min(), offset_u.max() + (n_cols - 1) * sx
    v_min, v_max = offset_v.min(), offset_v.max() + (n_rows - 1) * sy
    out_cols = int(round((u_max - u_min) / sx)) + 1
    out_rows = int(round((v_max - v_min) / sy)) + 1
    n_out = int(round(along[-1] / dz)) + 1
    fill = float(stack.min()) if stack.size else 0.0

    def plane(index: int) -> np.ndarray:
        shift = ((v_min - offset_v[index]) / sy, (u_min - offset_u[index]) / sx)
        source = stack[index].astype(np.float32)
        if abs(shift[0]) < 1e-3 and abs(shift[1]) < 1e-3 and (out_rows, out_cols) == (n_rows, n_cols):
            return source
        from scipy import ndimage  # here: only tilted or shifted stacks need it; its import is 0.2 s of a first load

        return ndimage.affine_transform(source, np.eye(2), offset=shift, output_shape=(out_rows, out_cols),
                                        order=1, mode="constant", cval=fill)

    cache: dict[int, np.ndarray] = {}

    def cached(index: int) -> np.ndarray:
        if index not in cache:
            for old in [k for k in cache if k < index - 1]:
                del cache[old]  # planes are visited in order: keep memory to two planes
            cache[index] = plane(index)
        return cache[index]

    out = np.empty((n_out, out_rows, out_cols), dtype=np.float32)
    for k in range(n_out):
        z = min(k * dz, along[-1])
        upper = int(np.searchsorted(along, z, side="left"))
        if upper == 0 or abs(along[min(upper, len(along) - 1)] - z) < 1e-6:
            out[k] = cached(min(upper, len(along) - 1))
            continue
        lower = upper - 1
        weight = (z - along[lower]) / (along[upper] - along[lower])
        out[k] = (1.0 - weight) * cached(lower) + weight * cached(upper)

    if np.issubdtype(stack.dtype, np.integer):
        info = np.iinfo(stack.dtype)
        out = np.clip(np.rint(out), info.min, info.max).astype(stack.dtype)
    origin = positions[0] + geometry.row * u_min + geometry.col * v_min
    details = {
        "raw_size_xyz": [int(n_cols), int(n_rows), int(stack.shape[0])],
        "size_xyz": [out_cols, out_rows, n_out],
        "slice_step_mm": round(float(dz), 4),
        "tilt_deg": round(float(geometry.tilt_degrees), 3),
        "method": "linear between acquired planes, bilinear in-plane shear shift",
    }
    return out, (sx, sy, dz), tuple(float(v) for v in origin), details
