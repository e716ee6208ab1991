"""The one atomic folder replace (medseg.io.atomic.atomic_folder): killed or failing at any moment, it
leaves the old folder or the complete new one; a model package and the demo study are written through it."""

from __future__ import annotations

import gzip
import subprocess
import sys
import time
from pathlib import Path

import pytest

from medseg.errors import SaveError
from medseg.io.atomic import atomic_folder, clean_stale_temporaries, recover_folder
from medseg.io.file_checks import IncompleteFile

PROBE = Path(__file__).with_name("atomic_folder_probe.py")
OLD = {f"{i:02d}.txt": f"old {i}\n" for i in range(4)}
NEW = {f"{i:02d}.txt": f"new {i}\n" for i in range(6)}


def contents(folder: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(folder.iterdir())}


def old_folder(tmp_path: Path) -> Path:
    folder = tmp_path / "series"
    folder.mkdir()
    for name, text in OLD.items():
        (folder / name).write_text(text)
    return folder


def killed(folder: Path, moment: str) -> None:
    result = subprocess.run([sys.executable, str(PROBE), str(folder), moment], capture_output=True, text=True,
                            timeout=120)
    assert result.returncode == -9, result.stderr  # SIGKILL, at the moment asked for


@pytest.mark.parametrize("moment, expected", [("writing", OLD), ("before-swap", OLD), ("after-swap", NEW)])
def test_a_kill_leaves_the_old_folder_or_the_whole_new_one(tmp_path: Path, moment: str, expected: dict) -> None:
    folder = old_folder(tmp_path)
    killed(folder, moment)
    assert contents(folder) == expected
    # what the killed writer left beside it is removed by the next writer once its lock is gone
    leftovers = [p for p in tmp_path.iterdir() if p.name != "series"]
    assert leftovers and all(p.name.startswith(".series.") for p in leftovers)
    removed = clean_stale_temporaries(tmp_path, now=time.time() + 60)
    assert sorted(removed) == sorted(leftovers)
    assert [p.name for p in tmp_path.iterdir()] == ["series"]


def test_a_kill_inside_the_two_step_swap_is_undone_by_the_next_write(tmp_path: Path) -> None:
    """Where the file system cannot exchange two folders, the old one is set aside first; killed right
    then, the folder is missing until the next write (or recover_folder) puts the old one back."""
    folder = old_folder(tmp_path)
    killed(folder, "aside")
    assert not folder.exists()
    (aside,) = [p for p in tmp_path.iterdir() if p.name.endswith(".old")]
    assert aside.name.startswith(".series.") and contents(aside) == OLD
    assert recover_folder(folder)
    assert contents(folder) == OLD
    clean_stale_temporaries(tmp_path, now=time.time() + 60)  # the new folder that never got in
    assert [p.name for p in tmp_path.iterdir()] == ["series"]
    killed(folder, "aside")
    with atomic_folder(folder) as temp:  # the next write puts the old one back first, then replaces it
        (temp / "only.txt").write_text("newest\n")
    assert contents(folder) == {"only.txt": "newest\n"}
    clean_stale_temporaries(tmp_path, now=time.time() + 60)
    assert [p.name for p in tmp_path.iterdir()] == ["series"]


def test_an_incomplete_new_folder_is_refused_and_the_old_one_kept(tmp_path: Path) -> None:
    folder = old_folder(tmp_path)
    with pytest.raises(SaveError, match="not written completely") as caught:
        with atomic_folder(folder) as temp:
            payload = gzip.compress(b"x" * 100_000)
            (temp / "volume.nii.gz").write_bytes(payload[: len(payload) // 2])  # a short write
    assert caught.value.path == folder
    assert contents(folder) == OLD

    def three_files(temp: Path) -> None:
        if len(list(temp.iterdir())) != 3:
            raise IncompleteFile("three files were meant")

    with pytest.raises(SaveError, match="three files were meant"):
        with atomic_folder(folder, verify=three_files) as temp:
            (temp / "one.txt").write_text("1")
    with pytest.raises(RuntimeError, match="the writer failed"):
        with atomic_folder(folder) as temp:
            (temp / "one.txt").write_text("1")
            raise RuntimeError("the writer failed")
    assert contents(folder) == OLD
    assert [p.name for p in tmp_path.iterdir()] == ["series"]
    with atomic_folder(folder, verify=three_files) as temp:
        for index in range(3):
            (temp / f"{index}.txt").write_text(str(index))
    assert sorted(contents(folder)) == ["0.txt", "1.txt", "2.txt"]
    assert [p.name for p in tmp_path.iterdir()] == ["series"]


def test_a_model_package_killed_while_saved_keeps_the_old_package(tmp_path: Path) -> None:
    import shutil

    from medseg.model.package import load_package, starter_model_path

    folder = tmp_path / "starter"
    shutil.copytree(starter_model_path(), folder)
    (folder / "NOTES.md").write_text("the user's own notes\n")
    before = {p.name: p.read_bytes() for p in folder.iterdir()}
    killed(folder, "package")
    assert {p.name: p.read_bytes() for p in folder.iterdir()} == before
    package = load_package(folder)
    package.provenance["rewritten"] = True
    from medseg.model.package import save_package

    save_package(package, folder)  # the killed writer's leftovers do not stand in the way
    assert load_package(folder).provenance["rewritten"] is True
    assert (folder / "NOTES.md").read_text() == "the user's own notes\n"  # files it does not own stay
