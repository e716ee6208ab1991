"""The one atomic write: a failure at any point leaves the previous file exactly as it was."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from medseg.core.label_colors import color_for, name_color, totalsegmentator_name, value_color
from medseg.errors import SaveError
from medseg.io.atomic import atomic_folder, atomic_open, atomic_path, atomic_write_bytes, check_writable


def test_replaces_and_leaves_no_temporary(tmp_path):
    target = tmp_path / "seg.nii.gz"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new contents")
    assert target.read_bytes() == b"new contents"
    assert [p.name for p in tmp_path.iterdir()] == ["seg.nii.gz"]


def test_exception_inside_keeps_old_file(tmp_path):
    target = tmp_path / "labels.nrrd"
    target.write_bytes(b"edits of an afternoon")
    with pytest.raises(RuntimeError):
        with atomic_open(target) as handle:
            handle.write(b"half")
            raise RuntimeError("writer crashed")
    assert target.read_bytes() == b"edits of an afternoon"
    assert [p.name for p in tmp_path.iterdir()] == ["labels.nrrd"]


def test_temporary_path_has_the_target_suffix(tmp_path):
    import gzip

    with atomic_path(tmp_path / "a.txt.gz") as temp:
        assert temp.name.endswith(".txt.gz") and temp.parent == tmp_path
        temp.write_bytes(gzip.compress(b"x"))  # a whole gzip file: the check before the rename passes
    assert gzip.decompress((tmp_path / "a.txt.gz").read_bytes()) == b"x"


def test_missing_folder_is_named(tmp_path):
    target = tmp_path / "gone" / "seg.dcm"
    with pytest.raises(SaveError) as info:
        check_writable(target)  # before the work: the folder is named
    assert (info.value.path, info.value.message) == (tmp_path / "gone", "the folder does not exist")
    # at the write (the folder vanished during the work): the file is named, with the OS's reason
    with pytest.raises(SaveError) as info:
        atomic_write_bytes(target, b"x")
    assert isinstance(info.value.__cause__, FileNotFoundError)
    assert (info.value.path, info.value.message) == (target, f"cannot write ({os.strerror(errno.ENOENT)})")
    assert info.value.hint == "the folder no longer exists; choose another folder"
    assert list(tmp_path.iterdir()) == []  # nothing made on the way


def test_disk_full_is_a_save_error_and_old_file_survives(tmp_path):
    """A file-size limit (as ``ulimit -f``) makes the write fail like a full disk."""
    target = tmp_path / "seg.bin"
    target.write_bytes(b"previous")
    script = textwrap.dedent(f"""
        import resource, signal, sys
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (4096, 4096))
        from medseg.errors import SaveError
        from medseg.io.atomic import atomic_write_bytes
        try:
            atomic_write_bytes({str(target)!r}, b"x" * 100_000)
        except SaveError as error:
            print("SAVEERROR", error)
            sys.exit(3)
    """)
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert result.returncode == 3, result.stderr
    assert "seg.bin" in result.stdout and "disk is full" in result.stdout
    assert target.read_bytes() == b"previous"
    assert [p.name for p in tmp_path.iterdir()] == ["seg.bin"]


def test_one_colour_per_label_everywhere():
    # TotalSegmentator v2: 5 is the liver; the name and the value give the same colour.
    assert totalsegmentator_name(5) == "liver"
    assert name_color("Liver") == value_color(5) == color_for(99, "liver")
    assert color_for(0, "background") == (0, 0, 0)
    # Unknown names fall back to the value's colour; values past the table still differ.
    assert color_for(7, "my lesion") == value_color(7)
    assert value_color(300) != value_color(301)


def test_atomic_folder_replaces_whole_or_not_at_all(tmp_path):
    target = tmp_path / "series"
    with atomic_folder(target) as temp:
        (temp / "1.txt").write_bytes(b"one")
    assert sorted(p.name for p in target.iterdir()) == ["1.txt"]
    with pytest.raises(RuntimeError, match="could not be read"):
        with atomic_folder(target) as temp:
            (temp / "2.txt").write_bytes(b"two")
            raise RuntimeError("the third file could not be read")
    assert sorted(p.name for p in target.iterdir()) == ["1.txt"]  # the old folder, untouched
    with atomic_folder(target) as temp:
        (temp / "2.txt").write_bytes(b"two")
    assert sorted(p.name for p in target.iterdir()) == ["2.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["series"]  # no temporary or old folder left
