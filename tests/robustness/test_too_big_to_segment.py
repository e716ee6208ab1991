"""A study too big to segment on this machine is refused before its voxels are read, with the figure it
would need (the image and the model's working memory) against what is available, never a MemoryError or the
kernel's kill. Run under an address-space limit (RLIMIT_AS, as ``prlimit --as`` sets it), far below what a
512 x 512 x 3000 CT and the starter model's working memory need.

The NIfTI is a header alone: it declares 512 x 512 x 3000 int16 voxels (1.5 GiB) and holds none, so a run
that read the voxels would fail on the missing bytes instead of giving the figure."""

from __future__ import annotations

import re
import struct
from pathlib import Path

import pytest
from probes import run_medseg

LIMIT = 3 << 30  # address space: the starter and the 1.5 GiB image fit, their working memory does not
SIZE = (512, 512, 3000)


def _header_only_nifti(path: Path, dims: tuple[int, int, int], spacing=(0.8, 0.8, 1.0)) -> Path:
    header = bytearray(352)
    struct.pack_into("<i", header, 0, 348)
    struct.pack_into("<8h", header, 40, 3, *dims, 1, 1, 1, 1)
    struct.pack_into("<hh", header, 70, 4, 16)  # int16
    struct.pack_into("<8f", header, 76, 1.0, *spacing, 1, 1, 1, 1)
    struct.pack_into("<f", header, 108, 352.0)  # vox_offset
    header[344:348] = b"n+1\x00"
    path.write_bytes(bytes(header))
    return path


def _gib(text: str, pattern: str) -> float:
    match = re.search(pattern + r" ([0-9.]+) (GiB|MiB)", text)
    assert match, text
    return float(match.group(1)) / (1 if match.group(2) == "GiB" else 1024)


@pytest.mark.timeout(600)
def test_segment_refuses_a_study_too_big_for_the_memory_cap_before_reading_it(tmp_path: Path) -> None:
    big = _header_only_nifti(tmp_path / "big.nii", SIZE)
    run = run_medseg("segment", big, "-o", tmp_path / "seg.nii.gz", memory_bytes=LIMIT, timeout=600)
    assert run.returncode == 1, (run.returncode, run.stderr[-3000:])
    assert "Traceback" not in run.stderr and "MemoryError" not in run.stderr
    error = run.stderr
    assert "big.nii" in error and "512 x 512 x 3000-voxel image needs about" in error
    assert "nothing was read" in error and "the model's working memory" in error
    image_gib = 512 * 512 * 3000 * 2 / 2**30  # int16, as the header declares
    assert _gib(error, "the image") == pytest.approx(image_gib, abs=0.05)
    needed, available = _gib(error, "needs about"), _gib(error, r"\) and")
    assert needed > image_gib + _gib(error, "working memory") - 0.1  # the whole figure, not the image alone
    assert needed > available and available < LIMIT / 2**30
    assert not (tmp_path / "seg.nii.gz").exists()
