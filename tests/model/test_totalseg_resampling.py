"""TotalSegmentator's input resampling made slab by slab (so a Cancel is seen between slabs) against
scipy's whole ``ndimage.zoom``, the call TotalSegmentator makes; per-axis spacings included."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import ndimage

from medseg.errors import Cancelled
from medseg.model.totalseg import geometry
from medseg.progress import CancelToken


def _totalsegmentator(array: np.ndarray, zooms: np.ndarray, target) -> np.ndarray:
    """resampling.change_spacing on get_fdata(): zoom = header zooms / new spacing, order 1, mode nearest, int32."""
    zoom = np.asarray(zooms, dtype=np.float32) / np.array(target if np.ndim(target) else [target] * 3, dtype=np.float64)
    return ndimage.zoom(np.asarray(array, np.float64), zoom, order=1, mode="nearest").astype(np.int32)  # get_fdata()


@pytest.mark.parametrize("seed", range(6))
def test_slabs_equal_the_whole_zoom_bit_for_bit(seed, monkeypatch):
    monkeypatch.setattr(geometry, "RESAMPLE_SLAB_VOXELS", 700)  # many slabs, of uneven sizes
    rng = np.random.default_rng(seed)
    for _ in range(25):
        shape = tuple(int(n) for n in rng.integers(4, 48, 3))
        zooms = rng.uniform(0.3, 5.0, 3).astype(np.float32)
        target = [float(rng.choice([0.5, 0.703125, 1.0, 1.5, 3.0, 6.0, 0.8046879768371582])) for _ in range(3)]
        # large values: the int32 truncation keeps six more digits, so any difference in the
        # interpolation coordinates shows
        array = rng.normal(0, 5e8, shape)
        if rng.random() < 0.5:
            array = np.asfortranarray(array).T  # a transposed view, as the pipeline passes the Volume's array
        ours = geometry.resample_to_spacing(array, zooms, target)
        expected = _totalsegmentator(array, zooms, target)
        assert ours.dtype == np.int32 and ours.shape == expected.shape
        assert np.array_equal(ours, expected), (shape, zooms, target)


def test_an_isotropic_spacing_and_an_equal_one():
    rng = np.random.default_rng(7)
    array = rng.integers(-1024, 3000, (40, 30, 20)).astype(np.int16)
    zooms = np.array([0.7, 0.7, 2.5], dtype=np.float32)
    assert np.array_equal(geometry.resample_to_spacing(array, zooms, 1.5), _totalsegmentator(array, zooms, 1.5))
    # equal spacing: TotalSegmentator leaves the image alone (no int32 cast either)
    same = geometry.resample_to_spacing(array, np.array([1.5, 1.5, 1.5], np.float32), [1.5, 1.5, 1.5])
    assert same is array


def test_a_cancel_during_the_resampling_stops_it_between_slabs(monkeypatch):
    token = CancelToken()
    slabs = []
    real = geometry._zoom_shift

    def one_slab(*arguments):
        real(*arguments)
        slabs.append(arguments[3].shape)
        if len(slabs) == 2:
            token.cancel()  # the user presses Cancel while the third slab would be next

    monkeypatch.setattr(geometry, "_zoom_shift", one_slab)
    monkeypatch.setattr(geometry, "RESAMPLE_SLAB_VOXELS", 64 * 64 * 4)
    array = np.zeros((96, 96, 120), dtype=np.int16)
    with pytest.raises(Cancelled):
        geometry.resample_to_spacing(array, np.array([1.0, 1.0, 1.0], np.float32), 1.5, cancel=token)
    assert len(slabs) == 2  # the other 14 slabs of 4 slices were never computed
