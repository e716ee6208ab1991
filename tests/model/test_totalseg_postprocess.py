"""medseg's copies of TotalSegmentator's task clean-ups against TotalSegmentator 2.18.0's own functions
(totalsegmentator.postprocessing, the test peer), on label maps with the situations they handle."""

from __future__ import annotations

import numpy as np
import pytest

from medseg.model.totalseg import postprocess
from medseg.model.totalseg.tasks import task_spec

ts_post = pytest.importorskip("totalsegmentator.postprocessing")


def _vertebrae(rng: np.random.Generator, touching: bool, with_l5: bool) -> np.ndarray:
    """A column of vertebral bodies along z (x, y, z array), labelled with vertebrae_pp's values, some
    mixed up (two labels in one body) when ``touching``, with small specks."""
    labels = np.zeros((24, 22, 90), np.uint8)
    names = task_spec("vertebrae_pp").labels
    values = sorted(names)[::-1] if with_l5 else sorted(names)[:12]  # L5 at the bottom, else C1.. from the top
    z = 2
    for index, value in enumerate(values[:11]):
        height = int(rng.integers(4, 7))
        labels[6:18, 5:17, z:z + height] = value
        if touching and index == 3:
            labels[6:18, 5:17, z + height // 2:z + height] = values[index + 1]  # one body, two labels
        z += height + 2
    for _ in range(6):  # specks under 100 mm3
        x, y, zz = (int(rng.integers(0, n - 1)) for n in labels.shape)
        labels[x, y, zz] = values[0]
    return labels


@pytest.mark.parametrize("touching", [False, True])
@pytest.mark.parametrize("with_l5", [True, False])
def test_vertebrae_pp_is_totalsegmentators(touching, with_l5):
    rng = np.random.default_rng(3)
    labels = _vertebrae(rng, touching, with_l5)
    spec = task_spec("vertebrae_pp")
    zooms = np.array([1.5, 1.5, 1.5], np.float32)
    ours = postprocess.vertebrae_pp(labels.copy(), spec.labels, spec.postprocess, zooms)
    theirs = ts_post.postprocess_vertebrae_pp(labels.copy(), spec.labels, voxel_volume=np.prod(zooms),
                                              voxel_spacing=tuple(zooms))
    assert np.array_equal(ours, theirs)
    assert len(np.unique(theirs)) > 5


def test_refinement_with_the_vertebral_bodies_is_totalsegmentators():
    rng = np.random.default_rng(5)
    labels = _vertebrae(rng, False, True)
    body = np.zeros_like(labels)
    body[5:19, 4:18, :] = 1
    body[:, :, ::7] = 2  # the discs
    names = task_spec("vertebrae_pp_refined").labels
    zooms = np.array([0.8, 0.8, 2.0], np.float32)
    ours = postprocess.refine_with_mask(labels.copy(), body, names, 1, zooms, 2)
    theirs = ts_post.refine_vertebrae_pp_with_body_mask(labels.copy(), body, names, voxel_spacing=tuple(zooms),
                                                        dilation_mm=2)
    assert np.array_equal(ours, theirs)


def test_body_clean_up_is_totalsegmentators():
    rng = np.random.default_rng(9)
    labels = np.zeros((40, 40, 30), np.uint8)
    labels[5:30, 5:30, 5:25] = 1
    labels[33:36, 33:36, 2:5] = 1  # a second trunk blob: dropped
    labels[0:4, 0:4, 0:30] = 2  # a large limb: kept
    labels[36:38, 0:2, 0:2] = 2  # a small limb blob: dropped
    labels[(rng.random(labels.shape) < 0.002) & (labels == 0)] = 2  # single-voxel limb specks: dropped
    spec = task_spec("body")
    zooms = np.array([6.0, 6.0, 6.0], np.float32)
    ours = postprocess.body(labels.copy(), spec.labels, spec.postprocess, zooms)
    expected = ts_post.keep_largest_blob_multilabel(labels.copy(), spec.labels, ["body_trunc"], quiet=True)
    expected = ts_post.remove_small_blobs_multilabel(expected, spec.labels, ["body_extremities"],
                                                     interval=[50000 / np.prod(zooms), 1e10], quiet=True)
    assert np.array_equal(ours, expected)
    assert (ours == 1).sum() == 25 * 25 * 20 and (ours == 2).sum() >= 4 * 4 * 30


def test_remove_outside_and_auxiliary_labels_are_totalsegmentators():
    rng = np.random.default_rng(11)
    labels = rng.integers(0, 16, (30, 30, 30)).astype(np.uint8)
    mask = np.zeros(labels.shape, np.uint8)
    mask[10:20, 12:18, 8:22] = 1
    for iterations in (0, 3):  # 0: scipy dilates until nothing changes (a dilation of 10 mm on > 10 mm voxels)
        ours = postprocess.remove_outside(labels.copy(), mask.astype(bool), iterations)
        theirs = ts_post.remove_outside_of_mask(labels.copy().astype(np.float64), mask, addon=iterations)
        assert np.array_equal(ours, theirs.astype(np.uint8))
    auxiliary = task_spec("appendicular_bones").auxiliary_labels
    ours = postprocess.remove_values(labels.copy(), sorted(auxiliary))
    assert set(np.unique(ours)) == set(range(12)) and np.array_equal(ours[ours > 0], labels[ours > 0])
