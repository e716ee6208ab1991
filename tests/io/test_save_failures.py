"""A failed save says why, names the file, leaves the old file as it was and keeps the edits in memory.

Disk full and read-only run in a child process: disk full once through RLIMIT_FSIZE (no
privileges needed) and once on a 64 kB tmpfs, read-only on a tmpfs remounted read-only
(root ignores chmod, so a read-only mount is the honest test). The mounts live in a
private user + mount namespace (``unshare -rm``) and vanish with the child.
"""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from medseg.errors import SaveError
from medseg.io import load
from medseg.io.segmentations import save_segmentation

PROBE = Path(__file__).with_name("save_failure_probe.py")


@pytest.fixture(scope="module")
def small_case(ct_dir: Path):
    image = load(ct_dir / "dcmqi_ct3slice_masks" / "image")
    labels = np.zeros(image.shape_zyx, dtype=np.uint8)
    labels[:, 200:300, 200:300] = 1
    return image, image.with_array(labels, labels={1: "box"})


@pytest.mark.parametrize("suffix", [".dcm", ".nii.gz"])
def test_missing_folder(small_case, tmp_path: Path, suffix: str) -> None:
    image, label_map = small_case
    before = label_map.array.copy()
    with pytest.raises(SaveError, match="does not exist") as caught:
        save_segmentation(label_map, image, tmp_path / "gone" / f"seg{suffix}")
    assert "gone" in str(caught.value)
    np.testing.assert_array_equal(label_map.array, before)


def test_folder_removed_after_it_was_chosen(small_case, tmp_path: Path) -> None:
    image, label_map = small_case
    folder = tmp_path / "chosen"
    folder.mkdir()
    target = folder / "seg.dcm"
    shutil.rmtree(folder)  # as when the folder is deleted while the Save dialog is open
    with pytest.raises(SaveError) as caught:
        save_segmentation(label_map, image, target)
    assert "chosen" in str(caught.value) and not folder.exists()


def _probe(ct_dir: Path, target: Path, prefix: list[str] | None = None, limit_bytes: int | None = None) -> dict:
    def limit() -> None:
        if limit_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit_bytes, limit_bytes))
    command = [*(prefix or []), sys.executable, str(PROBE), str(ct_dir / "dcmqi_ct3slice_masks" / "image"), str(target)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=300, preexec_fn=limit)
    assert run.returncode == 0, run.stderr[-2000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("suffix", [".dcm", ".nrrd"])
def test_file_size_limit_is_a_clear_failure(ct_dir: Path, tmp_path: Path, suffix: str) -> None:
    target = tmp_path / f"seg{suffix}"
    target.write_bytes(b"the previous save")
    report = _probe(ct_dir, target, limit_bytes=20_000)
    assert report["error"] and "disk" in report["error"] and "too large" in report["error"]
    assert report["edits_kept"] and report["old_file_intact"] and report["leftovers"] == []


def _in_namespace(script: str) -> list[str]:
    return ["unshare", "-rm", "sh", "-euc", script + ' && exec "$@"', "sh"]


def test_full_disk_is_a_clear_failure(ct_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "small_disk"
    folder.mkdir()
    target = folder / "seg.dcm"
    prefix = _in_namespace(f"mount -t tmpfs -o size=64k tmpfs {folder} && printf 'previous' > {target}")
    report = _probe(ct_dir, target, prefix)
    assert report["error"] and "disk is full" in report["error"] and str(target) in report["error"]
    assert report["edits_kept"] and report["old_file_intact"] and report["leftovers"] == []


def test_read_only_folder_is_a_clear_failure(ct_dir: Path, tmp_path: Path) -> None:
    folder = tmp_path / "read_only"
    folder.mkdir()
    target = folder / "seg.nii.gz"
    prefix = _in_namespace(f"mount -t tmpfs tmpfs {folder} && printf 'previous' > {target} "
                           f"&& mount -o remount,ro {folder}")
    report = _probe(ct_dir, target, prefix)
    assert report["error"] and "not writable" in report["error"]
    assert report["edits_kept"] and report["old_file_intact"]


def test_saved_files_are_readable_like_any_new_file(small_case, tmp_path: Path) -> None:
    import os

    image, label_map = small_case
    save_segmentation(label_map, image, tmp_path / "seg.nii.gz")
    umask = os.umask(0o022)
    os.umask(umask)
    for name in ("seg.nii.gz", "seg.labels.json"):
        assert (tmp_path / name).stat().st_mode & 0o777 == 0o666 & ~umask
