"""Each tool on real CT against an independent computation (physical-space geometry, SimpleITK, scipy)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
import SimpleITK as sitk
from edit_cases import CARTILAGES, LIVER, SPLEEN, STOMACH
from scipy import ndimage

from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.tools import PaintRules


def physical_distance_mask(volume, centre_xyz, radius_mm, lo_zyx, hi_zyx):
    """Voxels of a box whose centre lies within ``radius_mm`` of a point, via the Volume's physical mapping."""
    z, y, x = np.meshgrid(*[np.arange(a, b) for a, b in zip(lo_zyx, hi_zyx)], indexing="ij")
    points = volume.index_to_physical(np.stack([x.ravel(), y.ravel(), z.ravel()], axis=1))
    centre = volume.index_to_physical(centre_xyz)
    inside = np.linalg.norm(points - centre, axis=1) <= radius_mm
    return inside.reshape(z.shape)


def full(delta, shape):
    """A delta's changed voxels as a full-size mask."""
    mask = np.zeros(shape, dtype=bool)
    lo, hi = delta.box
    mask[lo[0]:hi[0], lo[1]:hi[1], lo[2]:hi[2]] = delta.mask()
    return mask


def test_sphere_brush_is_anisotropic_in_mm(chest):
    image, lm = chest
    centre_zyx = (24.3, 250.2, 180.7)
    delta = tools.dab(lm, centre_zyx, 10.0, 1)
    painted = full(delta, lm.shape_zyx)
    expected = np.zeros_like(painted)
    lo, hi = (19, 230, 160), (30, 271, 202)
    expected[19:30, 230:271, 160:202] = physical_distance_mask(image, centre_zyx[::-1], 10.0, lo, hi)
    assert np.array_equal(painted, expected)
    zs = np.flatnonzero(painted.any(axis=(1, 2)))
    assert zs.tolist() == [23, 24, 25, 26]  # 10 mm from z=24.3 reaches 4 slices of 5 mm, but 35 columns


def test_disc_brush_stays_on_its_plane_and_tiny_radius_paints_one_voxel(chest):
    image, lm = chest
    disc = full(tools.dab(lm, (24, 250.0, 180.0), 5.0, 1, plane_axis=0), lm.shape_zyx)
    assert np.flatnonzero(disc.any(axis=(1, 2))).tolist() == [24]
    expected = physical_distance_mask(image, (180.0, 250.0, 24), 5.0, (24, 230, 160), (25, 271, 201))
    assert np.array_equal(disc[24:25, 230:271, 160:201], expected)
    tiny = tools.dab(lm, (10.2, 100.4, 100.3), 0.1, 1)
    assert tiny.count == 1 and full(tiny, lm.shape_zyx)[10, 100, 100]


def test_stroke_has_no_gaps_between_mouse_events(chest):
    image, lm = chest
    a, b = np.array([24, 200.0, 150.0]), np.array([24, 260.0, 330.0])  # 100+ mm apart in one event
    delta = tools.stroke(lm, [a, b], 4.0, 1, plane_axis=0)
    painted = full(delta, lm.shape_zyx)[24]
    yy, xx = np.mgrid[0:512, 0:512]
    spacing = np.array(image.spacing_zyx[1:])
    p = np.stack([yy, xx], -1) * spacing
    a2, b2 = a[1:] * spacing, b[1:] * spacing
    t = np.clip(((p - a2) @ (b2 - a2)) / ((b2 - a2) @ (b2 - a2)), 0, 1)
    to_segment = np.linalg.norm(p - (a2 + t[..., None] * (b2 - a2)), axis=-1)
    assert np.all(painted[to_segment <= 4.0 * np.sqrt(1 - 1 / 16)])  # dabs ≤ r/2 apart: no gaps
    assert not np.any(painted[to_segment > 4.0])


