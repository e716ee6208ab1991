"""One real CT slice in 16 transfer syntaxes: lossless ones decode to identical HU, lossy ones
within the tolerance the data README measured; the JPEG processes go through GDCM (SimpleITK).
tests/io/test_decoded_pixels.py checks every encoded file against pydicom or GDCM, and that every
decoder that reads a file agrees."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

import medseg.io.dicom_decode as dicom_decode
from medseg.errors import UnsupportedTransferSyntax
from medseg.io import load

LOSSLESS = [
    "LittleEndianImplicitTransferSyntax_1.2.840.10008.1.2",
    "LittleEndianExplicitTransferSyntax_1.2.840.10008.1.2.1",
    "BigEndianExplicitTransferSyntax_1.2.840.10008.1.2.2",
    "DeflatedExplicitVRLittleEndianTransferSyntax_1.2.840.10008.1.2.1.99",
    "JPEGProcess14TransferSyntax_1.2.840.10008.1.2.4.57",
    "JPEGProcess14SV1TransferSyntax_1.2.840.10008.1.2.4.70",
    "JPEGLSLosslessTransferSyntax_1.2.840.10008.1.2.4.80",
    "JPEG2000LosslessOnlyTransferSyntax_1.2.840.10008.1.2.4.90",
    "RLELosslessTransferSyntax_1.2.840.10008.1.2.5",
]
# (variant, max |HU error|) -- the JPEG Baseline/Extended ones store rescaled data (slope 32.12 / 2.0).
LOSSY = [
    ("JPEG2000TransferSyntax_1.2.840.10008.1.2.4.91", 5),
    ("JPEGLSLossyTransferSyntax_1.2.840.10008.1.2.4.81", 1),
    ("JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50", 64),
    ("JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51", 36),
    ("JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53", 36),  # pydicom has no decoder: GDCM
    ("JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55", 36),  # pydicom has no decoder: GDCM
]


@pytest.fixture(scope="module")
def reference_hu(ct_dir: Path) -> np.ndarray:
    volume = load(ct_dir / "cornerstone_testimages/CTImage.dcm")
    assert volume.size_xyz == (512, 512, 1)
    # Stored -2000..2402 with intercept -1024 (what GDCM reads too).
    assert (int(volume.array.min()), int(volume.array.max())) == (-3024, 1378)
    path = ct_dir / "cornerstone_testimages/CTImage.dcm"
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(sitk.ReadImage(str(path))))
    return volume.array.astype(np.float64)


def variant(ct_dir: Path, name: str) -> Path:
    return ct_dir / f"cornerstone_testimages/CTImage.dcm_{name}.dcm"


@pytest.mark.parametrize("name", LOSSLESS)
def test_lossless_variants_decode_to_identical_hu(ct_dir: Path, reference_hu: np.ndarray, name: str) -> None:
    volume = load(variant(ct_dir, name))
    assert volume.array.dtype == np.int16
    np.testing.assert_array_equal(volume.array, reference_hu)
    assert volume.meta.transfer_syntaxes == [name.rsplit("_", 1)[1]]


@pytest.mark.parametrize("name, tolerance", LOSSY)
def test_lossy_variants_are_close_in_hu(ct_dir: Path, reference_hu: np.ndarray, name: str, tolerance: int) -> None:
    volume = load(variant(ct_dir, name))
    error = np.abs(volume.array.astype(np.float64) - reference_hu)
    assert error.max() <= tolerance + 0.5
    assert error.mean() < max(1.0, tolerance / 2)


@pytest.mark.parametrize("name", ["JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55",
                                  "JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51"])
def test_gdcm_path_matches_simpleitk(ct_dir: Path, name: str) -> None:
    path = variant(ct_dir, name)
    volume = load(path)
    expected = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))  # GDCM applies the slope (2.0002442 / 2.0) itself
    assert volume.array.dtype == np.float32
    np.testing.assert_allclose(volume.array, expected.astype(np.float32), atol=1e-3)


def test_undecodable_syntax_names_the_syntax_and_the_fix(ct_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_gdcm(ref: str) -> np.ndarray:
        raise RuntimeError("GDCM is not available")

    monkeypatch.setattr(dicom_decode, "_gdcm_read", no_gdcm)
    path = variant(ct_dir, "JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53")
    with pytest.raises(UnsupportedTransferSyntax) as caught:
        load(path)
    text = str(caught.value)
    assert str(path) in text and "Process 6 & 8" in text and "1.2.840.10008.1.2.4.53" in text
    assert "pip install" in text


def test_j2k_lossless_equals_uncompressed(ct_dir: Path) -> None:
    uncompressed = load(ct_dir / "pydicom_data/693_UNCR.dcm")
    j2k = load(ct_dir / "pydicom_data/693_J2KR.dcm")
    np.testing.assert_array_equal(j2k.array, uncompressed.array)
    lossy_decompressed = load(ct_dir / "pydicom_data/693_UNCI.dcm")
    assert not np.array_equal(lossy_decompressed.array, uncompressed.array)


def test_j2k_pixel_representation_mismatch_decodes_signed(ct_dir: Path) -> None:
    volume = load(ct_dir / "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm")
    assert int(volume.array.min()) == -2000


@pytest.mark.parametrize("name", ["cornerstone_testimages/CT1_J2KR", "cornerstone_testimages/CT2_J2KR",
                                  "pydicom_data/explicit_VR-UN.dcm", "pydicom_data/bad_sequence.dcm",
                                  "pydicom_wheel_testfiles/CT_small.dcm"])
def test_single_slices_match_simpleitk(ct_dir: Path, name: str) -> None:
    path = ct_dir / name
    volume = load(path)
    reference = sitk.ReadImage(str(path))
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(reference))
    np.testing.assert_allclose(volume.origin_mm, reference.GetOrigin(), atol=1e-3)
    np.testing.assert_allclose(volume.spacing_mm[:2], reference.GetSpacing()[:2], atol=1e-5)
    np.testing.assert_allclose(volume.direction[:, :2].T.reshape(-1),
                               np.asarray(reference.GetDirection()).reshape(3, 3)[:, :2].T.reshape(-1), atol=1e-5)
    assert "single_slice" in {f.kind for f in volume.meta.findings}


@pytest.mark.parametrize("name", [
    "cornerstone_testimages/CTImage.dcm",  # implicit VR, signed
    "pydicom_data/693_UNCR.dcm",  # explicit VR, signed, 14 bits stored
    "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series/S2010_I10",  # unsigned, 12 bits stored
    "dcmqi_ct3slice_masks/image/01.dcm",
])
def test_native_fast_path_equals_pydicom_decode(ct_dir: Path, name: str) -> None:
    import pydicom

    from medseg.io import scan

    path = ct_dir / name
    (series,) = scan(path).series
    assert series.slices[0].pixel_offset is not None  # read straight from the file, no second parse
    ds = pydicom.dcmread(path)
    expected = ds.pixel_array.astype(np.int32) * int(ds.RescaleSlope) + int(ds.RescaleIntercept)
    np.testing.assert_array_equal(load(path).array[0], expected)


def test_truncated_native_pixel_data_names_the_file(ct_dir: Path, tmp_path: Path) -> None:
    from medseg.errors import DicomError

    data = (ct_dir / "pydicom_data/693_UNCR.dcm").read_bytes()
    cut = tmp_path / "cut.dcm"
    cut.write_bytes(data[: len(data) - 1000])
    with pytest.raises(DicomError) as caught:
        load(cut)
    assert str(cut) in str(caught.value) and "truncated" in str(caught.value)
