"""A study must not take the workstation down: bombs, sparse giants and forged headers are
refused with the numbers, inside a memory limit far below what they would need.

Every bomb is generated here (a stream of repeated deflate blocks, or a sparse file); the
commands run in a child process under RLIMIT_AS, so a regression fails the test instead of
exhausting the CI machine.
"""

from __future__ import annotations

import gzip
import shutil
import struct
from pathlib import Path

import numpy as np
import pydicom
import pytest
from probes import run_medseg, write_zip

from medseg.errors import DicomError, ResourceLimitError
from medseg.io import load

LIMIT = 1536 << 20  # address space for `medseg info` (it needs about 700 MB)


def _clean_failure(run, *words: str) -> None:
    assert run.returncode == 1, (run.returncode, run.stdout[-2000:], run.stderr[-3000:])
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
    for word in words:
        assert word in run.stderr, run.stderr


@pytest.mark.parametrize("members", [[("big.dcm", 2_000_000_000)],
                                     [(f"part{i}.dcm", 1_500_000_000) for i in range(4)]],
                         ids=["one 2 GB member", "four 1.5 GB members"])
def test_a_zip_bomb_is_refused_without_inflating_it(tmp_path: Path, members) -> None:
    bomb = write_zip(tmp_path / "study.zip", members, true_crc=False)
    assert bomb.stat().st_size < 8_000_000
    run = run_medseg("info", bomb, memory_bytes=LIMIT, timeout=600)
    _clean_failure(run, "study.zip", "GiB")
    assert all(name in run.stderr for name, _ in members[:1])


def test_a_bomb_member_beside_a_real_series_is_skipped_and_named(tmp_path: Path, three_slices: Path) -> None:
    real = [(f"series/{p.name}", p.read_bytes()) for p in sorted(three_slices.iterdir())]
    archive = write_zip(tmp_path / "study.zip", [*real, ("series/extra.dcm", 2_000_000_000)], true_crc=False)
    run = run_medseg("info", archive, memory_bytes=LIMIT, timeout=600)
    assert run.returncode == 0, run.stderr
    assert "files:             3 (3 images)" in run.stdout
    assert "extra.dcm" in run.stdout and "zip bomb" in run.stdout


def test_a_member_that_inflates_past_its_declared_size_is_cut_there(tmp_path: Path) -> None:
    """The header says 64 kB, the stream inflates to 1 GB: never more than 64 kB is produced."""
    archive = write_zip(tmp_path / "study.zip", [("liar.dcm", 1_000_000_000)], declared={"liar.dcm": 65_536},
                        true_crc=False)
    run = run_medseg("info", archive, memory_bytes=LIMIT, timeout=600)
    _clean_failure(run, "liar.dcm")


def _sparse_nifti(path: Path, dims: tuple[int, int, int], gzip_it: bool = False) -> Path:
    header = bytearray(352)
    struct.pack_into("<i", header, 0, 348)
    struct.pack_into("<8h", header, 40, 3, *dims, 1, 1, 1, 1)
    struct.pack_into("<hh", header, 70, 4, 16)  # datatype int16, bitpix
    struct.pack_into("<8f", header, 76, 1.0, 0.8, 0.8, 2.0, 1, 1, 1, 1)
    struct.pack_into("<f", header, 108, 352.0)  # vox_offset
    header[344:348] = b"n+1\x00"
    with open(path, "wb") as handle:
        handle.write(header)
        handle.truncate(352 + 2 * dims[0] * dims[1] * dims[2])  # sparse: no block is written
    return path


def test_info_on_a_16_gib_sparse_nifti_reads_the_header_only(tmp_path: Path) -> None:
    giant = _sparse_nifti(tmp_path / "giant.nii", (2048, 2048, 2048))
    assert giant.stat().st_size > 16 << 30 and giant.stat().st_blocks * 512 < 1 << 20
    run = run_medseg("info", giant, memory_bytes=LIMIT)
    assert run.returncode == 0, run.stderr
    assert "size [x, y, z]:    [2048, 2048, 2048]" in run.stdout and "[0.8, 0.8, 2]" in run.stdout
    refused = run_medseg("convert", giant, tmp_path / "out.nii.gz", memory_bytes=LIMIT)
    _clean_failure(refused, "giant.nii", "16.0 GiB", "available")