def test_hu_range_masks_the_brush(chest):
    image, lm = chest
    rules = PaintRules(hu_range=(-100.0, 200.0))
    centre = (30, 300.0, 256.0)
    delta = tools.dab(lm, centre, 30.0, 1, rules, image)
    painted = full(delta, lm.shape_zyx)
    ball = full(tools.dab(lm, centre, 30.0, 1), lm.shape_zyx)
    hu = image.array
    assert np.array_equal(painted, ball & (hu >= -100) & (hu <= 200))
    assert 0 < painted.sum() < ball.sum()


def test_locked_and_background_only_rules(abdomen):
    image, lm = abdomen
    lm.labels[LIVER] = replace(lm.labels[LIVER], locked=True)
    liver = lm.array == LIVER
    centre = np.argwhere(liver).mean(axis=0)
    delta = tools.dab(lm, centre, 40.0, STOMACH)
    assert delta is not None and not np.any(full(delta, lm.shape_zyx) & liver)
    only_bg = tools.dab(lm, centre, 40.0, STOMACH, PaintRules(overwrite="background"))
    changed = full(only_bg, lm.shape_zyx)
    assert np.all(lm.array[changed] == 0)
    eraser = tools.dab(lm, centre, 40.0, 0, erase=True)
    assert not np.any(full(eraser, lm.shape_zyx) & liver)


def test_fill_3d_and_2d_match_scipy_components(chest):
    image, lm = chest
    seed = (30, 300, 256)
    low, high = -100.0, 200.0
    assert low <= image.array[seed] <= high
    delta = tools.flood_fill(lm, seed, 2, image=image, hu_range=(low, high))
    components, _ = ndimage.label((image.array >= low) & (image.array <= high))  # face connectivity
    assert np.array_equal(full(delta, lm.shape_zyx), components == components[seed])
    flat = tools.flood_fill(lm, seed, 2, image=image, hu_range=(low, high), plane_axis=0)
    slice_components, _ = ndimage.label((image.array[30] >= low) & (image.array[30] <= high))
    expected = np.zeros(lm.shape_zyx, bool)
    expected[30] = slice_components == slice_components[seed[1:]]
    assert np.array_equal(full(flat, lm.shape_zyx), expected)


def test_fill_of_a_label_region_recolours_one_component(abdomen):
    image, lm = abdomen
    seed = tuple(np.argwhere(lm.array == SPLEEN)[0])
    delta = tools.flood_fill(lm, seed, 77)
    components, _ = ndimage.label(lm.array == SPLEEN)
    assert np.array_equal(full(delta, lm.shape_zyx), components == components[seed])


def test_threshold_respects_locks(abdomen):
    image, lm = abdomen
    lm.labels[LIVER] = replace(lm.labels[LIVER], locked=True)
    delta = tools.threshold(lm, image, 0.0, 200.0, 90)
    hu = image.array
    expected = (hu >= 0) & (hu <= 200) & (lm.array != LIVER) & (lm.array != 90)
    assert np.array_equal(full(delta, lm.shape_zyx), expected)


def scipy_islands(mask):
    """26-connected islands numbered by decreasing size (scipy: independent of the tool's ITK filters)."""
    ids, count = ndimage.label(mask, structure=np.ones((3, 3, 3)))
    sizes = np.bincount(ids.ravel())[1:]
    order = np.argsort(-sizes, kind="stable")
    rank = np.zeros(count + 1, dtype=np.int64)
    rank[order + 1] = np.arange(1, count + 1)
    return rank[ids], sizes[order]


def apply(lm, delta):
    doc = SegmentationDocument()
    from medseg.core.volume import Volume

    doc.set_volume(Volume(np.zeros(lm.shape_zyx, np.int16), lm.spacing_mm, lm.origin_mm, lm.direction))
    doc.set_label_map(lm)
    doc.apply(delta, "test")
    return doc.label_map.array


