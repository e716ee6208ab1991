"""Scissors, lasso, level tracing and the confidence-connected click on real CT, each against an
independent reference: skimage.draw's polygon rasteriser, SimpleITK's ConnectedThreshold and
ConfidenceConnected run directly on the same voxels, and lung1's nodule mask (issue #26)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import SimpleITK as sitk
from seed_placement import dice
from skimage.draw import polygon2mask

from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import LabelMap
from medseg.edit.tools import click_region
from medseg.edit.tools.rules import PaintRules
from medseg.edit.tools.scissors import ScissorsParameters, lasso, polygon_mask, scissors, slab_range
from medseg.errors import MedsegError
from medseg.io import load, read_image

# vertices off the voxel centres (x.3, x.7): no centre lies on an edge, so any correct rasteriser agrees
OUTLINE = [(10.3, 12.7), (60.3, 20.2), (75.7, 70.4), (35.2, 90.6), (20.6, 55.3), (40.4, 45.8)]


def _applied(label_map: LabelMap, delta) -> np.ndarray:
    after = label_map.array.copy()
    if delta is not None:
        delta.write(after, delta.new)
    return after


@pytest.mark.parametrize("axis", [0, 1, 2], ids=["axial", "coronal", "sagittal"])
def test_polygon_raster_equals_skimage(axis, abdomen):
    _, label_map = abdomen
    plane = [n for a, n in enumerate(label_map.shape_zyx) if a != axis]
    points = [(min(i, plane[0] - 1.5), min(j, plane[1] - 1.5)) for i, j in OUTLINE]
    ours = polygon_mask(points, tuple(plane))
    assert ours.sum() > 50
    assert np.array_equal(ours, polygon2mask(tuple(plane), np.asarray(points)))


@pytest.mark.parametrize("axis", [0, 1, 2], ids=["axial", "coronal", "sagittal"])
def test_scissors_erase_exactly_the_prism_and_spare_locked_labels(axis, abdomen):
    _, label_map = abdomen
    label_map.labels[5] = dataclasses.replace(label_map.labels[5], locked=True)  # the liver
    plane = [n for a, n in enumerate(label_map.shape_zyx) if a != axis]
    points = [(min(i, plane[0] - 1.5), min(j, plane[1] - 1.5)) for i, j in OUTLINE]
    prism = np.expand_dims(polygon2mask(tuple(plane), np.asarray(points)), axis)
    before = label_map.array.copy()
    delta = scissors(label_map, points, axis, ScissorsParameters("erase-inside"))
    after = _applied(label_map, delta)
    expected = np.where(prism & (before != 5), 0, before)
    assert np.array_equal(after, expected)
    outside = scissors(label_map, points, axis, ScissorsParameters("erase-outside"))
    assert np.array_equal(_applied(label_map, outside), np.where(~prism & (before != 5), 0, before))


def test_scissors_slab_and_fill(abdomen):
    image, label_map = abdomen  # 3 mm slices
    points = [(i + 0.0, j) for i, j in OUTLINE]
    delta = scissors(label_map, points, 0, ScissorsParameters("fill-inside", slab_mm=10.0),
                              centre=15, value=200)
    after = _applied(label_map, delta)
    changed = np.flatnonzero((after != label_map.array).any(axis=(1, 2)))
    assert changed.tolist() == [14, 15, 16]  # |k - 15| * 3 mm <= 5 mm
    inside = polygon2mask(label_map.shape_zyx[1:], np.asarray(points))
    assert (after[14:17][np.broadcast_to(inside, (3, *inside.shape))] == 200).all()
    with pytest.raises(MedsegError, match="slab"):
        ScissorsParameters("erase-inside", slab_mm=-2)
    with pytest.raises(MedsegError, match="one of"):
        ScissorsParameters("cut")
    with pytest.raises(MedsegError, match="three points"):
        scissors(label_map, [(1, 1), (2, 2)], 0)


def test_scissors_slab_on_the_acquired_grid_uses_true_slice_positions(ct_dir):
    """GE head CT kept as acquired (18.5 deg tilt): along the slice normal its slices lie 4.0 mm apart, then one
    1.08 mm step, then 7.0 mm (4.22 / 1.14 / 7.38 mm along the table)."""
    raw = load(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing", regularize=False)
    positions = np.asarray(raw.meta.extra["slice_positions_mm"]) @ raw.direction[:, 2]
    steps = np.round(np.diff(positions), 2)
    assert set(np.abs(steps).tolist()) == {4.0, 1.08, 7.0}
    first, last = slab_range(raw, 0, 13, 9.0)
    expected = np.flatnonzero(np.abs(positions - positions[13]) <= 4.5)
    assert (first, last) == (expected.min(), expected.max() + 1) == (12, 15)  # not 3 slices of the even grid


def test_lasso_fills_one_slice(chest):
    image, label_map = chest
    points = [(200.3, 150.7), (320.6, 160.2), (300.4, 300.3), (180.2, 280.8)]
    delta = lasso(label_map, points, 0, 30, 3)
    after = _applied(label_map, delta)
    expected = np.zeros(label_map.shape_zyx, dtype=bool)
    expected[30] = polygon2mask(label_map.shape_zyx[1:], np.asarray(points))
    assert np.array_equal(after == 3, expected)


def test_level_trace_equals_itk_connected_threshold(chest):
    image, label_map = chest
    seed = (33, 359, 218)  # lung1's nodule
    for axis in (0, 1):
        region = click_region.level_trace_region(image, seed, axis, click_region.LevelTraceParameters(60.0))
        index = [slice(None)] * 3
        index[axis] = seed[axis]
        plane = np.ascontiguousarray(image.array[tuple(index)])
        local = [s for a, s in enumerate(seed) if a != axis]
        level = float(plane[tuple(local)])
        itk = sitk.ConnectedThreshold(sitk.GetImageFromArray(plane), seedList=[[local[1], local[0]]],
                                      lower=level - 60.0, upper=level + 60.0, replaceValue=1)
        assert np.array_equal(region, sitk.GetArrayFromImage(itk).astype(bool))
        assert region.sum() > 20
    delta = click_region.level_trace(label_map, image, seed, 0, 4, click_region.LevelTraceParameters(60.0))
    assert set(np.flatnonzero((_applied(label_map, delta) == 4).any(axis=(1, 2)))) == {33}


def test_confidence_connected_equals_itk_and_finds_the_nodule(chest, ct_dir, record_property):
    image, label_map = chest
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    centre = tuple(int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0)))
    parameters = click_region.ConfidenceParameters()
    document = SegmentationDocument()
    document.set_volume(image)
    document.new_label_map()
    delta = click_region.confidence_connected(document.label_map, image, centre, 7, parameters)
    assert document.apply(delta, "confidence connected")
    itk = sitk.ConfidenceConnected(image.to_sitk(), seedList=[list(centre[::-1])], numberOfIterations=parameters.iterations,
                                   multiplier=parameters.k, initialNeighborhoodRadius=parameters.neighbourhood_voxels,
                                   replaceValue=1)
    assert np.array_equal(document.label_map.array == 7, sitk.GetArrayFromImage(itk).astype(bool))
    score = dice(document.label_map.array == 7, nodule)
    record_property("nodule_confidence_dice", score)
    print(f"nodule, confidence connected at its centre {centre[::-1]} (x, y, z), k={parameters.k}: Dice {score:.4f}")
    assert score >= 0.70
    # a locked label is never painted over
    document.undo()
    document.label_map.array[centre] = 9
    document.label_map.recount()
    document.label_map.ensure_entry(9)
    document.set_label_locked(9, True)
    again = click_region.confidence_connected(document.label_map, image, centre, 7, parameters, PaintRules())
    assert document.label_map.array.reshape(-1)[again.global_index(image.shape_zyx)].max() != 9


def test_click_tools_name_bad_input(chest):
    image, label_map = chest
    with pytest.raises(MedsegError, match="outside the image"):
        click_region.confidence_connected(label_map, image, (99, 0, 0), 1)
    with pytest.raises(MedsegError, match="k must be"):
        click_region.ConfidenceParameters(k=0)
    with pytest.raises(MedsegError, match="tolerance"):
        click_region.LevelTraceParameters(tolerance_hu=-5)
