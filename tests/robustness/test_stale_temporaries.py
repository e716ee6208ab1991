"""A writer killed mid-save leaves a hidden temporary file; the next write into that folder
removes it, and never the temporary of a writer that is still at work."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from medseg.io.atomic import atomic_write_bytes

WRITER = textwrap.dedent('''
    import sys
    from medseg.io.atomic import atomic_path
    with atomic_path(sys.argv[1]) as temp:
        temp.write_bytes(b"x" * 3_000_000)  # half of a big save
        print(temp, flush=True)
        sys.stdin.read()  # killed here, or released by the test
''')


def _start_writer(target: Path) -> tuple[subprocess.Popen, Path]:
    child = subprocess.Popen([sys.executable, "-c", WRITER, str(target)], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    temp = Path(child.stdout.readline().strip())  # type: ignore[union-attr]
    assert temp.is_file() and temp.name.startswith(".seg.nii.gz.")
    return child, temp


def _age(path: Path, seconds: float) -> None:
    stamp = time.time() - seconds
    os.utime(path, (stamp, stamp))


def _write_in_a_new_process(folder: Path) -> None:
    """The clean-up runs once per folder and process: a new process, as the next command would be."""
    subprocess.run([sys.executable, "-c", "import sys; from medseg.io.atomic import atomic_write_bytes; "
                    "atomic_write_bytes(sys.argv[1], b'table')", str(folder / "other.csv")], check=True)


def test_a_killed_writers_temporary_is_removed_by_the_next_write(tmp_path: Path) -> None:
    child, temp = _start_writer(tmp_path / "seg.nii.gz")
    child.kill()
    child.wait()
    assert temp.is_file()  # what a SIGKILL leaves behind
    _age(temp, 60)
    _write_in_a_new_process(tmp_path)
    assert not temp.exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["other.csv"]


def test_a_running_writers_temporary_is_left_alone(tmp_path: Path) -> None:
    child, temp = _start_writer(tmp_path / "seg.nii.gz")
    try:
        _age(temp, 7200)  # however old it looks: its writer holds the lock
        _write_in_a_new_process(tmp_path)
        assert temp.is_file()
    finally:
        child.communicate("")
    assert child.returncode != 0  # the 3 MB of x are not a NIfTI: the writer's own check refuses them
    assert not temp.exists()


def test_user_files_that_look_hidden_are_not_touched(tmp_path: Path) -> None:
    keep = [".bashrc", ".seg.nii.gz.swp", ".notes.abcdefgh.txt", ".seg.nii.gz"]
    for name in keep:
        (tmp_path / name).write_text("mine")
        _age(tmp_path / name, 7200)
    _write_in_a_new_process(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*keep, "other.csv"])


def test_a_fresh_temporary_of_a_writer_just_starting_is_left_alone(tmp_path: Path) -> None:
    """Between mkstemp and taking its lock a writer holds no lock: its file's youth protects it."""
    fresh = tmp_path / ".seg.nii.gz.abcd1234.nii.gz"
    fresh.write_bytes(b"just created")
    atomic_write_bytes(tmp_path / "x.csv", b"1")
    _write_in_a_new_process(tmp_path)
    assert fresh.is_file()