def test_keep_largest_and_remove_smaller_match_scipy(abdomen, abdomen_labels_array):
    image, lm = abdomen
    cartilage = lm.array == CARTILAGES
    relabelled, sizes = scipy_islands(cartilage)
    assert relabelled.max() == 6  # six islands in this map
    result = apply(lm, tools.keep_largest(lm, CARTILAGES))
    assert np.array_equal(result == CARTILAGES, relabelled == 1)
    assert np.array_equal(result[~cartilage], abdomen_labels_array.array[~cartilage])

    fresh = LabelMap.from_volume(abdomen_labels_array.with_array(np.array(abdomen_labels_array.array)))
    min_voxels = 40  # keeps the islands of 48, 909 and 1107 voxels
    kept = np.isin(relabelled, 1 + np.flatnonzero(sizes >= min_voxels))
    result2 = apply(fresh, tools.remove_smaller(fresh, CARTILAGES, (min_voxels - 0.5) * lm.voxel_volume_ml))
    assert np.array_equal(result2 == CARTILAGES, kept) and np.count_nonzero(sizes >= min_voxels) == 3


def maurer(mask, spacing_zyx):
    image = sitk.GetImageFromArray(mask.astype(np.uint8))
    image.SetSpacing(tuple(float(s) for s in reversed(spacing_zyx)))
    distance = sitk.SignedMaurerDistanceMap(image, insideIsPositive=False, squaredDistance=False, useImageSpacing=True)
    return sitk.GetArrayFromImage(distance)


def test_grow_and_shrink_in_mm_match_simpleitk_distance_maps(chest):
    image, lm = chest
    lm.array[20:28, 200:260, 200:280] = 3  # a slab: 8 slices of 5 mm, in-plane 0.57 mm
    lm.array[24, 230, 240] = 0  # a hole
    lm.recount()
    lm.ensure_entry(3)
    mask = lm.array == 3
    grown = apply(lm, tools.grow(lm, 3, 7.0)) == 3
    outside_distance = maurer(mask, lm.spacing_zyx)  # > 0 outside: distance to the nearest label voxel centre
    assert np.array_equal(grown, mask | ((outside_distance <= 7.0 + 1e-4) & (outside_distance > 0)))
    assert np.flatnonzero(grown.any(axis=(1, 2))).tolist() == list(range(19, 29))  # one 5 mm slice each way

    lm.array[:] = np.where(mask, 3, 0)
    lm.recount()
    shrunk = apply(lm, tools.shrink(lm, 3, 2.0)) == 3
    to_outside = maurer(~mask, lm.spacing_zyx)  # > 0 inside the label: distance to the nearest non-label voxel
    assert np.array_equal(shrunk, mask & (to_outside > 2.0 + 1e-4))


def test_fill_holes_matches_simpleitk_and_spares_other_labels(abdomen):
    image, lm = abdomen
    liver = lm.array == LIVER
    lm.array[liver & (image.array > 120)] = 0  # vessels cut out: holes
    lm.recount()
    before = lm.array.copy()
    result = apply(lm, tools.fill_holes(lm, LIVER))
    filled = sitk.GetArrayFromImage(sitk.BinaryFillhole(sitk.GetImageFromArray((before == LIVER).astype(np.uint8)),
                                                        fullyConnected=False)).astype(bool)
    assert np.array_equal(result == LIVER, (before == LIVER) | (filled & (before == 0)))
    assert np.array_equal(result[before != 0], before[before != 0])


def test_interpolate_between_drawn_slices(abdomen):
    image, lm = abdomen
    liver = lm.array == LIVER
    zs = np.flatnonzero(liver.any(axis=(1, 2)))
    drawn = np.zeros_like(liver)
    drawn[zs[::4]] = liver[zs[::4]]
    lm.array[:] = np.where(drawn, LIVER, 0)
    lm.recount()
    result = apply(lm, tools.interpolate_slices(lm, LIVER)) == LIVER
    assert np.array_equal(result[zs[::4]], drawn[zs[::4]])  # drawn slices are not touched
    between = np.setdiff1d(np.arange(zs[0], zs[::4][-1] + 1), zs[::4])
    assert all(result[z].any() for z in between)
    dice = 2 * np.sum(result & liver) / (result.sum() + liver.sum())
    assert dice > 0.9


