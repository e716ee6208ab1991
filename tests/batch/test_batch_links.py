"""Study folders reached through symbolic links: followed inside the input folder, refused outside it;
a batch that finds nothing to segment fails loudly."""

from __future__ import annotations

import os
from pathlib import Path

import pydicom
import pytest
from batch_helpers import copy_series, run_cli

from medseg.io.folder_walk import LINK_LEAVES
from medseg.workflows.batch_cases import NoCases, discover


@pytest.fixture
def linked_archive(ct_dir: Path, tmp_path: Path) -> Path:
    """archive/patients/{head,abdomen} are links into archive/.store (a hidden folder, so only the links lead
    there); archive/patients/elsewhere links to a study outside the archive; patients/loop links back up."""
    root = tmp_path / "archive"
    copy_series(ct_dir / "pydicom_data", root / ".store" / "ge_head", "693_UNCR.dcm")
    copy_series(ct_dir / "pydicom_data", root / ".store" / "tcia_abdomen", "explicit_VR-UN.dcm")
    copy_series(ct_dir / "cornerstone_testimages", tmp_path / "outside" / "toshiba", "CT2_J2KR")
    patients = root / "patients"
    patients.mkdir()
    os.symlink("../.store/ge_head", patients / "head")
    os.symlink(root / ".store" / "tcia_abdomen", patients / "abdomen")  # absolute, still inside
    os.symlink(tmp_path / "outside" / "toshiba", patients / "elsewhere")
    os.symlink("..", patients / "loop")
    return root


def test_links_to_study_folders_inside_the_input_are_followed(linked_archive: Path, ct_dir: Path) -> None:
    discovery = discover([linked_archive])
    runnable = {case.series_uid for case in discovery.runnable}
    expected = {pydicom.dcmread(ct_dir / "pydicom_data" / name, stop_before_pixels=True).SeriesInstanceUID
                for name in ("693_UNCR.dcm", "explicit_VR-UN.dcm")}
    assert runnable == expected, [c.source for c in discovery.cases]
    # every case once, although 'loop' leads back to the archive (and so to the links again)
    assert len(discovery.runnable) == 2
    refused = [case for case in discovery.cases if case.status == "skipped" and case.reason == LINK_LEAVES]
    assert [Path(case.source).name for case in refused] == ["elsewhere"]


def test_a_folder_of_links_that_all_leave_it_is_no_cases(linked_archive: Path) -> None:
    links_only = linked_archive.parent / "links_only"
    links_only.mkdir()
    os.symlink(linked_archive.parent / "outside" / "toshiba", links_only / "study1")
    with pytest.raises(NoCases) as raised:
        discover([links_only])
    assert raised.value.path == links_only
    assert "no cases found" in raised.value.message and "study1" in raised.value.message


def test_a_batch_that_finds_no_cases_exits_non_zero(tmp_path: Path) -> None:
    empty = tmp_path / "studies"
    (empty / "notes").mkdir(parents=True)
    (empty / "notes" / "readme.txt").write_text("no images here")
    run = run_cli("batch", str(empty), "-o", str(tmp_path / "out"))
    assert run.returncode == 1, run.stdout + run.stderr
    assert f"{empty}: no cases found" in run.stderr and "1 other file(s) ignored" in run.stderr
