"""Every encoded DICOM image in shared/data decodes to what independent decoders make of it.

The oracle is pydicom (with its decoder plugins installed here, then the Modality LUT: HU), or, for
the JPEG processes pydicom has no decoder for (12-bit Extended, 6/8, 10/12, Lossless Process 14),
GDCM through SimpleITK's reader — not medseg's own decode, whose hashes this file used to record.
The files are every DICOM image in shared/data that is not stored native little endian, plus
CTImage.dcm in all 16 encodings (cornerstone_testimages) and the 20 J2K slices of
totalsegmentator/example_ct_dicom. medseg dropped its GPL-3.0 decoder (pylibjpeg-libjpeg) for GDCM
inside SimpleITK, Pillow for 8-bit Baseline and pyjpegls for JPEG-LS: for lossless files every
decoder gives the same values; for lossy JPEG the DCT may round differently from one decoder to
the next, so medseg must give what the decoders it ships give, and the error against the lossless
original must stay within what the former decoder reached.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pydicom
import pytest

from medseg.io import load

ENCODED_FILES = [
    "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm",
    "cornerstone_testimages/CT1_J2KR",
    "cornerstone_testimages/CT2_J2KR",
    "cornerstone_testimages/CTImage.dcm",
    "cornerstone_testimages/CTImage.dcm_BigEndianExplicitTransferSyntax_1.2.840.10008.1.2.2.dcm",
    "cornerstone_testimages/CTImage.dcm_DeflatedExplicitVRLittleEndianTransferSyntax_1.2.840.10008.1.2.1.99.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEG2000LosslessOnlyTransferSyntax_1.2.840.10008.1.2.4.90.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEG2000TransferSyntax_1.2.840.10008.1.2.4.91.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGLSLosslessTransferSyntax_1.2.840.10008.1.2.4.80.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGLSLossyTransferSyntax_1.2.840.10008.1.2.4.81.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess14SV1TransferSyntax_1.2.840.10008.1.2.4.70.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess14TransferSyntax_1.2.840.10008.1.2.4.57.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53.dcm",
    "cornerstone_testimages/CTImage.dcm_LittleEndianExplicitTransferSyntax_1.2.840.10008.1.2.1.dcm",
    "cornerstone_testimages/CTImage.dcm_LittleEndianImplicitTransferSyntax_1.2.840.10008.1.2.dcm",
    "cornerstone_testimages/CTImage.dcm_RLELosslessTransferSyntax_1.2.840.10008.1.2.5.dcm",
    "pydicom_data/693_J2KR.dcm",
    "pydicom_data/bad_sequence.dcm",
    "pydicom_data/explicit_VR-UN.dcm",
    "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016573",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016574",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016575",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016576",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016577",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016578",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016579",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016580",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016581",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016582",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016583",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016584",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016585",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016586",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016587",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016588",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016589",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016590",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016591",
    "totalsegmentator/example_ct_dicom/CT.1.3.12.2.1107.5.1.4.60064.30000022120808113428000016592",
]

# Lossy JPEG variants of CTImage.dcm: |HU - lossless HU| with the former decoder, libjpeg (max, mean).
FORMER_LOSSY_ERROR = {
    "JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50": (64.22, 19.5750),
    "JPEGProcess2_4TransferSyntax_1.2.840.10008.1.2.4.51": (35.63, 3.8346),
    "JPEGProcess6_8TransferSyntax_1.2.840.10008.1.2.4.53": (35.63, 3.8444),
    "JPEGProcess10_12TransferSyntax_1.2.840.10008.1.2.4.55": (35.63, 3.8444),
}

NATIVE = {"1.2.840.10008.1.2", "1.2.840.10008.1.2.1"}


def oracle_hu(path: Path) -> tuple[np.ndarray, str]:
    """HU as pydicom decodes them (its plugins, then the Modality LUT), else as GDCM does (SimpleITK);
    frames (z, y, x) in the file's order. Returns the array and which decoder made it."""
    import SimpleITK as sitk
    from pydicom.pixels import apply_modality_lut

    ds = pydicom.dcmread(path)
    try:
        stored = ds.pixel_array
    except (NotImplementedError, RuntimeError):  # no pydicom decoder for this JPEG process
        return sitk.GetArrayFromImage(sitk.ReadImage(str(path))), "gdcm"
    hu = apply_modality_lut(stored, ds)
    return (hu[None] if hu.ndim == 2 else hu), "pydicom"


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


def test_every_transfer_syntax_and_every_encoded_file_is_checked(ct_dir: Path) -> None:
    images = dicom_images(ct_dir)
    syntaxes = {syntax for syntax in images.values()}
    covered = {images[name] for name in ENCODED_FILES}
    assert syntaxes == covered, f"transfer syntaxes not checked: {sorted(syntaxes - covered)}"
    assert len(syntaxes) == 15  # CTImage.dcm's 16 files: implicit VR twice (the original and its copy)
    encoded = {name for name, syntax in images.items() if syntax not in NATIVE}
    assert encoded <= set(ENCODED_FILES), f"encoded files not checked: {sorted(encoded - set(ENCODED_FILES))}"


# The two-frame Enhanced CT is checked against GDCM's whole-file read below (SimpleITK sorts its frames).
SINGLE_FRAME = [name for name in ENCODED_FILES if not name.startswith("cornerstone_testimages/CT0012")]


@pytest.mark.parametrize("name", SINGLE_FRAME)
def test_decodes_to_what_pydicom_or_gdcm_decode(ct_dir: Path, name: str) -> None:
    ours = load(ct_dir / name).array
    expected, decoder = oracle_hu(ct_dir / name)
    assert ours.shape == expected.shape, decoder
    if ours.dtype.kind == "f":  # a non-integer slope: medseg keeps float32 (<= 0.0005 HU of rounding)
        np.testing.assert_allclose(ours, expected, rtol=0, atol=1e-3, err_msg=decoder)
    else:
        np.testing.assert_array_equal(ours, expected, err_msg=decoder)


@pytest.mark.parametrize("variant", sorted(FORMER_LOSSY_ERROR))
def test_lossy_jpeg_error_stays_what_the_former_decoder_gave(ct_dir: Path, variant: str) -> None:
    lossless = oracle_hu(ct_dir / "cornerstone_testimages/CTImage.dcm")[0].astype(np.float64)
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
ENCODED = sorted(name for name in ENCODED_FILES if name != "cornerstone_testimages/CTImage.dcm"
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
    syntax = ds.file_meta.TransferSyntaxUID
    direct = _gdcm_read(str(ct_dir / name))  # GDCM read as medseg reads it (not through pydicom's plugin)
    decoded = {}
    try:
        plugins = sorted(get_decoder(syntax).available_plugins)
    except NotImplementedError:  # JPEG Spectral Selection / Full Progression: GDCM only
        plugins = []
    for plugin in plugins:
        try:
            decoded[plugin] = pydicom.pixels.pixel_array(ds, decoding_plugin=plugin).reshape(direct.shape)
        except RuntimeError as error:
            # Pillow reads 8-bit JPEG only; pydicom's GDCM plugin refuses 12-bit JPEG Extended (GDCM itself,
            # called directly as medseg does, decodes it)
            refused = {"pillow"} if syntax != "1.2.840.10008.1.2.4.51" else {"pillow", "gdcm"}
            assert plugin in refused and ds.BitsStored > 8, error
    for plugin, values in decoded.items():
        np.testing.assert_array_equal(values, direct, err_msg=f"{plugin} differs from GDCM")
    assert PLUGINS.get(ds.file_meta.TransferSyntaxUID, set()) <= set(decoded), "a permissive decoder plugin is missing"
