"""A save onto a full disk fails with a clear error and leaves the previous file exactly as it was.

ITK's NIfTI writer reports a short write only on stderr ("NWAD: wrote only 0 of N bytes") and
returns as if it had succeeded; before the fix the atomic rename then installed the truncated
file over the user's previous one and the command exited 0. The disk is a small tmpfs in a
private mount namespace, filled by the previous file.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
from probes import in_namespace, run_medseg

from medseg.errors import SaveError
from medseg.io.atomic import atomic_path
from medseg.io.image_files import read_image


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _fill_script(folder: Path, files: dict[str, int], size_kb: int) -> str:
    """Mount a tmpfs of ``size_kb`` on ``folder`` and write random 'previous' files of the given sizes."""
    writes = " && ".join(f"head -c {size} /dev/urandom > {folder / name}" for name, size in files.items())
    return f"mount -t tmpfs -o size={size_kb}k tmpfs {folder} && {writes}"


@pytest.mark.parametrize("name", ["old.nii.gz", "old.nii"])
def test_convert_onto_a_full_disk_fails_and_keeps_the_old_file(three_slices: Path, tmp_path: Path, name: str) -> None:
    folder = tmp_path / "full"
    folder.mkdir()
    # The folder is a mount point only inside the namespace: the digest is taken there too.
    script = _fill_script(folder, {name: 900_000}, 1024) + f" && sha256sum {folder / name} > {tmp_path / 'before'}"
    run = run_medseg("convert", "--quiet", "--force", three_slices, folder / name,
                     prefix=in_namespace(script + f' && trap "sha256sum {folder / name} > {tmp_path / "after"}; '
                                                  f'ls -a {folder} > {tmp_path / "listing"}" EXIT && "$@"; exit $?'
                                         ' #'))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "not written completely" in run.stderr and name in run.stderr and "disk" in run.stderr
    assert "wrote" not in run.stdout
    assert (tmp_path / "before").read_text().split()[0] == (tmp_path / "after").read_text().split()[0]
    assert (tmp_path / "listing").read_text().split() == [".", "..", name]  # no temporary left behind


def test_segment_onto_a_full_disk_keeps_the_old_segmentation_and_sidecar(three_slices: Path, tmp_path: Path) -> None:
    folder = tmp_path / "full"
    folder.mkdir()
    script = _fill_script(folder, {"prev.nii.gz": 52_000, "prev.labels.json": 4_000}, 64)
    record = (f'trap "sha256sum {folder}/prev.nii.gz {folder}/prev.labels.json > {tmp_path / "after"}" EXIT; '
              f"sha256sum {folder}/prev.nii.gz {folder}/prev.labels.json > {tmp_path / 'before'}")
    # --force: the previous files are random bytes, not a result medseg wrote (refused without it)
    run = run_medseg("segment", three_slices, "-o", folder / "prev.nii.gz", "--force",
                     prefix=in_namespace(script + " && " + record + ' && "$@"; exit $? #'))
    assert run.returncode == 1, run.stdout + run.stderr
    assert "prev.nii.gz" in run.stderr and "full" in run.stderr.split("prev.nii.gz", 1)[1]
    assert (tmp_path / "before").read_text() == (tmp_path / "after").read_text()


def test_a_writer_that_stops_short_does_not_replace_the_file(tmp_path: Path) -> None:
    """Without a disk to fill: a writer that returns having written half a NIfTI, as ITK does."""
    target = tmp_path / "seg.nii"
    target.write_bytes(b"the previous segmentation")
    import SimpleITK as sitk

    image = sitk.GetImageFromArray(np.zeros((4, 32, 32), np.int16))
    with pytest.raises(SaveError, match="not written completely") as caught:
        with atomic_path(target) as temp:
            sitk.WriteImage(image, str(temp))
            with open(temp, "r+b") as handle:
                handle.truncate(os.path.getsize(temp) // 2)
    assert "seg.nii" in str(caught.value)
    assert target.read_bytes() == b"the previous segmentation"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["seg.nii"]


@pytest.mark.parametrize("suffix", [".nii.gz", ".nrrd", ".mha", ".dcm", ".png", ".npz", ".safetensors", ".json"])
def test_every_format_medseg_writes_is_checked_before_the_rename(tmp_path: Path, ct_dir: Path, suffix: str) -> None:
    """A whole file of each format passes the check; the same file cut short does not."""
    whole = tmp_path / f"whole{suffix}"
    _write_sample(whole, ct_dir)
    with atomic_path(tmp_path / f"copy{suffix}") as temp:
        temp.write_bytes(whole.read_bytes())
    data = whole.read_bytes()
    target = tmp_path / f"target{suffix}"
    target.write_bytes(b"previous")
    with pytest.raises(SaveError, match="not written completely"):
        with atomic_path(target) as temp:
            temp.write_bytes(data[: len(data) * 2 // 3])
    assert target.read_bytes() == b"previous"


def _write_sample(path: Path, ct_dir: Path) -> None:
    import json

    name = path.name
    rng = np.random.default_rng(0)
    array = rng.integers(-1000, 1000, (6, 64, 64)).astype(np.int16)
    if name.endswith((".nii.gz", ".nrrd", ".mha")):
        import SimpleITK as sitk

        sitk.WriteImage(sitk.GetImageFromArray(array), str(path), useCompression=True)
    elif name.endswith(".dcm"):
        path.write_bytes((ct_dir / "pydicom_wheel_testfiles" / "CT_small.dcm").read_bytes())
    elif name.endswith(".png"):
        import zlib

        raw = b"".join(b"\x00" + bytes(64) for _ in range(64))
        def chunk(kind: bytes, body: bytes) -> bytes:
            return len(body).to_bytes(4, "big") + kind + body + zlib.crc32(kind + body).to_bytes(4, "big")
        path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", (64).to_bytes(4, "big") * 2 + b"\x08\x00\x00\x00\x00")
                         + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))
    elif name.endswith(".npz"):
        np.savez_compressed(path, labels=array)
    elif name.endswith(".safetensors"):
        import torch
        from safetensors.torch import save_file

        save_file({"w": torch.from_numpy(array.astype(np.float32))}, str(path))
    else:
        path.write_text(json.dumps({"labels": [{"value": 1, "name": "liver"}] * 20}))


def test_image_written_whole_reads_back(tmp_path: Path) -> None:
    from medseg.core.volume import Volume
    from medseg.io.image_files import write_image

    volume = Volume(np.arange(6 * 32 * 32, dtype=np.int16).reshape(6, 32, 32), (0.7, 0.7, 2.5))
    for suffix in (".nii.gz", ".nii", ".nrrd", ".mha"):
        back = read_image(write_image(volume, tmp_path / f"v{suffix}"))
        np.testing.assert_array_equal(back.array, volume.array)


def test_a_batch_journal_on_a_full_disk_names_the_case_and_the_file_and_resumes(tmp_path: Path) -> None:
    """The batch's journal of finished cases (flushed and fsynced per case) meets a full disk: the error names
    the case and the journal and says how to go on; after space is freed the same journal takes the case."""
    import subprocess
    import sys

    folder = tmp_path / "out"
    folder.mkdir()
    code = ("import sys\n"
            "from medseg.batch.table import RankPart, Row, read_rows\n"
            "from medseg.errors import MedsegError\n"
            f"part = RankPart({str(folder)!r}, 0)\n"
            "part.append(Row(case_id='case-1', status='ok'))\n"
            "try:\n"
            "    part.append(Row(case_id='case-2', status='ok', error='x' * 200_000))\n"
            "except MedsegError as error:\n"
            "    print('ERROR', error)\n"
            f"open({str(folder / 'filler')!r}, 'wb').close()\n"  # space freed: the filler emptied
            "part.append(Row(case_id='case-2', status='ok'))\n"
            f"print('ROWS', sorted(read_rows({str(folder)!r})))\n")
    script = _fill_script(folder, {"filler": 40_000}, 64)
    run = subprocess.run([*in_namespace(script), sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr
    error = next(line for line in run.stdout.splitlines() if line.startswith("ERROR"))
    assert "part-rank0.jsonl" in error and "cannot record the result of case 'case-2'" in error
    assert "No space left on device" in error and "run the same command again" in error
    assert "ROWS ['case-1', 'case-2']" in run.stdout  # the torn line is skipped, both cases are recorded
