"""The autosave journal's switch to a new base survives a SIGKILL at every step.

Before the fix ``base.npz`` was replaced before ``journal.bin`` was truncated: a kill in that
window replayed the old journal's edits onto the new base (388 voxels wrong after recovery in
the probe). Here a child process edits, then starts a new base (a Segment result) and SIGKILLs
itself at one moment of the switch, seen from the files (the session folder's documented layout:
``base-N.npz``, ``journal-N.bin``, ``session.json``): just before the new base is renamed into
place, just after it is, after the new journal appears, after ``session.json`` names the new
generation, after the old generation's last file is removed. The parent recovers and the label
map must be exactly the state before the switch or exactly the state after it.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from medseg.edit.journal import find_sessions, recover

STEPS = ["start", "base written", "journal created", "session switched", "old generation removed"]

CHILD = textwrap.dedent('''
    import os, signal, sys
    from pathlib import Path
    import numpy as np
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.label_map import LabelMap
    from medseg.io import read_image

    image_path, labels_path, root, kill_at = sys.argv[1], sys.argv[2], Path(sys.argv[3]), sys.argv[4]
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    image = read_image(image_path)
    doc.set_volume(image, source=image_path)
    doc.set_label_map(LabelMap.from_volume(read_image(labels_path)))
    lm = doc.label_map
    for i, centre in enumerate([(10, 40, 40), (15, 60, 50), (20, 50, 70), (12, 30, 60), (18, 70, 30)]):
        doc.apply(tools.dab(lm, np.array(centre, float), 5.0, 40 + i, image=image), "dab")
    np.save(root / "before.npy", lm.array)
    segment_result = np.zeros(lm.shape_zyx, np.uint8)
    segment_result[5:25, 20:80, 20:90] = 1  # the new base: a different label map altogether
    np.save(root / "after.npy", segment_result)

    def die():
        os.kill(os.getpid(), signal.SIGKILL)

    real_replace, real_unlink = os.replace, Path.unlink

    def replace(source, target):  # every atomic write renames its temporary file into place
        name = Path(target).name
        if kill_at == "start" and name.startswith("base-"):
            die()
        real_replace(source, target)
        if (kill_at, name.split("-")[0]) in (("base written", "base"), ("journal created", "journal")) or (
                kill_at == "session switched" and name == "session.json"):
            die()

    def unlink(path, missing_ok=False):
        real_unlink(path, missing_ok=missing_ok)
        if kill_at == "old generation removed" and path.name == "journal.bin":  # the last old file it removes
            die()

    os.replace, Path.unlink = replace, unlink
    doc.set_label_map(LabelMap.from_volume(image.with_array(segment_result)))
    print("switched without being killed", flush=True)
''')


@pytest.mark.parametrize("kill_at", STEPS)
def test_a_kill_during_the_switch_recovers_one_whole_state(ct_dir: Path, tmp_path: Path, kill_at: str) -> None:
    folder = ct_dir / "totalsegmentator"
    root = tmp_path / "sessions"
    root.mkdir()
    run = subprocess.run([sys.executable, "-c", CHILD, str(folder / "example_ct_sm.nii.gz"),
                          str(folder / "example_seg.nii.gz"), str(root), kill_at],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == -signal.SIGKILL, run.stdout + run.stderr
    before, after = np.load(root / "before.npy"), np.load(root / "after.npy")
    assert np.count_nonzero(before != after) > 10_000  # the two states differ a lot
    sessions = find_sessions(root)
    if not sessions:
        pytest.fail(f"killed at {kill_at!r}: nothing left to recover")
    assert len(sessions) == 1
    _, recovered = recover(sessions[0].folder)
    matches_before = np.array_equal(recovered.array, before)
    matches_after = np.array_equal(recovered.array, after)
    expected_after = STEPS.index(kill_at) >= STEPS.index("session switched")
    assert (matches_after if expected_after else matches_before), (
        f"killed at {kill_at!r}: {np.count_nonzero(recovered.array != (after if expected_after else before))} "
        "voxels differ from the state the user saw")


def test_a_session_written_before_generations_still_recovers(abdomen_like, tmp_path: Path) -> None:
    """base.npz + journal.bin and no generation in session.json: the layout of earlier versions."""
    import json

    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.journal import journal_file

    image, label_map = abdomen_like
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="ct")
    doc.set_label_map(label_map)
    doc.apply(tools.dab(doc.label_map, np.array((12.0, 50.0, 50.0)), 6.0, 44, image=image), "dab")
    folder = find_sessions(tmp_path)[0].folder
    journal_file(folder).rename(folder / "journal.bin")
    (folder / "base-1.npz").rename(folder / "base.npz")
    info = json.loads((folder / "session.json").read_text())
    del info["generation"]
    (folder / "session.json").write_text(json.dumps(info))
    _, recovered = recover(folder)
    assert np.array_equal(recovered.array, doc.label_map.array)
    assert find_sessions(tmp_path)[0].records == 1


@pytest.fixture
def abdomen_like(ct_dir: Path):
    from medseg.edit.label_map import LabelMap
    from medseg.io import read_image

    folder = ct_dir / "totalsegmentator"
    return (read_image(folder / "example_ct_sm.nii.gz"),
            LabelMap.from_volume(read_image(folder / "example_seg.nii.gz")))
