"""`medseg edit SERIES --labels map.nii.gz -o seg.dcm`: TotalSegmentator's own NIfTI output on its DICOM series
written as a DICOM SEG (issue 52, "Also"), read back by highdicom (an independent reader), its codes checked
against TotalSegmentator's own SNOMED table and its voxels against nibabel's reading of the NIfTI."""

from __future__ import annotations

from pathlib import Path

import highdicom as hd
import nibabel as nib
import numpy as np

from medseg.cli import main


def test_a_totalsegmentator_label_map_becomes_a_dicom_seg_with_its_codes(ct_dir: Path, tmp_path: Path, capsys):
    from totalsegmentator.dicom_utils import load_snomed_mapping

    folder = ct_dir / "totalsegmentator"
    labels = folder / "example_seg_dicom.nii.gz"
    out = tmp_path / "seg.dcm"
    assert main(["edit", str(folder / "example_ct_dicom"), "--labels", str(labels), "--totalsegmentator-names",
                 "-o", str(out)]) == 0
    assert f"-> {out}" in capsys.readouterr().out and not (tmp_path / "seg.labels.json").exists()

    seg = hd.seg.segread(str(out))
    nifti = nib.load(str(labels))
    data = np.asarray(nifti.dataobj)
    present = sorted(int(v) for v in np.unique(data) if v)
    segments = {item.SegmentLabel: item for item in seg.SegmentSequence}
    assert len(segments) == len(present) == 31
    snomed = load_snomed_mapping()  # TotalSegmentator's --output_type dicom codes
    for name, item in segments.items():
        expected = snomed[name]["property_type"]
        code = item.SegmentedPropertyTypeCodeSequence[0]
        assert (code.CodeValue, code.CodingSchemeDesignator) == (expected["value"], expected["scheme"]), name
    volume = seg.get_volume(combine_segments=False)
    # TotalSegmentator's class map: 1 spleen, 5 liver, 52 aorta; every voxel where nibabel puts it (LPS)
    for name, value in (("spleen", 1), ("liver", 5), ("aorta", 52)):
        mask = volume.array[..., segments[name].SegmentNumber - 1] > 0
        ijk = np.argwhere(data == value)
        assert int(mask.sum()) == len(ijk) > 1000
        expected_lps = nib.affines.apply_affine(nifti.affine, ijk).mean(axis=0) * [-1, -1, 1]
        found = np.argwhere(mask)
        found_lps = nib.affines.apply_affine(volume.affine, found).mean(axis=0)
        np.testing.assert_allclose(found_lps, expected_lps, atol=1e-3)


def test_a_seg_needs_a_dicom_series(ct_dir: Path, tmp_path: Path, capsys):
    folder = ct_dir / "totalsegmentator"
    code = main(["edit", str(folder / "example_ct.nii.gz"), "--labels", str(folder / "example_seg.nii.gz"),
                 "-o", str(tmp_path / "seg.dcm")])
    assert code != 0 and not (tmp_path / "seg.dcm").exists()
    err = capsys.readouterr().err
    assert "seg.dcm" in err and "DICOM" in err
