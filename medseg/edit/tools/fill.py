"""Flood fill (2D on the view's plane or 3D) from a seed, within an HU range or within the seed's label region.

Face connectivity (6 in 3D, 4 in 2D), as ITK-SNAP and napari fill. The region is found
by ITK's ConnectedThreshold (SimpleITK), then painted through the usual rules, so locked
labels and the HU mask hold here as for the brush.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from medseg.edit.delta import Delta
from medseg.edit.label_map import LabelMap
from medseg.edit.tools.rules import PaintRules, paint_mask
from medseg.errors import MedsegError
from medseg.io.volume import Volume


def connected_region(array: np.ndarray, seed_zyx: Sequence[int], low: float, high: float) -> np.ndarray:
    """Voxels face-connected to ``seed_zyx`` whose value lies in [low, high] (bool, shape of ``array``)."""
    import SimpleITK as sitk

    image = sitk.GetImageFromArray(array)
    seed = [int(v) for v in reversed(seed_zyx)]  # ITK index order is x, y, z
    region = sitk.ConnectedThreshold(image, seedList=[seed], lower=float(low), upper=float(high), replaceValue=1)
    return sitk.GetArrayViewFromImage(region).astype(bool)


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
        source = image.array[tuple(sl)]
        low, high = hu_range
    else:
        source = label_map.array[tuple(sl)]
        low = high = float(label_map.array[seed])
    local_seed = [s - o for s, o in zip(seed, lo)]
    if plane_axis is not None:
        keep = [a for a in range(3) if a != plane_axis]
        region = connected_region(np.squeeze(source, axis=plane_axis), [local_seed[a] for a in keep], low, high)
        region = np.expand_dims(region, plane_axis)
    else:
        region = connected_region(source, local_seed, low, high)
    return paint_mask(label_map, tuple(lo), region, value, rules, image)  # type: ignore[arg-type]
