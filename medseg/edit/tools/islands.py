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
    """(corner, island ids, sizes, the ITK image holding the ids) of ``value``'s 26-connected islands in its bounding box.

    ITK's connected components (multi-threaded, through SimpleITK) relabelled by size, so
    island 1 is the largest; ``sizes[i]`` is island i's voxel count (``sizes[0]`` = 0).
    """
    import SimpleITK as sitk

    box = label_box(label_map, value)
    if box is None:
        return None
    block = (label_map.array[box_slices(box)] == value).view(np.uint8)
    islands = sitk.ConnectedComponent(sitk.GetImageFromArray(block), True)  # fully connected: 26 neighbours
    relabel = sitk.RelabelComponentImageFilter()
    ordered = relabel.Execute(islands)
    sizes = np.array([0, *relabel.GetSizeOfObjectsInPixels()], dtype=np.int64)
    return box[0], sitk.GetArrayViewFromImage(ordered), sizes, ordered  # the view's memory is the image's: keep it


def _remove(label_map: LabelMap, value: int, corner, ids: np.ndarray, removed: np.ndarray) -> Delta | None:
    if not removed.any():
        return None
    first = int(np.argmax(removed))
    if removed[first:].all():  # islands are ordered by size: removing "all from the k-th on" is one comparison
        mask = ids >= first
    else:
        mask = removed[ids]
    return erase_mask(label_map, corner, mask, only_value=value)


def keep_largest(label_map: LabelMap, value: int) -> Delta | None:
    """Remove every island of ``value`` but the largest (nnU-Net's keep-largest-component)."""
    require_label(label_map, value)
    found = components(label_map, value)
    if found is None:
        return None
    corner, ids, sizes, _image = found
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
    corner, ids, sizes, _image = found
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
    corner, ids, sizes, _image = components(label_map, value)
    kept = int(ids[tuple(s - c for s, c in zip(seed, corner))])
    removed = np.ones(sizes.size, dtype=bool)
    removed[0] = False
    removed[kept] = False
    return _remove(label_map, value, corner, ids, removed)
