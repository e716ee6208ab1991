"""A 117-structure label map from TotalSegmentator's real output (tests and benchmarks share it).

``../shared/data/ct/totalsegmentator/example_seg*.nii.gz`` are TotalSegmentator's own result on
its example CT and carry 41 (and 31) of the 117 ``total`` labels. :func:`all_117` gives every
missing value a real piece of anatomy: again and again the largest region is cut in two at the
median plane of its longest axis and its far half takes the next missing value. Every label of
the result is a connected-ish chunk of a real structure, on the real CT grid, and all 117 values
are present — which is what the label table, the SEG, the surfaces and the statistics meet.
"""

from __future__ import annotations

import numpy as np

TOTAL_LABELS = 117


def all_117(labels: np.ndarray, count: int = TOTAL_LABELS) -> np.ndarray:
    """``labels`` (z, y, x) with every value 1..count present: missing values are split off the largest."""
    out = np.asarray(labels).astype(np.uint8, copy=True)
    present = set(int(v) for v in np.unique(out)) - {0}
    missing = [v for v in range(1, count + 1) if v not in present]
    if not present:
        raise ValueError("the label map is empty")
    from scipy import ndimage

    boxes = {v: box for v, box in enumerate(ndimage.find_objects(out), start=1) if box is not None}
    sizes = {v: int(np.count_nonzero(out[boxes[v]] == v)) for v in present}
    for value in missing:
        largest = max(sizes, key=lambda v: (sizes[v], -v))
        box = boxes[largest]
        offset = np.array([s.start for s in box])
        points = np.argwhere(out[box] == largest) + offset
        spans = points.max(axis=0) - points.min(axis=0)
        axis = int(np.argmax(spans))
        cut = np.median(points[:, axis])
        split = points[:, axis] > cut
        if not split.any() or split.all():
            split = np.arange(len(points)) >= len(points) // 2
        far, near = points[split], points[~split]
        out[tuple(far.T)] = value
        sizes[value], sizes[largest] = len(far), len(near)
        boxes[value] = _box(far)
        boxes[largest] = _box(near)
    return out


def _box(points: np.ndarray) -> tuple[slice, ...]:
    return tuple(slice(int(lo), int(hi) + 1) for lo, hi in zip(points.min(axis=0), points.max(axis=0)))
