"""Flood fill (2D on the view's plane or 3D) from a seed, within an HU range or within the seed's label region.

Face connectivity (6 in 3D, 4 in 2D), as ITK-SNAP and napari fill. The region is found
with ITK (SimpleITK: flood fill or connected components, whichever is faster), then painted through the usual rules, so locked
labels and the HU mask hold here as for the brush.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, paint_mask
from medseg.errors import MedsegError


def connected_region(criterion: np.ndarray, seed: Sequence[int]) -> np.ndarray:
    """Voxels of ``criterion`` (bool) face-connected to ``seed`` (bool, shape of ``criterion``).

    ITK's flood fill (ConnectedThreshold) visits only the region, which is quickest for a
    small one but single-threaded (10 s for 48 M voxels here); ITK's connected components
    label the whole block multi-threaded in about 1 s whatever the region. The criterion's
    voxel count picks the faster.
    """
    import SimpleITK as sitk

    seed = tuple(int(v) for v in seed)
    if not criterion[seed]:
        return np.zeros(criterion.shape, dtype=bool)
    image = sitk.GetImageFromArray(criterion.view(np.uint8))
    if np.count_nonzero(criterion) < 0.05 * criterion.size:
        region = sitk.ConnectedThreshold(image, seedList=[list(reversed(seed))], lower=1, upper=1, replaceValue=1)
        return sitk.GetArrayFromImage(region).view(bool)
    islands = sitk.ConnectedComponent(image, False)  # face connectivity, as the flood fill
    ids = sitk.GetArrayViewFromImage(islands)
    return ids == ids[seed]


def flood_fill(label_map: LabelMap, seed_zyx: Sequence[int], value: int, rules: PaintRules = PaintRules(),
               image: Volume | None = None, hu_range: tuple[float, float] | None = None,
               plane_axis: int | None = None) -> Delta | None:
    """Fill with ``value`` the region connected to ``seed_zyx``: voxels within ``hu_range`` when given,
    else voxels carrying the seed's current label value."""
    seed = tuple(int(v) for v in seed_zyx)
    if any(not 0 <= s < n for s, n in zip(seed, label_map.shape_zyx)):
        raise MedsegError(f"the fill seed {seed[::-1]} (x, y, z) is outside the image")
    lo = [0, 0, 0]
    sl = [slice(None)] * 3
    if plane_axis is not None:
        lo[plane_axis] = seed[plane_axis]
        sl[plane_axis] = slice(seed[plane_axis], seed[plane_axis] + 1)
    if hu_range is not None:
        if image is None:
            raise MedsegError("filling within an HU range needs the image")
        hu = image.array[tuple(sl)]
        criterion = (hu >= hu_range[0]) & (hu <= hu_range[1])
    else:
        criterion = label_map.array[tuple(sl)] == label_map.array[seed]
    local_seed = [s - o for s, o in zip(seed, lo)]
    if plane_axis is not None:
        keep = [a for a in range(3) if a != plane_axis]
        region = connected_region(np.squeeze(criterion, axis=plane_axis), [local_seed[a] for a in keep])
        region = np.expand_dims(region, plane_axis)
    else:
        region = connected_region(criterion, local_seed)
    return paint_mask(label_map, tuple(lo), region, value, rules, image)  # type: ignore[arg-type]
