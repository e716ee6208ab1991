"""Seeds placed the way a person places them (issue #26), from a reference mask, for tests and benchmarks.

For the structure: on three axial slices, at 25 %, 50 % and 75 % of its extent (every slice it
spans when it spans fewer than three), a disc of up to 5 mm radius at the point deepest inside
it on that slice (the radius is cut to that depth). For the background: a one-voxel-thick ring
10 mm outside the structure's outline on the same slices. Distances are in mm (in-plane spacing).
"""

from __future__ import annotations

import numpy as np
from scipy import ndimage

DISC_MM = 5.0
RING_MM = 10.0


def seed_slices(mask: np.ndarray) -> list[int]:
    """Axial slices (array axis 0) at 25/50/75 % of the structure's extent, or every slice it spans."""
    spanned = np.flatnonzero(mask.any(axis=(1, 2)))
    if spanned.size <= 3:
        return [int(z) for z in spanned]
    first, last = int(spanned[0]), int(spanned[-1])
    chosen = [int(round(first + f * (last - first))) for f in (0.25, 0.5, 0.75)]
    return [z if mask[z].any() else int(spanned[np.argmin(np.abs(spanned - z))]) for z in chosen]


def place_seeds(mask: np.ndarray, spacing_zyx, structure: int, background: int) -> tuple[np.ndarray, dict]:
    """(seed volume: ``structure`` discs, ``background`` rings, 0 elsewhere; a summary of what was placed)."""
    seeds = np.zeros(mask.shape, dtype=np.uint16)
    plane_spacing = tuple(float(s) for s in spacing_zyx[1:])
    rows, cols = np.mgrid[0:mask.shape[1], 0:mask.shape[2]]
    summary = {"slices": [], "disc_voxels": 0, "ring_voxels": 0, "disc_radius_mm": []}
    for z in seed_slices(mask):
        inside = mask[z].astype(bool)
        depth = ndimage.distance_transform_edt(inside, sampling=plane_spacing)
        r, c = np.unravel_index(int(np.argmax(depth)), depth.shape)
        radius = min(DISC_MM, float(depth[r, c]))
        disc = ((rows - r) * plane_spacing[0]) ** 2 + ((cols - c) * plane_spacing[1]) ** 2 <= radius ** 2
        disc[r, c] = True
        disc &= inside
        outside = ndimage.distance_transform_edt(~inside, sampling=plane_spacing) >= RING_MM
        ring = outside & ndimage.binary_dilation(~outside)  # the inner edge of "10 mm or more away"
        seeds[z][ring] = background
        seeds[z][disc] = structure
        summary["slices"].append(z)
        summary["disc_voxels"] += int(disc.sum())
        summary["ring_voxels"] += int(ring.sum())
        summary["disc_radius_mm"].append(round(radius, 2))
    return seeds, summary


def dice(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(bool), b.astype(bool)
    total = int(a.sum()) + int(b.sum())
    return 2.0 * int((a & b).sum()) / total if total else 1.0
