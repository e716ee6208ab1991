"""Per-label statistics against SimpleITK's LabelStatistics / LabelShapeStatistics on real CT."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.core.labels import Label
from medseg.edit.stats import label_statistics, write_stats_csv
from medseg.io import load, read_image, resample_to


@pytest.fixture(scope="module")
def liver_case(ct_dir: Path):
    """example_ct_dicom with TotalSegmentator's labels, which are stored LAS: placed on the DICOM grid."""
    image = load(ct_dir / "totalsegmentator" / "example_ct_dicom")
    labels = resample_to(read_image(ct_dir / "totalsegmentator" / "example_seg_dicom.nii.gz"), image)
    return image, labels


def test_statistics_match_simpleitk(liver_case, tmp_path: Path) -> None:
    image, labels = liver_case
    stats = {s.value: s for s in label_statistics(image, labels, {5: Label(5, "liver"), 1: Label(1, "spleen")})}
    label_image = sitk.Cast(labels.to_sitk(), sitk.sitkUInt16)
    intensity = sitk.LabelStatisticsImageFilter()
    intensity.Execute(image.to_sitk(), label_image)
    shape = sitk.LabelShapeStatisticsImageFilter()
    shape.Execute(label_image)
    assert set(stats) == set(intensity.GetLabels()) - {0}
    for value, s in stats.items():
        assert s.voxels == intensity.GetCount(value)
        assert s.hu_mean == pytest.approx(intensity.GetMean(value), abs=1e-6)
        assert s.hu_sd == pytest.approx(intensity.GetSigma(value), rel=1e-6)
        assert s.hu_min == intensity.GetMinimum(value) and s.hu_max == intensity.GetMaximum(value)
        assert s.volume_ml == pytest.approx(shape.GetPhysicalSize(value) / 1000.0, rel=1e-9)
        box = shape.GetBoundingBox(value)  # (x, y, z, size_x, size_y, size_z) in index space
        corners = [label_image.TransformIndexToPhysicalPoint((box[0] + dx * (box[3] - 1), box[1] + dy * (box[4] - 1),
                                                              box[2] + dz * (box[5] - 1)))
                   for dx in (0, 1) for dy in (0, 1) for dz in (0, 1)]
        assert np.allclose(s.bbox_min_lps_mm, np.min(corners, axis=0), atol=1e-4)
        assert np.allclose(s.bbox_max_lps_mm, np.max(corners, axis=0), atol=1e-4)
    # The README's sanity figures: liver ~89 HU, spleen ~80 HU when the LAS map is placed correctly.
    assert stats[5].hu_mean == pytest.approx(89, abs=3) and stats[5].name == "liver"
    assert stats[1].hu_mean == pytest.approx(80, abs=3)
    assert stats[5].hu_median == float(np.median(image.array[labels.array == 5]))

    out = write_stats_csv(list(stats.values()), tmp_path / "stats.csv")
    rows = list(csv.DictReader(out.open()))
    liver = next(r for r in rows if r["name"] == "liver")
    assert int(liver["voxels"]) == stats[5].voxels and float(liver["volume_ml"]) == pytest.approx(stats[5].volume_ml, abs=1e-3)


def test_bounding_box_on_a_tilted_grid_is_the_voxel_centres_box(ct_dir: Path) -> None:
    image = load(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")  # regular grid, tilted axes
    labels = image.with_array((image.array > 300).astype(np.uint8))
    (s,) = label_statistics(image, labels)
    z, y, x = np.nonzero(labels.array)
    points = image.index_to_physical(np.column_stack([x, y, z]).astype(float))
    assert np.allclose(s.bbox_min_lps_mm, points.min(axis=0)) and np.allclose(s.bbox_max_lps_mm, points.max(axis=0))


def test_size_is_the_extent_of_the_voxels(liver_case) -> None:
    """A label's size counts whole voxels, as SimpleITK's bounding box (in voxels) times the spacing does
    (and Slicer's Segment Statistics, ITK-SNAP): 7 slices of 2 mm are 14 mm, one slice is 2 mm, not 0."""
    image, labels = liver_case
    label_image = sitk.Cast(labels.to_sitk(), sitk.sitkUInt16)
    shape = sitk.LabelShapeStatisticsImageFilter()
    shape.Execute(label_image)
    assert np.allclose(np.abs(image.direction), np.eye(3))  # axis-aligned: the voxel box is the LPS box
    for s in label_statistics(image, labels):
        box = shape.GetBoundingBox(s.value)
        assert np.allclose(s.size_mm, np.asarray(box[3:]) * np.asarray(image.spacing_mm), atol=1e-4), s.name
    one_slice = np.zeros_like(labels.array)
    one_slice[7, 100:110, 200:230] = 1
    (s,) = label_statistics(image, labels.with_array(one_slice))
    assert np.allclose(s.size_mm, [30 * image.spacing_mm[0], 10 * image.spacing_mm[1], image.spacing_mm[2]])


def test_size_on_a_tilted_grid_is_along_the_image_axes(ct_dir: Path) -> None:
    """On the +18.5° tilted head the size is along the image's columns, rows and slices (voxels counted, as
    SimpleITK's bounding box in voxels times the spacing), not the patient axes' box of the tilted voxels."""
    image = load(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    assert abs(np.asarray(image.direction)[2, 2]) < 0.96  # tilted: the slice normal is not the patient's z
    labels = image.with_array((image.array > 300).astype(np.uint8))
    shape = sitk.LabelShapeStatisticsImageFilter()
    shape.Execute(sitk.Cast(labels.to_sitk(), sitk.sitkUInt16))
    counted = np.asarray(shape.GetBoundingBox(1)[3:], dtype=float)  # voxels along x, y, slices
    (s,) = label_statistics(image, labels)
    assert np.allclose(s.size_mm, counted * np.asarray(image.spacing_mm), atol=1e-4)
    one_slice = np.zeros_like(labels.array)
    one_slice[10, 200:400, 150:300] = 1
    (s,) = label_statistics(image, labels.with_array(one_slice))
    assert np.allclose(s.size_mm, [150 * image.spacing_mm[0], 200 * image.spacing_mm[1], image.spacing_mm[2]])


def test_size_on_a_sagittal_grid_names_the_nearest_patient_axes(liver_case) -> None:
    """A grid whose columns run along the patient's y (a sagittal acquisition): the columns' extent is y."""
    image, labels = liver_case
    swapped = np.asarray(image.direction)[:, [1, 0, 2]]  # columns along P, rows along L
    turned = labels.with_array(np.zeros_like(labels.array))
    turned = type(turned)(turned.array, turned.spacing_mm, turned.origin_mm, swapped)
    block = np.zeros_like(labels.array)
    block[3:5, 10:20, 30:70] = 1  # 2 slices, 10 rows, 40 columns
    (s,) = label_statistics(turned.with_array(block), turned.with_array(block))
    sx, sy, sz = turned.spacing_mm
    assert np.allclose(s.size_mm, [10 * sy, 40 * sx, 2 * sz])
