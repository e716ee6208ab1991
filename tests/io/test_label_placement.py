"""Placing a label map on another grid loses no label (issue #42: a label drawn on one slice of the regular
grid vanished on the acquired slices).

Oracles: pydicom's Image Position (Patient) of every acquired slice, for where the tilted series' slices are;
SimpleITK's nearest-neighbour resampling, for what plain nearest-voxel placement gives (and drops)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk

from medseg.io import load
from medseg.io.dicom_scan import scan
from medseg.io.resample import place_labels

TILT = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")


def _disc(shape_yx: tuple[int, int], centre_yx: tuple[int, int], radius: int) -> np.ndarray:
    yy, xx = np.mgrid[:shape_yx[0], :shape_yx[1]]
    return (yy - centre_yx[0]) ** 2 + (xx - centre_yx[1]) ** 2 < radius ** 2


@pytest.fixture(scope="module")
def tilted(ct_dir: Path):
    folder = ct_dir.joinpath(*TILT)
    return folder, load(folder, regularize=True), load(folder, regularize=False)


def test_a_label_on_one_regular_slice_survives_on_the_acquired_slices(tilted):
    folder, regular, raw = tilted
    normal = regular.direction[:, 2]
    acquired = sorted(float(np.dot([float(v) for v in pydicom.dcmread(f, stop_before_pixels=True).ImagePositionPatient],
                                   normal)) for f in folder.glob("*.dcm"))
    regular_offsets = np.dot(np.asarray(regular.origin_mm), normal) + np.arange(regular.shape_zyx[0]) * regular.spacing_mm[2]
    # the regular slices that no acquired slice has as its nearest: nearest-voxel placement never looks at them
    sampled = {int(np.abs(regular_offsets - a).argmin()) for a in acquired}
    skipped = [k for k in range(regular.shape_zyx[0]) if k not in sampled]
    assert len(skipped) >= 5  # the 7 mm half of the series over a 4 mm grid
    k = skipped[len(skipped) // 2]
    body = (regular.array > -300).astype(np.uint8)  # a large label around it, as Segment's body is
    labels = body.copy()
    disc = _disc(regular.shape_zyx[1:], (330, 256), 20) & (body[k] > 0)
    labels[k][disc] = 2
    placed = place_labels(regular.with_array(labels), raw)

    assert placed.shape == raw.shape_zyx
    on = np.flatnonzero((placed == 2).any(axis=(1, 2)))
    nearest = int(np.abs(np.asarray(acquired) - regular_offsets[k]).argmin())
    assert on.tolist() == [nearest]  # on the acquired slice nearest to where it was drawn
    # the same pixels (both grids have the same in-plane spacing and axes), the whole disc
    assert abs(int((placed == 2).sum()) - int(disc.sum())) <= 0.02 * disc.sum()
    # the body around it is still there, on every acquired slice it was on
    assert np.array_equal((placed == 1).any(axis=(1, 2)) | (placed == 2).any(axis=(1, 2)),
                          (placed > 0).any(axis=(1, 2)))
    assert (placed > 0).sum() > 0.95 * (raw.array > -300).sum()
    # and back on the regular grid (nothing changed there would restore it exactly; placed afresh) the label is
    # on the slices around where it was drawn
    back = place_labels(raw.with_array(placed), regular)
    assert k in np.flatnonzero((back == 2).any(axis=(1, 2)))


def test_a_one_slice_label_on_a_finer_series_survives_and_nothing_else_moves(ct_dir: Path):
    """The Philips head phantom's 1 mm and 5 mm series (one frame of reference): a label drawn on one 1 mm slice
    is gone with SimpleITK's nearest neighbour on the 5 mm grid, kept here; every other voxel is SimpleITK's."""
    folder = ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series"
    found = {s.series_description: s for s in scan(folder).series if s.loadable}
    fine = load(folder, series_uid=found["STD BRAIN 1MM, iDose"].key)
    coarse = load(folder, series_uid=next(s for d, s in found.items() if "5MM" in d).key)
    assert fine.spacing_mm[2] == pytest.approx(1.0) and coarse.spacing_mm[2] == pytest.approx(5.0)
    labels = (fine.array > -300).astype(np.uint8)
    reference = sitk.Resample(_sitk(fine, labels), _sitk(coarse, np.zeros(coarse.shape_zyx, np.uint8)),
                              sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    # a 1 mm slice that SimpleITK's nearest neighbour never samples
    index = [sitk.Image.TransformPhysicalPointToIndex(_sitk(fine, labels), reference.TransformIndexToPhysicalPoint(
        (256, 256, k))) for k in range(coarse.shape_zyx[0])]
    sampled = {i[2] for i in index}
    k = next(z for z in range(2, fine.shape_zyx[0] - 2) if z not in sampled and labels[z].any())
    disc = _disc(fine.shape_zyx[1:], (256, 256), 15) & (labels[k] > 0)
    labels[k][disc] = 2
    nearest = sitk.GetArrayFromImage(sitk.Resample(_sitk(fine, labels), reference, sitk.Transform(),
                                                   sitk.sitkNearestNeighbor, 0))
    assert not (nearest == 2).any()  # what nearest-voxel placement did: the label vanished
    placed = place_labels(fine.with_array(labels), coarse)
    assert (placed == 2).sum() >= 0.9 * disc.sum() * (fine.spacing_mm[0] / coarse.spacing_mm[0]) ** 2
    differs = placed != nearest
    assert np.all(placed[differs] > 0)  # nothing is taken away
    assert np.all((placed[differs] == 2) | (nearest[differs] == 0))  # the thin label, or a label over background
    assert np.flatnonzero(((placed == 2)).any(axis=(1, 2))).size == 1


def test_the_same_voxels_flipped_are_simpleitks_nearest_neighbour(ct_dir: Path):
    """TotalSegmentator's label map stored LAS onto its DICOM series (same spacing): exactly SimpleITK's result."""
    folder = ct_dir / "totalsegmentator"
    image = load(folder / "example_ct_dicom")
    from medseg.io import read_image

    labels = read_image(folder / "example_seg_dicom.nii.gz")
    reference = sitk.GetArrayFromImage(sitk.Resample(labels.to_sitk(), image.to_sitk(), sitk.Transform(),
                                                     sitk.sitkNearestNeighbor, 0))
    assert np.array_equal(place_labels(labels, image), reference)


def _sitk(volume, array: np.ndarray) -> sitk.Image:
    image = sitk.GetImageFromArray(array)
    image.SetSpacing(volume.spacing_mm)
    image.SetOrigin(volume.origin_mm)
    image.SetDirection(tuple(volume.direction.reshape(-1)))
    return image