def test_smooth_removes_a_spur_and_spares_locked(abdomen):
    image, lm = abdomen
    lm.labels[SPLEEN] = replace(lm.labels[SPLEEN], locked=True)
    spleen_before = lm.array == SPLEEN
    delta = tools.smooth(lm, LIVER, 3.0)
    result = apply(lm, delta)
    assert np.array_equal(result == SPLEEN, spleen_before)
    liver_before = lm.array == LIVER
    smooth_oracle = sitk.GetArrayFromImage(sitk.DiscreteGaussian(
        sitk.GetImageFromArray(liver_before.astype(np.float32)), variance=1.0, useImageSpacing=False)) >= 0.5
    new_liver = result == LIVER
    agree = np.sum(new_liver == smooth_oracle) / new_liver.size
    assert agree > 0.999


def test_union_intersect_subtract(abdomen, abdomen_labels_array):
    image, lm = abdomen
    liver, spleen = lm.array == LIVER, lm.array == SPLEEN
    result = apply(lm, tools.union(lm, LIVER, SPLEEN))
    assert np.array_equal(result == LIVER, liver | spleen) and not np.any(result == SPLEEN)

    region = ndimage.binary_fill_holes(liver)
    inner = region & ~liver
    assert inner.any()
    array = np.array(abdomen_labels_array.array)
    array[inner] = 200  # "a lesion" inside the liver outline
    array[5, 5, 5] = 200  # and one voxel of it far outside
    lesion = LabelMap.from_volume(abdomen_labels_array.with_array(array.copy()))
    kept = apply(lesion, tools.intersect(lesion, 200, LIVER))
    assert np.array_equal(kept == 200, inner)
    lesion = LabelMap.from_volume(abdomen_labels_array.with_array(array.copy()))
    gone = apply(lesion, tools.subtract(lesion, 200, LIVER))
    assert np.flatnonzero(gone == 200).tolist() == [np.ravel_multi_index((5, 5, 5), gone.shape)]
    assert np.array_equal(gone == LIVER, liver)


@pytest.mark.parametrize("name", ["brush", "eraser", "fill", "threshold", "grow", "smooth", "union", "holes"])
def test_locked_labels_survive_every_tool(abdomen, name):
    image, lm = abdomen
    if name == "holes":  # a closed shell of STOMACH around part of the liver
        c = np.argwhere(lm.array == LIVER).mean(axis=0).astype(int)
        lm.array[c[0] - 4:c[0] + 5, c[1] - 6:c[1] + 7, c[2] - 6:c[2] + 7] = STOMACH
        lm.array[c[0] - 3:c[0] + 4, c[1] - 5:c[1] + 6, c[2] - 5:c[2] + 6] = abdomen[1].array[0, 0, 0]
        lm.array[c[0] - 3:c[0] + 4, c[1] - 5:c[1] + 6, c[2]] = LIVER
        lm.recount()
    lm.labels[LIVER] = replace(lm.labels[LIVER], locked=True)
    liver = lm.array == LIVER
    centre = np.argwhere(liver).mean(axis=0)
    seed = tuple(np.argwhere(lm.array == STOMACH)[0])
    run = {
        "brush": lambda: tools.dab(lm, centre, 60.0, STOMACH),
        "eraser": lambda: tools.dab(lm, centre, 60.0, 0, erase=True),
        "fill": lambda: tools.flood_fill(lm, seed, 44, image=image, hu_range=(-200, 400)),
        "threshold": lambda: tools.threshold(lm, image, -1000, 3000, 44),
        "grow": lambda: tools.grow(lm, STOMACH, 30.0),
        "smooth": lambda: tools.smooth(lm, STOMACH, 6.0),
        "union": lambda: tools.union(lm, STOMACH, SPLEEN),
        "holes": lambda: tools.fill_holes(lm, STOMACH, PaintRules()),
    }[name]
    delta = run()
    assert delta is not None
    result = apply(lm, delta)
    assert np.array_equal(result == LIVER, liver)
    with pytest.raises(tools.LockedLabelError):
        tools.keep_largest(lm, LIVER)
