"""What a tool may overwrite: never a locked label; optionally only background; only inside an HU range.

Every tool ends in :func:`paint_mask` (or :func:`erase_mask`), so these rules hold for all.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE, label_dtype
from medseg.core.volume import Volume
from medseg.edit.delta import Box, Delta, box_of, box_slices
from medseg.edit.label_map import LabelMap
from medseg.errors import MedsegError

OVERWRITE_MODES = ("unlocked", "background")


class LockedLabelError(MedsegError):
    """The tool would change a locked label."""


@dataclass(frozen=True)
class PaintRules:
    """``hu_range``: paint only where low ≤ HU ≤ high. ``overwrite``: "unlocked" (any label that is
    not locked) or "background" (only unlabelled voxels)."""

    hu_range: tuple[float, float] | None = None
    overwrite: str = "unlocked"

    def __post_init__(self) -> None:
        if self.overwrite not in OVERWRITE_MODES:
            raise MedsegError(f"overwrite must be one of {', '.join(OVERWRITE_MODES)}, not {self.overwrite!r}")
        if self.hu_range is not None and self.hu_range[0] > self.hu_range[1]:
            raise MedsegError(f"the HU range {self.hu_range[0]:g}…{self.hu_range[1]:g} is empty (low > high)")


def writable(label_map: LabelMap, before: np.ndarray, rules: PaintRules, value: int) -> np.ndarray | None:
    """Voxels of ``before`` (a block of the label map) that a paint with ``value`` may change; None: all."""
    ok = None
    if rules.overwrite == "background":
        ok = (before == 0) | (before == value)
    locked = label_map.locked_values() - {value}
    if locked:
        free = ~np.isin(before, list(locked)) if len(locked) > 1 else before != next(iter(locked))
        ok = free if ok is None else ok & free
    return ok


def hu_mask(image: Volume | None, sl: tuple[slice, ...], rules: PaintRules) -> np.ndarray | None:
    if rules.hu_range is None:
        return None
    if image is None:
        raise MedsegError("an HU range needs the image; none was given")
    hu = image.array[sl]
    low, high = rules.hu_range
    return (hu >= low) & (hu <= high)


def _crop(lo, mask: np.ndarray):
    """Shrink ``mask`` (corner ``lo``) to the box of its True voxels: later steps then touch only that."""
    inner = box_of(mask)
    if inner is None:
        return None
    lo = tuple(a + b for a, b in zip(lo, inner[0]))
    mask = mask[box_slices(inner)]
    return lo, mask, box_slices((lo, tuple(a + n for a, n in zip(lo, mask.shape))))


def paint_mask(label_map: LabelMap, lo: tuple[int, int, int], mask: np.ndarray, value: int,
               rules: PaintRules = PaintRules(), image: Volume | None = None) -> Delta | None:
    """Set ``value`` on the voxels of ``mask`` (a block with corner ``lo``) that the rules allow."""
    cropped = _crop(lo, mask)
    if cropped is None:
        return None
    lo, mask, sl = cropped
    before = label_map.array[sl]
    region = mask & (before != value)
    for limit in (writable(label_map, before, rules, value), hu_mask(image, sl, rules)):
        if limit is not None:
            region &= limit
    dtype = np.promote_types(before.dtype, label_dtype(int(value)))
    return _delta(lo, before, region, value, dtype)


def erase_mask(label_map: LabelMap, lo: tuple[int, int, int], mask: np.ndarray, only_value: int | None = None,
               rules: PaintRules = PaintRules(), image: Volume | None = None) -> Delta | None:
    """Set background on ``mask``'s voxels, sparing locked labels (and other labels when ``only_value``)."""
    cropped = _crop(lo, mask)
    if cropped is None:
        return None
    lo, mask, sl = cropped
    before = label_map.array[sl]
    region = mask & (before != 0) if only_value is None else mask & (before == only_value)
    for limit in (writable(label_map, before, PaintRules(), 0), hu_mask(image, sl, rules)):
        if limit is not None:
            region &= limit
    return _delta(lo, before, region, 0, before.dtype)


def _delta(lo, before: np.ndarray, region: np.ndarray, value: int, dtype) -> Delta | None:
    inner = box_of(region)
    if inner is None:
        return None
    sl = box_slices(inner)
    changed = region[sl]
    old = before[sl][changed].astype(dtype, copy=False)
    new = np.full(old.shape, value, dtype=dtype)
    box = (tuple(a + b for a, b in zip(lo, inner[0])), tuple(a + b for a, b in zip(lo, inner[1])))
    return Delta.from_mask(box, changed, old, new)


def label_box(label_map: LabelMap, value: int, pad_voxels=(0, 0, 0)) -> Box | None:
    """The bounding box of ``value`` grown by ``pad_voxels`` (z, y, x), clipped to the map."""
    from scipy import ndimage

    if label_map.voxel_count(value) == 0:
        return None
    objects = ndimage.find_objects((label_map.array == value).view(np.uint8))
    found = objects[0] if objects else None
    if found is None:
        return None
    shape = label_map.shape_zyx
    lo = tuple(max(0, s.start - p) for s, p in zip(found, pad_voxels))
    hi = tuple(min(n, s.stop + p) for s, n, p in zip(found, shape, pad_voxels))
    return (lo, hi)


def require_label(label_map: LabelMap, value: int, *, unlocked: bool = True) -> None:
    if value <= 0:
        raise MedsegError(f"label {value} is not a label (background is 0; labels are 1…{MAX_LABEL_VALUE})")
    if unlocked and value in label_map.labels and label_map.labels[value].locked:
        raise LockedLabelError(f"label {value} ({label_map.labels[value].name}) is locked; unlock it to change it")
