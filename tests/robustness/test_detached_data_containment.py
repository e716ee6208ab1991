"""A detached header (MetaImage .mhd/.mha with ElementDataFile, NRRD .nhdr with ``data file``) is read only
when its data files are regular files inside the header's own folder (the rule the DICOMDIR reader
applies): ``../../../etc/passwd`` and ``/dev/zero`` were read as voxels and segmented (issue 43). The
study is the real TotalSegmentator CT written by SimpleITK, its header edited here."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from probes import run_medseg

from medseg.errors import ImageFormatError
from medseg.io import load


@pytest.fixture
def study(ct_dir: Path, tmp_path: Path) -> tuple[Path, bytes, bytes, sitk.Image]:
    """(study folder, the MetaImage header without its ElementDataFile line, the raw voxels, the image)."""
    image = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"))
    for key in image.GetMetaDataKeys():
        image.EraseMetaData(key)
    folder = tmp_path / "patients" / "study"
    folder.mkdir(parents=True)
    sitk.WriteImage(image, str(folder / "attached.mha"))
    data = (folder / "attached.mha").read_bytes()
    header, voxels = data.split(b"ElementDataFile = LOCAL\n")
    (folder / "attached.mha").unlink()
    (tmp_path / "patients" / "other.raw").write_bytes(voxels)  # another patient's voxels, one folder up
    return folder, header, voxels, image


def _mhd(folder: Path, header: bytes, target: str, name: str = "image.mhd") -> Path:
    (folder / name).write_bytes(header + f"ElementDataFile = {target}\n".encode())
    return folder / name


@pytest.mark.parametrize("target", ["../other.raw", "{outside}", "/etc/passwd", "/dev/zero", "sub/../../other.raw",
                                    "LIST\n../other.raw"])
def test_a_metaimage_data_file_outside_its_folder_is_not_read(study, tmp_path, target) -> None:
    folder, header, _voxels, _image = study
    target = target.format(outside=tmp_path / "patients" / "other.raw")
    path = _mhd(folder, header, target)
    with pytest.raises(ImageFormatError, match="outside its own folder: not read|not a regular file") as caught:
        load(path)
    assert path.name in str(caught.value)


def test_a_metaimage_data_file_beside_it_is_read(study) -> None:
    folder, header, voxels, image = study
    (folder / "voxels.raw").write_bytes(voxels)
    volume = load(_mhd(folder, header, "voxels.raw"))
    np.testing.assert_array_equal(volume.array, sitk.GetArrayFromImage(image))


def test_a_link_out_of_the_folder_and_a_fifo_are_not_read(study, tmp_path) -> None:
    folder, header, _voxels, _image = study
    (folder / "link.raw").symlink_to(tmp_path / "patients" / "other.raw")
    with pytest.raises(ImageFormatError, match="outside its own folder"):
        load(_mhd(folder, header, "link.raw"))
    os.mkfifo(folder / "pipe.raw")
    run = run_medseg("convert", _mhd(folder, header, "pipe.raw", "pipe.mhd"), tmp_path / "out.nii.gz", timeout=60)
    assert run.returncode == 1 and "not a regular file (a FIFO)" in run.stderr, run.stderr  # refused, not waited on


def test_a_nrrd_data_file_outside_its_folder_is_not_read_and_segment_says_so(study, tmp_path) -> None:
    folder, _header, voxels, image = study
    sitk.WriteImage(image, str(tmp_path / "full.nrrd"))
    text = (tmp_path / "full.nrrd").read_bytes().split(b"\n\n")[0].decode()
    for name, target in (("passwd.nhdr", "/etc/passwd"), ("up.nhdr", "../other.raw"), ("zero.nhdr", "/dev/zero"),
                         ("pattern.nhdr", "../other%d.raw 1 1 1")):
        (folder / name).write_text(text + f"\ndata file: {target}\n")
        run = run_medseg("segment", folder / name, "-o", tmp_path / "seg.nii.gz")
        assert run.returncode == 1 and "Traceback" not in run.stderr, run.stderr
        assert name in run.stderr and ("outside its own folder" in run.stderr or "not a regular file" in run.stderr)
        assert not (tmp_path / "seg.nii.gz").exists()
    (folder / "voxels.raw").write_bytes(voxels)
    (folder / "inside.nhdr").write_text(text + "\ndata file: voxels.raw\n")
    np.testing.assert_array_equal(load(folder / "inside.nhdr").array, sitk.GetArrayFromImage(image))
