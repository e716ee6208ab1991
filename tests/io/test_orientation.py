"""Exact reorientation: the same voxel at the same physical point, and back again bit for bit."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medseg.core.volume import Volume
from medseg.errors import GeometryError
from medseg.io import load
from medseg.io.orientation import reorientation_to, reoriented


def _assert_same_points(original: Volume, oriented: Volume, samples: int = 50) -> None:
    rng = np.random.default_rng(0)
    for _ in range(samples):
        index = [int(rng.integers(n)) for n in oriented.size_xyz]
        back = np.round(original.physical_to_index(oriented.index_to_physical(index))).astype(int)
        assert oriented.array[index[2], index[1], index[0]] == original.array[back[2], back[1], back[0]]


@pytest.mark.parametrize("relative", ["totalsegmentator/example_ct_sm.nii.gz", "totalsegmentator/example_ct_dicom",
                                      "pyradiomics_lung1/lung1_image.nrrd"])
def test_real_images_to_lps_and_back(ct_dir: Path, relative: str) -> None:
    volume = load(ct_dir / relative)
    change = reorientation_to(volume, "LPS")
    oriented = reoriented(volume, change)
    assert np.allclose(np.diag(oriented.direction), 1.0)  # x left, y posterior, z superior
    _assert_same_points(volume, oriented)
    assert np.array_equal(change.undo(oriented.array), volume.array)
    if relative.endswith(".nii.gz"):  # stored RAS: x and y are reversed, so the liver changes sides
        assert change.flip == (True, True, False)


def test_permuted_axes_and_class_arrays() -> None:
    # A sagittal acquisition: array x runs anterior->posterior, y superior->inferior, z right->left.
    direction = np.array([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0], [0.0, -1.0, 0.0]])
    array = np.arange(4 * 5 * 6, dtype=np.int32).reshape(4, 5, 6)
    volume = Volume(array, (0.5, 0.7, 2.0), (10.0, -20.0, 30.0), direction)
    change = reorientation_to(volume, "LPS")
    oriented = reoriented(volume, change)
    assert np.allclose(oriented.direction, np.eye(3))
    assert oriented.spacing_mm == (2.0, 0.5, 0.7)
    _assert_same_points(volume, oriented, samples=120)
    probabilities = np.stack([oriented.array, -oriented.array])  # (classes, z, y, x) on the oriented grid
    assert np.array_equal(change.undo(probabilities), np.stack([array, -array]))
    assert reorientation_to(oriented, "LPS").is_identity
    with pytest.raises(GeometryError, match="orientation code"):
        reorientation_to(volume, "LLS")