def test_info_on_a_gzip_nrrd_declaring_16_gib_reads_the_header_only(tmp_path: Path) -> None:
    path = tmp_path / "giant.nrrd"
    header = (b"NRRD0004\ntype: int16\ndimension: 3\nspace: left-posterior-superior\nsizes: 2048 2048 2048\n"
              b"space directions: (0.8,0,0) (0,0.8,0) (0,0,2)\nkinds: domain domain domain\nendian: little\n"
              b"encoding: gzip\nspace origin: (0,0,0)\n\n")
    path.write_bytes(header + gzip.compress(bytes(1 << 20)))  # the first MiB of zeros: enough for a header read
    run = run_medseg("info", path, memory_bytes=LIMIT)
    assert run.returncode == 0, run.stderr
    assert "[2048, 2048, 2048]" in run.stdout
    with pytest.raises(ResourceLimitError, match="16.0 GiB"):
        load(path)


def test_a_series_declaring_65535_by_65535_pixels_is_refused_with_the_numbers(three_slices: Path,
                                                                              tmp_path: Path) -> None:
    forged = tmp_path / "forged"
    forged.mkdir()
    for path in sorted(three_slices.iterdir()):
        dataset = pydicom.dcmread(path)
        dataset.Rows = dataset.Columns = 65535
        dataset.save_as(forged / path.name)
    run = run_medseg("convert", forged, tmp_path / "out.nii.gz", memory_bytes=LIMIT)
    # The pixel data of each file is far shorter than 65535 x 65535 pixels: refused by the scan, unread.
    _clean_failure(run, "no loadable CT volume", "of 65535 x 65535 pixels need 8589672450")


def test_a_file_far_larger_than_its_images_is_not_decoded_whole(ct_dir: Path, tmp_path: Path) -> None:
    """A JPEG 2000 slice (decoded by reading the whole file) padded to 1 GiB without writing a block."""
    folder = tmp_path / "padded"
    folder.mkdir()
    padded = folder / "slice.dcm"
    shutil.copy(ct_dir / "pydicom_data" / "693_J2KR.dcm", padded)
    with open(padded, "r+b") as handle:
        handle.truncate(1 << 30)
    with pytest.raises(DicomError, match="far more than its 1 image"):
        load(folder)
    assert np.asarray(load(ct_dir / "pydicom_data" / "693_J2KR.dcm").array).shape == (1, 512, 512)


def test_an_absurd_plan_is_refused_before_it_runs(tmp_path: Path) -> None:
    """A 64 x 64 x 24 image at 20 mm per voxel (given with --spacing): the starter's 2 mm plan would
    grow it 100-fold into about 8 700 tiles. Refused with the numbers, in seconds."""
    from medseg.core.volume import Volume
    from medseg.io import write_image

    small = Volume(np.full((24, 64, 64), -1000, np.int16), (1.0, 1.0, 1.0))
    small.array[:, 16:48, 16:48] = 40
    write_image(small, tmp_path / "small.nii.gz")
    run = run_medseg("segment", tmp_path / "small.nii.gz", "-o", tmp_path / "seg.nii.gz", "--spacing", "20", "20", "20")
    _clean_failure(run, "100 times its voxels", "tiles")
    assert not (tmp_path / "seg.nii.gz").exists()


def test_edit_with_a_distance_larger_than_the_image_is_refused_at_once(tmp_path: Path, ct_dir: Path) -> None:
    labels = ct_dir / "totalsegmentator" / "example_seg.nii.gz"
    image = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    for operation in (["--smooth", "5", "1e6"], ["--grow", "5", "1e9"]):
        run = run_medseg("edit", image, "--labels", labels, "-o", tmp_path / "out.nii.gz", *operation, timeout=120)
        _clean_failure(run, "more than the whole image")
