"""Islands of one label (26-connected): keep the largest, remove those under N ml, keep the one clicked."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import erase_mask, label_box, require_label
from medseg.errors import MedsegError

FULL = np.ones((3, 3, 3), dtype=bool)  # 26-connectivity


def components(label_map: LabelMap, value: int):
    """(corner, component ids, sizes) of ``value``'s 26-connected islands in its bounding box."""
    from scipy import ndimage

    box = label_box(label_map, value)
    if box is None:
        return None
    block = label_map.array[box_slices(box)] == value
    ids, count = ndimage.label(block, structure=FULL)
    sizes = np.bincount(ids.ravel(), minlength=count + 1)
    sizes[0] = 0
    return box[0], ids, sizes


def _remove(label_map: LabelMap, value: int, corner, ids: np.ndarray, removed: np.ndarray) -> Delta | None:
    if not removed.any():
        return None
    mask = removed[ids]
    return erase_mask(label_map, corner, mask, only_value=value)


def keep_largest(label_map: LabelMap, value: int) -> Delta | None:
    """Remove every island of ``value`` but the largest (nnU-Net's keep-largest-component)."""
    require_label(label_map, value)
    found = components(label_map, value)
    if found is None:
        return None
    corner, ids, sizes = found
    removed = np.ones(sizes.size, dtype=bool)
    removed[0] = False
    removed[int(np.argmax(sizes))] = False
    return _remove(label_map, value, corner, ids, removed)


def remove_smaller(label_map: LabelMap, value: int, min_ml: float) -> Delta | None:
    """Remove the islands of ``value`` smaller than ``min_ml`` millilitres."""
    require_label(label_map, value)
    if min_ml < 0:
        raise MedsegError(f"the island size must not be negative, got {min_ml} ml")
    found = components(label_map, value)
    if found is None:
        return None
    corner, ids, sizes = found
    removed = sizes * label_map.voxel_volume_ml < min_ml
    removed[0] = False
    return _remove(label_map, value, corner, ids, removed)


def keep_clicked(label_map: LabelMap, seed_zyx: Sequence[int]) -> Delta | None:
    """Keep only the island under ``seed_zyx`` of the label found there."""
    seed = tuple(int(v) for v in seed_zyx)
    value = int(label_map.array[seed])
    if value == 0:
        raise MedsegError("click on a labelled voxel to keep its island")
    require_label(label_map, value)
    corner, ids, sizes = components(label_map, value)  # type: ignore[misc]
    kept = int(ids[tuple(s - c for s, c in zip(seed, corner))])
    removed = np.ones(sizes.size, dtype=bool)
    removed[0] = False
    removed[kept] = False
    return _remove(label_map, value, corner, ids, removed)
