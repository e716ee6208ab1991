"""NIfTI, NRRD and MetaImage headers that lie or say nothing (issue 43), each made here from the real
TotalSegmentator CT: one spacing rule for every format, header lies refused with the file named, gzip's
CRC checked, NaN voxels said, NIfTI-2 read. Oracles: SimpleITK's reading of the clean file, Python's
gzip module, nibabel's voxel values."""

from __future__ import annotations

import gzip
import re
import struct
import zlib
from pathlib import Path

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk
from probes import run_medseg

from medseg.errors import GeometryError, ImageFormatError
from medseg.io import load

SOURCE = ("totalsegmentator", "example_ct_sm.nii.gz")


@pytest.fixture(scope="module")
def clean(ct_dir: Path) -> sitk.Image:
    image = sitk.ReadImage(str(ct_dir.joinpath(*SOURCE)))
    for key in image.GetMetaDataKeys():
        image.EraseMetaData(key)
    return image


def _same_as(volume, image: sitk.Image) -> None:
    """``volume`` holds the voxels and geometry SimpleITK reads from the clean file."""
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(image))
    np.testing.assert_allclose(volume.origin_mm, image.GetOrigin(), atol=1e-4)
    np.testing.assert_allclose(volume.direction.reshape(-1), image.GetDirection(), atol=1e-6)


def _text_image(clean: sitk.Image, path: Path, edit) -> Path:
    """The clean image written by SimpleITK as ``path`` (.mha or .nrrd), its header changed by ``edit(text)``."""
    sitk.WriteImage(clean, str(path))
    data = path.read_bytes()
    end = data.index(b"ElementDataFile = LOCAL\n") + 24 if path.suffix == ".mha" else data.index(b"\n\n") + 2
    path.write_bytes(edit(data[:end].decode("latin-1")).encode("latin-1") + data[end:])
    return path


def _field(key: str, value: str | None, separator: str):
    """Set (None: remove) a header field; a new MetaImage field goes before ElementDataFile, which ends it."""
    def edit(text: str) -> str:
        line = "" if value is None else f"{key}{separator}{value}\n"
        pattern = rf"^{re.escape(key)}\s*{re.escape(separator.strip())}.*\n"
        if re.search(pattern, text, flags=re.M):
            return re.sub(pattern, line, text, count=1, flags=re.M)
        assert "ElementDataFile" in text, f"{key} is not in the header"
        return text.replace("ElementDataFile", line + "ElementDataFile")
    return edit


@pytest.mark.parametrize("suffix, key, separator", [(".mha", "ElementSpacing", " = "),
                                                    (".nrrd", "space directions", ": ")])
def test_a_header_without_a_spacing_is_read_as_1_mm_and_says_so(clean, tmp_path, suffix, key, separator) -> None:
    path = _text_image(clean, tmp_path / f"nospacing{suffix}", _field(key, None, separator))
    volume = load(path)
    assert volume.spacing_mm == (1.0, 1.0, 1.0)
    # a NRRD without space directions has no orientation either (the MetaImage keeps its TransformMatrix)
    assert [f.kind for f in volume.meta.findings] == ["no_pixel_spacing"] + (["no_orientation"] if suffix == ".nrrd"
                                                                             else [])
    assert "1 mm is assumed" in volume.meta.findings[0].message
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(clean))
    run = run_medseg("convert", "--quiet", path, tmp_path / "out.nii.gz")  # the note reaches the terminal
    assert run.returncode == 0 and "finding [no_pixel_spacing]" in run.stderr, run.stderr


UNUSABLE = [(".mha", "ElementSpacing", " = ", "0 0 0", "0 mm along x"),
            (".mha", "ElementSpacing", " = ", "nan nan nan", "nan mm along x"),
            (".mha", "ElementSpacing", " = ", "-3 -3 -3", "-3 mm along x"),
            (".nrrd", "space directions", ": ", "(0,0,0) (0,-3,0) (0,0,3)", "0 mm along x"),
            (".nrrd", "space directions", ": ", "(nan,0,0) (0,-3,0) (0,0,3)", "nan mm along x")]


@pytest.mark.parametrize("suffix, key, separator, value, said", UNUSABLE)
def test_an_unusable_spacing_is_refused_unless_given(clean, tmp_path, suffix, key, separator, value, said) -> None:
    path = _text_image(clean, tmp_path / f"bad{suffix}", _field(key, value, separator))
    with pytest.raises(GeometryError, match=f"the voxel spacing in the header is {re.escape(said)}") as caught:
        load(path)
    assert path.name in str(caught.value) and "--spacing" in str(caught.value)
    given = load(path, spacing_mm=(3.0, 3.0, 3.0))  # the user's spacing reaches the header check
    assert given.spacing_mm == (3.0, 3.0, 3.0)
    kinds = [f.kind for f in given.meta.findings]
    assert "spacing_override" in kinds
    np.testing.assert_array_equal(given.array, sitk.GetArrayFromImage(clean))
    if value.startswith("-3"):  # the axis is not mirrored by the sign, and that is said
        assert "negative_spacing" in kinds
        np.testing.assert_allclose(given.direction.reshape(-1), clean.GetDirection(), atol=1e-6)
    if "(0,0,0)" in value or "(nan" in value:  # x's direction is made from the others: said
        assert "orientation_assumed" in kinds
        np.testing.assert_allclose(given.direction.reshape(-1), clean.GetDirection(), atol=1e-6)


