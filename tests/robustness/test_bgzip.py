"""A NIfTI compressed as several gzip members (bgzip, as samtools/htslib write it) is a valid
file and opens; the same file cut short is still refused as truncated."""

from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.errors import ImageFormatError
from medseg.io.image_files import read_image


def _nifti_bytes(tmp_path: Path, array: np.ndarray) -> bytes:
    plain = tmp_path / "plain.nii"
    image = sitk.GetImageFromArray(array)
    image.SetSpacing((0.8, 0.8, 2.5))
    sitk.WriteImage(image, str(plain))
    return plain.read_bytes()


def _bgzip(data: bytes, block: int = 65280) -> bytes:
    """What bgzip writes: independent gzip members of at most 64 KiB each, then an empty one."""
    members = [gzip.compress(data[i:i + block]) for i in range(0, len(data), block)]
    return b"".join(members) + gzip.compress(b"")


@pytest.fixture
def ct_slab(ct_dir: Path) -> np.ndarray:
    volume = read_image(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    return np.ascontiguousarray(volume.array[:8])


def test_a_bgzip_nifti_opens_with_every_voxel(tmp_path: Path, ct_slab: np.ndarray) -> None:
    path = tmp_path / "ct.nii.gz"
    path.write_bytes(_bgzip(_nifti_bytes(tmp_path, ct_slab)))
    volume = read_image(path)
    np.testing.assert_array_equal(volume.array, ct_slab)
    assert volume.spacing_mm == pytest.approx((0.8, 0.8, 2.5))


def test_a_bgzip_nifti_cut_short_is_still_refused(tmp_path: Path, ct_slab: np.ndarray) -> None:
    data = _bgzip(_nifti_bytes(tmp_path, ct_slab))
    path = tmp_path / "cut.nii.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ImageFormatError, match="truncated") as caught:
        read_image(path)
    assert "cut.nii.gz" in str(caught.value)
