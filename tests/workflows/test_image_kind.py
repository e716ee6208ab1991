"""A label map given as the CT is refused, and no real CT is (every image and mask in ../shared/data)."""

from __future__ import annotations

from pathlib import Path

import pytest

from medseg.errors import NotAnImageError
from medseg.io import load
from medseg.workflows.checks import label_map_reason

# Every real CT volume and single-slice CT in the shared data (its README's index), one entry per series.
REAL_CTS = [
    "totalsegmentator/example_ct_dicom", "totalsegmentator/example_ct.nii.gz", "totalsegmentator/example_ct_sm.nii.gz",
    "dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", "dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series",
    "dicom2nifti_testdata/gantry_tilt_siemens_iop_only", "dicom2nifti_testdata/missing_slice_ge_lightspeed16",
    "dicom2nifti_testdata/missing_slice_tilted_siemens", "dicom2nifti_testdata/duplicate_positions_siemens/001.dcm",
    "cornerstone_testimages/CTImage.dcm", "cornerstone_testimages/CT1_J2KR", "cornerstone_testimages/CT2_J2KR",
    "cornerstone_testimages/CT0012.fragmented_no_bot_jpeg_baseline.51.dcm",
    "cornerstone_testimages/CTImage.dcm_JPEGProcess1TransferSyntax_1.2.840.10008.1.2.4.50.dcm",  # float HU, slope 32
    "pydicom_data/693_UNCR.dcm", "pydicom_data/693_UNCI.dcm", "pydicom_data/eCT_Supplemental.dcm",
    "pydicom_data/explicit_VR-UN.dcm", "pydicom_data/bad_sequence.dcm",
    "pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm", "pydicom_wheel_testfiles/CT_small.dcm",
    "dcmqi_ct3slice_masks/image", "pyradiomics_lung1/lung1_image.nrrd",
]
# Every label map there: a lesion mask, hand-drawn organ masks, TotalSegmentator's 41- and 31-label outputs.
LABEL_MAPS = [
    "pyradiomics_lung1/lung1_label.nrrd", "dcmqi_ct3slice_masks/masks/liver_seg.nrrd",
    "dcmqi_ct3slice_masks/masks/spine_seg.nrrd", "dcmqi_ct3slice_masks/masks/heart_seg.nrrd",
    "dcmqi_ct3slice_masks/masks/liver_spine_seg.nrrd", "totalsegmentator/example_seg.nii.gz",
    "totalsegmentator/example_seg_dicom.nii.gz",
]


def test_no_real_ct_looks_like_a_label_map(ct_dir: Path) -> None:
    for relative in REAL_CTS:
        volume = load(ct_dir / relative)
        assert label_map_reason(volume) is None, relative


@pytest.mark.parametrize("relative", LABEL_MAPS)
def test_every_label_map_is_told_from_a_ct(ct_dir: Path, relative: str) -> None:
    import SimpleITK as sitk

    volume = load(ct_dir / relative)
    reason = label_map_reason(volume)
    assert reason is not None
    # the reason counts the values the file holds (SimpleITK's own reading of it is the oracle)
    values = set(sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / relative))).ravel().tolist())
    assert f"its voxels are {len(values)} whole numbers" in reason


def test_segmenting_a_label_map_as_ct_is_refused_naming_the_file(ct_dir: Path) -> None:
    from medseg.workflows.segment import SegmentRequest, segment_study

    mask = ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd"
    with pytest.raises(NotAnImageError) as refused:
        segment_study(SegmentRequest(mask))
    assert refused.value.path == mask
    assert "this is not a CT image" in refused.value.message and "2 whole numbers (0, 1)" in refused.value.message
