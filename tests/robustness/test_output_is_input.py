"""No command writes over one of its own inputs, and an existing file medseg did not make is
replaced only with --force. Before the fix each of these exited 0 having destroyed the input:
the CT replaced by its label map, a source slice by the SEG, the CT by a CSV table."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import numpy as np
import pytest
from probes import run_medseg, write_dicomdir

from medseg.errors import SaveError
from medseg.io import load
from medseg.io.segmentations import save_segmentation


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def ct_file(ct_dir: Path, tmp_path: Path) -> Path:
    target = tmp_path / "ct.nii.gz"
    shutil.copy(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz", target)
    return target


@pytest.fixture
def series_folder(three_slices: Path, tmp_path: Path) -> Path:
    folder = tmp_path / "series"
    shutil.copytree(three_slices, folder)
    return folder


def _refused(run, *words: str) -> None:
    assert run.returncode == 1, run.stdout + run.stderr
    assert "Traceback" not in run.stderr
    for word in words:
        assert word in run.stderr, run.stderr


def test_segment_refuses_to_write_over_its_image(ct_file: Path) -> None:
    before = _digest(ct_file)
    _refused(run_medseg("segment", ct_file, "-o", ct_file), "ct.nii.gz", "input")
    assert _digest(ct_file) == before


def test_edit_refuses_to_write_over_its_image_or_labels(ct_file: Path, ct_dir: Path, tmp_path: Path) -> None:
    labels = tmp_path / "seg.nii.gz"
    shutil.copy(ct_dir / "totalsegmentator" / "example_seg.nii.gz", labels)
    before = {p: _digest(p) for p in (ct_file, labels)}
    _refused(run_medseg("edit", ct_file, "-o", ct_file, "--keep-largest", "5"), "ct.nii.gz", "input")
    _refused(run_medseg("edit", ct_file, "--labels", labels, "-o", labels, "--keep-largest", "5"),
             "seg.nii.gz", "input")
    assert {p: _digest(p) for p in before} == before


def test_segment_refuses_to_replace_a_slice_of_its_series(series_folder: Path) -> None:
    slices = sorted(series_folder.iterdir())
    before = {p: _digest(p) for p in slices}
    _refused(run_medseg("segment", series_folder, "-o", slices[0]), slices[0].name, "--force")
    # --force replaces a file medseg did not write, never an input
    _refused(run_medseg("segment", series_folder, "-o", slices[0], "--force"), slices[0].name, "input")
    assert {p: _digest(p) for p in slices} == before


def test_a_dicomdir_source_slice_is_protected_too(three_slices: Path, tmp_path: Path) -> None:
    dicomdir = write_dicomdir(sorted(three_slices.iterdir()), tmp_path / "media",
                         [["IMG", f"{i:02d}.dcm"] for i in (1, 2, 3)])
    slice_two = dicomdir.parent / "IMG" / "02.dcm"
    before = _digest(slice_two)
    _refused(run_medseg("segment", dicomdir, "-o", slice_two, "--force"), "02.dcm", "input")
    assert _digest(slice_two) == before


def test_stats_csv_must_be_a_csv_and_not_an_input(ct_file: Path, ct_dir: Path, tmp_path: Path) -> None:
    labels = ct_dir / "totalsegmentator" / "example_seg.nii.gz"
    before = _digest(ct_file)
    _refused(run_medseg("stats", labels, "--image", ct_file, "--csv", ct_file), "--csv", ".csv")
    link = tmp_path / "table.csv"
    link.symlink_to(ct_file)  # the same file under a CSV name
    _refused(run_medseg("stats", labels, "--image", ct_file, "--csv", link), "input")
    assert _digest(ct_file) == before


def test_an_existing_file_medseg_did_not_write_needs_force(ct_file: Path, ct_dir: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.nii.gz"
    shutil.copy(ct_file, other)
    before = _digest(other)
    _refused(run_medseg("convert", "--quiet", ct_dir / "pydicom_wheel_testfiles" / "CT_small.dcm", other),
             "other.nii.gz", "--force")
    assert _digest(other) == before
    notes = tmp_path / "notes.csv"
    notes.write_text("my own notes\n")
    _refused(run_medseg("stats", ct_dir / "totalsegmentator" / "example_seg.nii.gz", "--image", ct_file,
                        "--csv", notes), "notes.csv", "--force")
    assert notes.read_text() == "my own notes\n"
    forced = run_medseg("convert", "--quiet", "--force", ct_dir / "pydicom_wheel_testfiles" / "CT_small.dcm", other)
    assert forced.returncode == 0, forced.stderr
    assert load(other).size_xyz == (128, 128, 1)
    again = run_medseg("stats", ct_dir / "totalsegmentator" / "example_seg.nii.gz", "--image", ct_file,
                       "--csv", tmp_path / "table2.csv")
    assert again.returncode == 0, again.stderr
    twice = run_medseg("stats", ct_dir / "totalsegmentator" / "example_seg.nii.gz", "--image", ct_file,
                       "--csv", tmp_path / "table2.csv")  # medseg's own table: replaced without --force
    assert twice.returncode == 0, twice.stderr


def test_save_segmentation_refuses_a_source_file(series_folder: Path) -> None:
    """The GUI's save goes through the same check (its dialog already asked about replacing)."""
    image = load(series_folder)
    label_map = image.with_array(np.ones(image.shape_zyx, np.uint8))
    target = Path(image.meta.source_files[0])
    before = _digest(target)
    with pytest.raises(SaveError, match="input"):
        save_segmentation(label_map, image, target)
    assert _digest(target) == before
