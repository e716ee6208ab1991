"""TotalSegmentator's own output opened in the window: its header's label table names the rows (no
sidecar, default "From file" names); with the "TotalSegmentator v2 (total)" name set chosen, its
published codes apply as they do to an unnamed file. Oracle: TotalSegmentator's reader of its extension
and its SNOMED mapping table."""

from __future__ import annotations

import numpy as np
from totalsegmentator.nifti_ext_header import load_multilabel_nifti

from medseg.core.structure_codes import totalsegmentator_coding


def test_totalsegmentator_output_shows_its_names_and_takes_its_codes(window, driver, ct_dir):
    folder = ct_dir / "totalsegmentator"
    driver.open_series(folder / "example_ct_dicom")
    seg, theirs = load_multilabel_nifti(folder / "example_seg_dicom.nii.gz")
    present = [int(v) for v in np.unique(np.asarray(seg.dataobj))[1:]]
    assert window.overlay_panel.names_box.currentText() == "From file"
    driver.open_segmentation(folder / "example_seg_dicom.nii.gz")
    labels = window.document.labels
    assert {v: labels[v].name for v in present} == {v: theirs[v] for v in present}
    assert all(labels[v].type is None for v in present)  # names only: the file states no codes

    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")
    driver.open_segmentation(folder / "example_seg_dicom.nii.gz")
    labels = window.document.labels
    liver = next(v for v in present if theirs[v] == "liver")
    assert labels[liver].name == "liver"
    assert labels[liver].type == totalsegmentator_coding("liver").type