def _nifti(clean: sitk.Image, path: Path) -> bytes:
    sitk.WriteImage(clean, str(path))
    return path.read_bytes()


def test_a_nifti_with_a_0_spacing_in_its_sform_is_refused_in_words_then_read_with_the_spacing(clean, tmp_path) -> None:
    data = bytearray(_nifti(clean, tmp_path / "clean.nii"))
    sform_code = struct.unpack("<h", data[254:256])[0]
    assert sform_code > 0
    data[80:84] = struct.pack("<f", 0.0)  # pixdim[1]
    data[280:284] = struct.pack("<f", 0.0)  # srow_x[0]: the x column has length 0
    path = tmp_path / "zero.nii"
    path.write_bytes(bytes(data))
    # not ITK's "only supports orthonormal direction cosines"
    with pytest.raises(GeometryError, match="the voxel spacing in the header is 0 mm along x"):
        load(path)
    run = run_medseg("convert", "--quiet", path, tmp_path / "out.nii.gz", "--spacing", "3", "3", "3")
    assert run.returncode == 0, run.stderr
    assert "finding [spacing_override]" in run.stderr and "finding [orientation_assumed]" in run.stderr
    out = sitk.ReadImage(str(tmp_path / "out.nii.gz"))
    np.testing.assert_array_equal(sitk.GetArrayFromImage(out), sitk.GetArrayFromImage(clean))
    assert out.GetSpacing() == (3.0, 3.0, 3.0)


@pytest.mark.parametrize("transform", ["sform", "qform"])
def test_a_nifti_2_file_is_read_as_its_nifti_1_twin(clean, tmp_path, transform) -> None:
    """nibabel writes both files from the same voxels and affine; SimpleITK reads the NIfTI-1 (the oracle)."""
    sitk.WriteImage(clean, str(tmp_path / "source.nii.gz"))
    source = nib.load(str(tmp_path / "source.nii.gz"))
    voxels, affine = np.asanyarray(source.dataobj), source.affine
    for kind, name in ((nib.Nifti1Image, "one.nii.gz"), (nib.Nifti2Image, "two.nii.gz")):
        image = kind(voxels, affine)
        if transform == "qform":
            image.set_qform(affine, code=1)
            image.set_sform(None, code=0)
        else:
            image.set_sform(affine, code=2)
            image.set_qform(None, code=0)
        nib.save(image, str(tmp_path / name))
    oracle = sitk.ReadImage(str(tmp_path / "one.nii.gz"))
    volume = load(tmp_path / "two.nii.gz")
    _same_as(volume, oracle)
    np.testing.assert_allclose(volume.spacing_mm, oracle.GetSpacing(), atol=1e-6)


def _mha(clean: sitk.Image, tmp_path: Path, key: str, value: str) -> Path:
    return _text_image(clean, tmp_path / "lie.mha", _field(key, value, " = ") if key != "HeaderSize" else
                       lambda text: text.replace("ElementDataFile", f"HeaderSize = {value}\nElementDataFile"))


@pytest.mark.parametrize("key, value, said", [("CompressedData", "True", "compressed voxel data is corrupt"),
                                              ("ElementType", "MET_STRING", "voxel type 'MET_STRING'"),
                                              ("HeaderSize", "100000000000", "voxels start 100000000000 bytes"),
                                              ("ElementNumberOfChannels", "3", "3 values per voxel")])
def test_a_metaimage_header_that_lies_is_refused(clean, tmp_path, key, value, said) -> None:
    path = _mha(clean, tmp_path, key, value)
    with pytest.raises(ImageFormatError, match=re.escape(said)) as caught:
        load(path)
    assert path.name in str(caught.value)


@pytest.mark.parametrize("value", [float("nan"), float("inf"), 100.0])
def test_a_nifti_whose_vox_offset_is_impossible_is_refused(clean, tmp_path, value) -> None:
    data = bytearray(_nifti(clean, tmp_path / "clean.nii"))
    data[108:112] = struct.pack("<f", value)
    path = tmp_path / "offset.nii"
    path.write_bytes(bytes(data))
    with pytest.raises(ImageFormatError, match="the voxels start at byte") as caught:
        load(path)
    assert path.name in str(caught.value)


