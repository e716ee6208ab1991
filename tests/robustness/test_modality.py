"""A CT model does not segment an MR or PET series without the user's say-so, and then says so.
(The window asks; tests/gui/test_segment.py drives that question.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from probes import json_event, rewrite_series, run_medseg


@pytest.mark.parametrize("modality, shown", [("MR", "MR"), ("PT", "PET")])
def test_a_non_ct_series_needs_allow_modality(three_slices: Path, tmp_path: Path, modality: str, shown: str) -> None:
    series = rewrite_series(three_slices, tmp_path / modality, Modality=modality)
    refused = run_medseg("segment", series, "-o", tmp_path / "seg.nii.gz")
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert f"this series is {shown}" in refused.stderr and "--allow-modality" in refused.stderr
    assert not (tmp_path / "seg.nii.gz").exists()


def test_allowed_the_result_says_which_modality_ran(three_slices: Path, tmp_path: Path) -> None:
    series = rewrite_series(three_slices, tmp_path / "MR", crop=256, Modality="MR")
    run = run_medseg("segment", series, "-o", tmp_path / "seg.nii.gz", "--allow-modality", "--json")
    done = json_event(run)
    assert any("MR series" in note and "user's request" in note for note in done["notes"])


def test_a_ct_series_and_an_image_file_are_not_asked_about(three_slices: Path, ct_dir: Path) -> None:
    from medseg.io import load
    from medseg.model.modality import check_modality
    from medseg.workflows.models import open_model

    package = open_model(None).package
    assert check_modality(load(three_slices), package) is None  # Modality CT
    assert check_modality(load(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"), package) is None  # unknown
