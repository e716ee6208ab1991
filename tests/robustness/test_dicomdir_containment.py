"""A DICOMDIR's references stay inside its folder: one pointing at ``..\\..\\outside``, at an
absolute path or through a link out of the folder is refused, and the outside file is never
read (before, it was loaded as part of the series)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from probes import write_dicomdir

from medseg.errors import DicomError
from medseg.io import load, scan


@pytest.fixture
def outside_slice(three_slices: Path, tmp_path: Path) -> Path:
    """A CT slice of the same series, placed outside the media folder."""
    target = tmp_path / "outside" / "secret.dcm"
    target.parent.mkdir()
    shutil.copy(sorted(three_slices.iterdir())[2], target)
    return target


@pytest.mark.parametrize("escape", ["parent components", "one backslash string", "absolute path"])
def test_a_reference_out_of_the_folder_is_refused(three_slices: Path, tmp_path: Path, outside_slice: Path,
                                                  escape: str) -> None:
    slices = sorted(three_slices.iterdir())
    hostile = {"parent components": ["..", "outside", "secret.dcm"],
               "one backslash string": ["..\\outside\\secret.dcm"],
               "absolute path": [str(outside_slice)]}[escape]
    dicomdir = write_dicomdir(slices, tmp_path / "media", [["IMG", "01"], ["IMG", "02"], hostile])
    for action in (scan, load):
        with pytest.raises(DicomError, match="outside its own folder") as caught:
            action(dicomdir)
        assert "DICOMDIR" in str(caught.value)


def test_a_link_out_of_the_folder_is_refused(three_slices: Path, tmp_path: Path, outside_slice: Path) -> None:
    slices = sorted(three_slices.iterdir())
    dicomdir = write_dicomdir(slices, tmp_path / "media", [["IMG", "01"], ["IMG", "02"], ["IMG", "03"]])
    link = dicomdir.parent / "IMG" / "03"
    link.unlink()
    link.symlink_to(outside_slice)
    with pytest.raises(DicomError, match="outside its own folder"):
        load(dicomdir)


def test_a_contained_dicomdir_still_loads(three_slices: Path, tmp_path: Path) -> None:
    dicomdir = write_dicomdir(sorted(three_slices.iterdir()), tmp_path / "media",
                              [["IMG", "01"], ["IMG", "02"], ["IMG", "03"]])
    assert load(dicomdir).size_xyz == (512, 512, 3)