@pytest.mark.parametrize("where", [0.3, 0.6, 0.9])
def test_a_bit_flip_in_a_nifti_gz_is_caught_by_its_crc(clean, tmp_path, where) -> None:
    packed = bytearray(gzip.compress(_nifti(clean, tmp_path / "clean.nii"), mtime=0))
    packed[int(len(packed) * where)] ^= 0x10
    path = tmp_path / "flipped.nii.gz"
    path.write_bytes(bytes(packed))
    with pytest.raises((OSError, EOFError, zlib.error)):  # the oracle: Python's gzip refuses the same bytes
        gzip.decompress(bytes(packed))
    with pytest.raises(ImageFormatError, match="compressed voxel data is corrupt") as caught:
        load(path)
    assert path.name in str(caught.value)
    run = run_medseg("convert", "--quiet", path, tmp_path / "out.nii.gz")
    assert run.returncode == 1 and "Traceback" not in run.stderr and not (tmp_path / "out.nii.gz").exists()


def test_a_bgzip_nifti_with_several_members_still_reads(clean, tmp_path) -> None:
    raw = _nifti(clean, tmp_path / "clean.nii")
    path = tmp_path / "members.nii.gz"
    path.write_bytes(gzip.compress(raw[:5000], mtime=0) + gzip.compress(raw[5000:], mtime=0) + bytes(28))
    _same_as(load(path), clean)


def test_a_nifti_slice_of_nan_is_said_with_the_count(clean, tmp_path) -> None:
    """ITK makes a NIfTI's NaN voxels 0 (water) without a word: medseg counts them from the file."""
    image = nib.load(_clean_path(clean, tmp_path))
    voxels = np.asanyarray(image.dataobj).astype(np.float32)
    voxels[:, :, 15] = np.nan  # one whole slice (z = 15)
    voxels[60, 50, 3] = np.inf
    path = tmp_path / "nan.nii.gz"
    nib.save(nib.Nifti1Image(voxels, image.affine), str(path))
    expected = int(np.count_nonzero(~np.isfinite(nib.load(str(path)).get_fdata(dtype=np.float32))))
    volume = load(path)
    findings = [f for f in volume.meta.findings if f.kind == "non_finite_voxels"]
    assert len(findings) == 1 and findings[0].details["count"] == expected
    assert findings[0].details["whole_slices"] == [15]
    assert "1 of the 30 slices (16) hold no number at all" in findings[0].message
    assert np.isfinite(volume.array).all() and (volume.array[15] == volume.array.min()).all()
    voxels[:] = np.nan
    nib.save(nib.Nifti1Image(voxels, image.affine), str(tmp_path / "all_nan.nii.gz"))
    with pytest.raises(GeometryError, match="every voxel of the image is NaN"):
        load(tmp_path / "all_nan.nii.gz")


def _clean_path(clean: sitk.Image, tmp_path: Path) -> str:
    path = tmp_path / "clean.nii.gz"
    sitk.WriteImage(clean, str(path))
    return str(path)


def _shared_niftis(ct_dir: Path) -> list[Path]:
    return sorted(ct_dir.rglob("*.nii.gz"))


def test_every_shared_nifti_reads_as_simpleitk_reads_it(ct_dir) -> None:
    """A .nii.gz is inflated once (its CRC checked) and its voxels taken from there: the oracle is
    SimpleITK's own read of the same file (voxels, their type, and the geometry)."""
    paths = _shared_niftis(ct_dir)
    assert len(paths) >= 4
    for path in paths:
        oracle = sitk.ReadImage(str(path))
        volume = load(path)
        expected = sitk.GetArrayFromImage(oracle)
        assert volume.array.dtype == expected.dtype, path
        np.testing.assert_array_equal(volume.array, expected)
        np.testing.assert_allclose(volume.spacing_mm, oracle.GetSpacing(), atol=1e-6)
        _same_as(volume, oracle)


@pytest.mark.parametrize("slope, inter", [(2.0, -5.0), (0.5, 0.0), (1.0, 100.0)])
def test_a_scaled_nifti_gz_reads_as_simpleitk_reads_it(clean, tmp_path, slope, inter) -> None:
    data = bytearray(_nifti(clean, tmp_path / "clean.nii"))
    data[112:120] = struct.pack("<ff", slope, inter)  # scl_slope, scl_inter over the stored int16
    path = tmp_path / "scaled.nii.gz"
    path.write_bytes(gzip.compress(bytes(data), mtime=0))
    oracle = sitk.ReadImage(str(path))
    volume = load(path)
    expected = sitk.GetArrayFromImage(oracle)
    assert volume.array.dtype == expected.dtype == np.float32
    np.testing.assert_array_equal(volume.array, expected)
