"""Every transfer syntax in shared/data decodes to the pixels it decoded to before medseg dropped
its GPL-3.0 decoder (pylibjpeg-libjpeg), and the decoders that can read the same file agree.

DECODED is the oracle: the first 16 hex digits of sha256(dtype, shape, bytes) of
``medseg.io.load(file).array`` (HU, as the app shows them), recorded at commit 7d0cd7d with the
decoders shipped then: pylibjpeg-libjpeg 2.5.0 for JPEG Baseline/Extended 8-bit, JPEG Lossless
and JPEG-LS, pylibjpeg-openjpeg 2.6.0 for JPEG 2000, pydicom 3.0.2's RLE, and SimpleITK 2.5.7's
GDCM for the JPEG processes pydicom could not decode (12-bit Extended, 6/8, 10/12). The files
are every DICOM image in shared/data that is not stored native little endian, plus CTImage.dcm
in all 16 encodings (cornerstone_testimages); the native series take medseg's own reader.

Since the change (GDCM inside SimpleITK for the JPEG processes, Pillow for 8-bit Baseline,
pyjpegls for JPEG-LS) every lossless file still decodes to its recorded pixels. Five lossy
JPEG files do not, and CHANGED says why: the DCT of lossy JPEG may round differently from one
decoder to the next, and the former libjpeg was the one that differed. Pillow and GDCM agree
with each other exactly on JPEG Baseline, and GDCM's 12-bit Extended result equals its
Spectral Selection and Full Progression results (the same coefficients), which medseg read
with GDCM before as well. For those files the tests below check the error against the
lossless original instead, against the figures the former decoder reached.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pydicom
import pytest

from medseg.io import load

DECODED = {
    "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm": "5f291cfc24a8886f",  # int16 (2, 512, 512)
    "cornerstone_testimages/CT1_J2KR": "5aedc2660ed13d87",  # int16 (1, 512, 512)
    "cornerstone_testimages/CT2_J2KR": "f1ae6134000129c7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_BigEndianExplicitTransferSyntax_1.2.840.10008.1.2.2.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_DeflatedExplicitVRLittleEndianTransferSyntax_1.2.840.10008.1.2.1.99.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEG2000LosslessOnlyTransferSyntax_1.2.840.10008.1.2.4.90.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEG2000TransferSyntax_1.2.840.10008.1.2.4.91.dcm": "fdcad2e98386ba0f",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGLSLosslessTransferSyntax_1.2.840.10008.1.2.4.80.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGLSLossyTransferSyntax_1.2.840.10008.1.2.4.81.dcm": "d966c28cc8af6c53",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55.dcm": "81941ae2e48f2db2",  # float32 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess14SV1TransferSyntax_1.2.840.10008.1.2.4.70.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess14TransferSyntax_1.2.840.10008.1.2.4.57.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50.dcm": "f3ec9a52b7ae9d43",  # float32 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51.dcm": "55af4313a6c84cd6",  # float32 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53.dcm": "81941ae2e48f2db2",  # float32 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_LittleEndianExplicitTransferSyntax_1.2.840.10008.1.2.1.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_LittleEndianImplicitTransferSyntax_1.2.840.10008.1.2.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "cornerstone_testimages/CTImage.dcm_RLELosslessTransferSyntax_1.2.840.10008.1.2.5.dcm": "dc3ada32af9dcbd7",  # int16 (1, 512, 512)
    "pydicom_data/693_J2KR.dcm": "adb34608b5c8fa56",  # int16 (1, 512, 512)
    "pydicom_data/bad_sequence.dcm": "89ac3fd276a9586f",  # int16 (1, 512, 512)
    "pydicom_data/explicit_VR-UN.dcm": "7d189e4f97b4b959",  # int16 (1, 512, 512)
    "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm": "727fc679a03c40a0",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016573": "9ba1a787674c407a",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016574": "9c236599a55c65e1",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016575": "68b9cffdcee11dfd",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016576": "c06ea8fe3361545d",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016577": "cd036051b6cef0e9",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016578": "2b47db40958344e8",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016579": "dd1c5c264639400d",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016580": "ef5fc1aa035ba8e8",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016581": "4e65781d07cce3f8",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016582": "09ee2a0125ba1e3e",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016583": "0d2879fa444aa38a",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016584": "2cc5802785d429a6",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016585": "d5a591ad9bd47b22",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016586": "b77c5e73f0f83957",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016587": "ff9f40303872c047",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016588": "7c352426ac6cadc2",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016589": "5886bc2d125ce3ff",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016590": "cbcbef85e6e08627",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016591": "2c1635c3d9b3099e",  # int16 (1, 512, 512)
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016592": "091aa15b263a5c76",  # int16 (1, 512, 512)
}

# name -> (pixels now, what changed). Measured against the recorded pixels on 2026-12-04.
CHANGED = {
    "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm": (
        "b7c5bd8b717e5a2c", "12-bit JPEG Extended, libjpeg -> GDCM: 14,733 of 524,288 pixels differ by 1 HU"),
    "cornerstone_testimages/CTImage.dcm_JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50.dcm": (
        "3b5c4c6a602689f9", "8-bit Baseline, libjpeg -> Pillow (= GDCM): 4,472 of 262,144 pixels differ by 1 stored value (32.1 HU)"),
    "cornerstone_testimages/CTImage.dcm_JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51.dcm": (
        "813251fa0ddad440", "12-bit Extended, libjpeg -> GDCM: 10,998 of 262,144 pixels differ by 1 stored value (2.0 HU)"),
    "cornerstone_testimages/CTImage.dcm_JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53.dcm": (
        "813251fa0ddad440", "GDCM as before; medseg now applies the slope 2.0002442 itself: float32 rounding, <= 0.0004 HU"),
    "cornerstone_testimages/CTImage.dcm_JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55.dcm": (
        "813251fa0ddad440", "GDCM as before; medseg now applies the slope 2.0002442 itself: float32 rounding, <= 0.0004 HU"),
}
# Lossy JPEG variants of CTImage.dcm: |HU - lossless HU| with the former decoder (max, mean).
FORMER_LOSSY_ERROR = {
    "JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50": (64.22, 19.5750),
    "JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51": (35.63, 3.8346),
    "JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53": (35.63, 3.8444),
    "JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55": (35.63, 3.8444),
}

NATIVE = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1"}


def pixel_hash(array: np.ndarray) -> str:
    return hashlib.sha256(f"{array.dtype.str}{array.shape}".encode() + np.ascontiguousarray(array).tobytes()).hexdigest()[:16]


def dicom_images(ct_dir: Path) -> dict[str, str]:
    """Relative path -> transfer syntax of every DICOM image (not SEG) under ``ct_dir``."""
    found = {}
    for path in sorted(ct_dir.rglob("*")):
        if not path.is_file() or path.suffix in (".txt", ".csv", ".md", ".gz", ".nrrd", ".nii", ".json"):
            continue
        try:
            ds = pydicom.dcmread(path, stop_before_pixels=True)
        except pydicom.errors.InvalidDicomError:
            continue
        if ds.get("Rows") and ds.get("Modality") != "SEG":
            found[str(path.relative_to(ct_dir))] = str(ds.file_meta.get("TransferSyntaxUID", ""))
    return found


def test_oracle_covers_every_transfer_syntax_and_every_encoded_file(ct_dir: Path) -> None:
    images = dicom_images(ct_dir)
    syntaxes = {syntax for syntax in images.values()}
    covered = {images[name] for name in DECODED}
    assert syntaxes == covered, f"transfer syntaxes with no recorded pixels: {sorted(syntaxes - covered)}"
    assert len(syntaxes) == 15  # CTImage.dcm's 16 files: implicit VR twice (the original and its copy)
    encoded = {name for name, syntax in images.items() if syntax not in NATIVE}
    assert encoded <= set(DECODED), f"encoded files with no recorded pixels: {sorted(encoded - set(DECODED))}"


@pytest.mark.parametrize("name", sorted(set(DECODED) - set(CHANGED)))
def test_decodes_to_the_recorded_pixels(ct_dir: Path, name: str) -> None:
    assert pixel_hash(load(ct_dir / name).array) == DECODED[name]


@pytest.mark.parametrize("name", sorted(CHANGED))
def test_lossy_jpeg_decodes_to_the_pixels_measured_at_the_change(ct_dir: Path, name: str) -> None:
    assert CHANGED[name][0] != DECODED[name]
    assert pixel_hash(load(ct_dir / name).array) == CHANGED[name][0], CHANGED[name][1]


@pytest.mark.parametrize("variant", sorted(FORMER_LOSSY_ERROR))
def test_lossy_jpeg_error_stays_what_the_former_decoder_gave(ct_dir: Path, variant: str) -> None:
    lossless = load(ct_dir / "cornerstone_testimages/CTImage.dcm").array.astype(np.float64)
    error = np.abs(load(ct_dir / f"cornerstone_testimages/CTImage.dcm_{variant}.dcm").array - lossless)
    former_max, former_mean = FORMER_LOSSY_ERROR[variant]
    assert error.max() <= former_max + 0.01
    assert abs(error.mean() - former_mean) <= 0.02 * former_mean  # measured: +1.3 % (Baseline), +0.26 % (Extended)


def test_enhanced_ct_frames_equal_gdcm_whole_file(ct_dir: Path) -> None:
    """SimpleITK reads the two-frame Enhanced CT with GDCM as a whole, in position order."""
    import SimpleITK as sitk

    path = ct_dir / "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm"
    whole = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    np.testing.assert_array_equal(load(path).array, whole[::-1])  # medseg keeps the file's frame order


# Encoded files (not the uncompressed CTImage.dcm variants), one slice of the 20-slice series.
ENCODED = sorted(name for name in DECODED if name != "cornerstone_testimages/CTImage.dcm"
                 and not any(word in name for word in ("Endian", "Deflated", "example_ct_dicom/"))) + [
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016573"]

# The pydicom plugins medseg ships for each syntax (pyproject.toml); GDCM reads all of them too.
PLUGINS = {"1.2.840.10008.1.2.4.50": {"pillow"}, "1.2.840.10008.1.2.4.80": {"pyjpegls"}, "1.2.840.10008.1.2.4.81": {"pyjpegls"},
           "1.2.840.10008.1.2.4.90": {"pylibjpeg", "pillow"}, "1.2.840.10008.1.2.4.91": {"pylibjpeg", "pillow"},
           "1.2.840.10008.1.2.5": {"pydicom"}}


@pytest.mark.parametrize("name", ENCODED)
def test_every_decoder_that_reads_a_file_gives_the_same_stored_values(ct_dir: Path, name: str) -> None:
    """pydicom's plugins that are installed for the syntax, and GDCM, decode the same values."""
    from pydicom.pixels.decoders.base import get_decoder

    from medseg.io.dicom_decode import _gdcm_read

    ds = pydicom.dcmread(ct_dir / name)
    decoded = {"gdcm": _gdcm_read(str(ct_dir / name))}
    try:
        plugins = sorted(get_decoder(ds.file_meta.TransferSyntaxUID).available_plugins)
    except NotImplementedError:  # JPEG Spectral Selection / Full Progression: GDCM only
        plugins = []
    for plugin in plugins:
        try:
            decoded[plugin] = pydicom.pixels.pixel_array(ds, decoding_plugin=plugin).reshape(decoded["gdcm"].shape)
        except RuntimeError as error:  # Pillow reads 8-bit JPEG only
            assert plugin == "pillow" and ds.BitsStored > 8, error
    for plugin, values in decoded.items():
        np.testing.assert_array_equal(values, decoded["gdcm"], err_msg=f"{plugin} differs from GDCM")
    assert PLUGINS.get(ds.file_meta.TransferSyntaxUID, set()) <= set(decoded), "a permissive decoder plugin is missing"
