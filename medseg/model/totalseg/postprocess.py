"""The label clean-ups TotalSegmentator 2.18.0 applies after its networks, for the tasks that have them.

All work on nibabel-ordered (x, y, z) label arrays, as TotalSegmentator's do (the vertebra ordering
uses the z of each body's centre; the dilations use the x, y, z voxel sizes), with scipy.ndimage's
default (face) connectivity:

* ``remove_values``: a task's auxiliary labels (``<task>_auxiliary``: e.g. appendicular_bones' humerus,
  femur, liver and spleen, predicted to help the network, not reported) set to background;
* ``body``: the largest connected body_trunc kept, body_extremities blobs under 50 000 mm3 removed
  (TotalSegmentator's ``body`` task, at network resolution);
* ``vertebrae_pp``: when two vertebra labels touch, each connected body (of at least 100 mm3) is
  relabelled in anatomical order (from the bottom, or from C1 down when L5 is absent and C1 present),
  then every vertebra is dilated by 3 mm into the background (undoing the training labels' erosion);
* ``refine_with_mask``: vertebrae_pp_refined: the vertebrae dilated by 2 mm and kept inside the
  vertebrae_body network's vertebral bodies;
* ``remove_outside``: heartchambers_highres: labels outside the crop run's heart/aorta/IVC, dilated by
  ``int(mm / mean voxel size)`` iterations, removed.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

import numpy as np
from scipy import ndimage


def remove_values(labels: np.ndarray, values: Sequence[int]) -> np.ndarray:
    if len(values):
        labels[np.isin(labels, list(values))] = 0
    return labels


def _keep_largest(mask: np.ndarray) -> np.ndarray:
    components, count = ndimage.label(mask)
    if count == 0:
        return mask
    sizes = np.bincount(components.ravel())[1:]
    return components == int(np.argmax(sizes)) + 1  # the first of equally large ones, as TotalSegmentator


def _without_small_blobs(mask: np.ndarray, low: float, high: float) -> np.ndarray:
    components, _ = ndimage.label(mask)
    sizes = np.bincount(components.ravel())
    if len(sizes) <= 1:
        return mask
    drop = np.flatnonzero((sizes <= low) | (sizes > high))
    components[np.isin(components, drop)] = 0
    return components > 0


def body(labels: np.ndarray, names: Mapping[int, str], settings: Mapping[str, Any],
         zooms_xyz: np.ndarray) -> np.ndarray:
    by_name = {name: value for value, name in names.items()}
    for name in settings["keep_largest"]:
        value = by_name[name]
        mask = labels == value
        kept = _keep_largest(mask)
        labels[mask] = 0
        labels[kept] = value
    voxel_volume = np.prod(np.asarray(zooms_xyz, dtype=np.float32))
    for name in settings["remove_small_blobs"]:
        value = by_name[name]
        mask = labels == value
        kept = _without_small_blobs(mask, settings["min_blob_mm3"] / voxel_volume, 1e10)
        labels[mask] = 0
        labels[kept] = value
    return labels


def _labels_touch(labels: np.ndarray) -> bool:
    for axis in range(labels.ndim):
        a = np.take(labels, np.arange(1, labels.shape[axis]), axis=axis)
        b = np.take(labels, np.arange(0, labels.shape[axis] - 1), axis=axis)
        if np.any((a > 0) & (b > 0) & (a != b)):
            return True
    return False


def _ellipsoid(zooms_xyz: Sequence[Any], radius_mm: Any) -> np.ndarray:
    if radius_mm <= 0:
        return np.ones((1, 1, 1), dtype=bool)
    radii = [radius_mm / zoom for zoom in zooms_xyz]
    grids = np.ogrid[-radii[0]:radii[0] + 1, -radii[1]:radii[1] + 1, -radii[2]:radii[2] + 1]
    return sum((grid * grid) / (radius * radius) for grid, radius in zip(grids, radii)) <= 1


def dilate_each(labels: np.ndarray, values: Sequence[int], zooms_xyz: Sequence[Any], radius_mm: Any) -> np.ndarray:
    """Each value dilated (in the order given) into what is still background."""
    if radius_mm <= 0:
        return labels
    structure = _ellipsoid(zooms_xyz, radius_mm)
    reach = np.ceil([radius_mm / zoom for zoom in zooms_xyz]).astype(int)
    out = labels.copy()
    for value in sorted(values):
        where = np.nonzero(labels == value)
        if len(where[0]) == 0:
            continue
        box = tuple(slice(max(int(c.min()) - r, 0), min(int(c.max()) + r + 1, labels.shape[axis]))
                    for axis, (c, r) in enumerate(zip(where, reach)))
        grown = ndimage.binary_dilation(labels[box] == value, structure=structure)
        target = out[box]
        target[(target == 0) & grown] = value
    return out


def vertebrae_pp(labels: np.ndarray, names: Mapping[int, str], settings: Mapping[str, Any],
                 zooms_xyz: np.ndarray) -> np.ndarray:
    zooms = tuple(np.asarray(zooms_xyz, dtype=np.float32))
    labels = labels.astype(np.uint8, copy=False)
    values = sorted(names)
    if not _labels_touch(labels):
        return dilate_each(labels, values, zooms, settings["dilation_mm"])
    components, _ = ndimage.label(labels > 0)
    sizes = np.bincount(components.ravel())
    voxel_volume = np.prod(np.asarray(zooms_xyz, dtype=np.float32))
    kept = np.flatnonzero(sizes * voxel_volume >= settings["min_size_mm3"])
    kept = kept[kept != 0]
    if len(kept) == 0:
        return np.zeros_like(labels)
    lookup = np.zeros(sizes.shape, dtype=bool)
    lookup[kept] = True
    keep_mask = lookup[components]
    cleaned = labels.copy()
    cleaned[~keep_mask] = 0
    present = sorted(int(v) for v in np.unique(cleaned) if int(v) in names)
    if not present:
        return np.zeros_like(labels)
    by_name = {name: value for value, name in names.items()}
    c1, l5 = by_name["vertebrae_C1"], by_name["vertebrae_L5"]
    from_top = l5 not in present and c1 in present
    centres = ndimage.center_of_mass(keep_mask, components, kept)
    order = sorted(zip(kept, (c[2] for c in centres)), key=lambda item: item[1], reverse=from_top)
    targets = range(c1, max(names) + 1) if from_top else range(max(present), min(names) - 1, -1)
    out = np.zeros_like(labels)
    for (component, _z), value in zip(order, targets):
        out[components == component] = value
    return dilate_each(out, values, zooms, settings["dilation_mm"])


def refine_with_mask(labels: np.ndarray, mask_labels: np.ndarray, names: Mapping[int, str], keep_value: int,
                     zooms_xyz: np.ndarray, dilation_mm: Any) -> np.ndarray:
    refined = dilate_each(labels, sorted(names), tuple(np.asarray(zooms_xyz, dtype=np.float32)), dilation_mm)
    refined[mask_labels != keep_value] = 0
    return refined.astype(np.uint8, copy=False)


def remove_outside(labels: np.ndarray, mask: np.ndarray, iterations: int) -> np.ndarray:
    grown = ndimage.binary_dilation(mask, iterations=iterations)
    labels[~grown] = 0
    return labels
