"""Label arrays without a full-volume copy: which values are present, and renumbering by a lookup table.

``np.unique`` sorts every voxel and fancy indexing over the whole volume makes an 8-byte
index per voxel: both cost seconds and gigabytes on a large CT, so both go slice by slice.
"""

from __future__ import annotations

import numpy as np


def label_values(array: np.ndarray) -> list[int]:
    """The non-zero values present in a label array, counted slice by slice."""
    array = np.asarray(array)
    if array.dtype.kind not in "ui" or array.dtype.itemsize > 2 or array.ndim == 0:
        return [int(v) for v in np.unique(array) if v != 0]
    counts = np.zeros(int(array.max(initial=0)) + 1, dtype=np.int64)
    for plane in array.reshape(array.shape[0], -1) if array.ndim > 1 else [array]:
        found = np.bincount(plane, minlength=counts.size)
        counts += found[: counts.size]
    return [int(v) for v in np.nonzero(counts)[0] if v != 0]


def remap_values(array: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``lut[array]`` slice by slice, or ``array`` itself when ``lut`` is the identity."""
    if np.array_equal(lut, np.arange(lut.size)) and array.dtype == lut.dtype:
        return array
    out = np.empty(array.shape, dtype=lut.dtype)
    for k in range(array.shape[0]):
        out[k] = lut[array[k]]
    return out
