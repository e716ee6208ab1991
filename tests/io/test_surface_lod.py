"""The 3D view's coarse copies (drawn while the scene turns) made from the full surfaces by vertex clustering:
fewer triangles, the same place and volume as the label's voxels, normals still outward."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage

from medseg.io import read_image
from medseg.io.surface_bricks import Surface, SurfaceBricks
from medseg.io.surface_lod import MIN_COARSE_TRIANGLES, cluster, coarse_copies

LUNGS, BONES = 2, 3


@pytest.fixture(scope="module")
def lungs(ct_dir: Path):
    """lung1's air inside the body (threshold labels, as in test_surface_bricks) and its full surface."""
    image = read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    hu = image.array
    body = hu > -400
    parts, _ = ndimage.label(body)
    body = parts == np.argmax(np.bincount(parts.ravel())[1:]) + 1
    inside = np.stack([ndimage.binary_fill_holes(plane) for plane in body])
    labels = np.zeros(hu.shape, np.uint8)
    labels[inside & ~body & (hu < -400)] = LUNGS
    labels[hu > 250] = BONES
    label_map = image.with_array(labels)
    surfaces = SurfaceBricks(label_map, triangle_budget=120_000).rebuild(labels)
    return label_map, surfaces


def enclosed_ml(surface: Surface) -> float:
    a, b, c = (surface.vertices[surface.faces[:, i]].astype(np.float64) for i in range(3))
    return float(np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6000.0)


def test_a_coarse_copy_keeps_the_volume_place_and_outward_normals(lungs):
    label_map, surfaces = lungs
    full = surfaces[LUNGS]
    (copy,) = coarse_copies({LUNGS: full}, full.n_triangles, full.n_triangles // 4).values()
    assert 0.1 * full.n_triangles < copy.n_triangles < 0.4 * full.n_triangles
    assert copy.faces.max() < len(copy.vertices)
    assert np.allclose(np.linalg.norm(copy.normals, axis=1), 1.0, atol=1e-4)
    voxels_ml = np.count_nonzero(label_map.array == LUNGS) * label_map.voxel_volume_ml
    assert enclosed_ml(copy) == pytest.approx(voxels_ml, rel=0.1)
    assert enclosed_ml(copy) == pytest.approx(enclosed_ml(full), rel=0.05)
    # every coarse vertex lies near the full surface (within one clustering cell)
    from scipy.spatial import cKDTree

    distance, _ = cKDTree(full.vertices).query(copy.vertices)
    assert np.percentile(distance, 99) < copy.sample_mm
    # normals point outwards: a step along them leaves the lungs, a step against them stays inside
    labels = np.asarray(label_map.array)

    def label_at(points):
        index = np.clip(np.rint(label_map.physical_to_index(points)).astype(int), 0, np.asarray(label_map.size_xyz) - 1)
        return labels[index[:, 2], index[:, 1], index[:, 0]]

    reach = copy.sample_mm
    assert (label_at(copy.vertices + reach * copy.normals) != LUNGS).mean() > 0.75
    assert (label_at(copy.vertices - reach * copy.normals) == LUNGS).mean() > 0.75


def test_what_needs_no_cutting_is_kept_whole(lungs):
    _, surfaces = lungs
    scene = sum(s.n_triangles for s in surfaces.values())
    # a budget above the scene: every surface is its own coarse copy
    whole = coarse_copies(surfaces, scene, scene + 1)
    assert all(whole[v] is surfaces[v] for v in surfaces)
    # a tiny share never cuts a label below the floor; a label that emptied (None) stays None
    copies = coarse_copies({**surfaces, 9: None}, scene, 10)
    assert copies[9] is None
    assert all(copies[v].n_triangles >= 0.4 * min(surfaces[v].n_triangles, MIN_COARSE_TRIANGLES) for v in surfaces)
    # a cell finer than the vertex spacing merges nothing
    assert cluster(surfaces[LUNGS], 1e-4).n_triangles == surfaces[LUNGS].n_triangles
