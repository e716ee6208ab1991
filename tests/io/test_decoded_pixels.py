"""Every transfer syntax in shared/data decodes to the pixels it decoded to before medseg dropped
its GPL-3.0 decoder (pylibjpeg-libjpeg), and the decoders that can read the same file agree.

DECODED is the oracle: the first 16 hex digits of sha256(dtype, shape, bytes) of
``medseg.io.load(file).array`` (HU, as the app shows them), recorded at commit 7d0cd7d with the
decoders shipped then: pylibjpeg-libjpeg 2.5.0 for JPEG Baseline/Extended 8-bit, JPEG Lossless
and JPEG-LS, pylibjpeg-openjpeg 2.6.0 for JPEG 2000, pydicom 3.0.2's RLE, and SimpleITK 2.5.7's
GDCM for the JPEG processes pydicom could not decode (12-bit Extended, 6/8, 10/12). The files
are every DICOM image in shared/data that is not stored native little endian, plus CTImage.dcm
in all 16 encodings (cornerstone_testimages); the native series take medseg's own reader.
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


@pytest.mark.parametrize("name", sorted(DECODED))
def test_decodes_to_the_recorded_pixels(ct_dir: Path, name: str) -> None:
    assert pixel_hash(load(ct_dir / name).array) == DECODED[name]
