"""Two medseg processes on one study: the second is told which process has it and edits only a copy
journalled on its own; a live journal is never offered for recovery (nor discarded) by another process; a
holder killed with SIGKILL leaves a stale lock that is taken over only when asked, and its edits recover.

Each side is a real ``python -c`` process driving the document API, as two windows would."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from medseg.edit.journal import read_journal, recover

REPO = Path(__file__).resolve().parents[2]

# One process: claims the study (mode "edit"), or on refusal says why and goes on as a copy (mode "copy"),
# or only looks (mode "look"); paints one dab, prints what happened, then waits for its stdin to close.
SCRIPT = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.journal import find_sessions
    from medseg.edit.study_lock import StudyOpenElsewhere, claim_session
    from medseg.io import read_image

    root, source, mode, value = Path(sys.argv[1]), sys.argv[2], sys.argv[3], int(sys.argv[4])
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    said = {"pid": os.getpid()}
    try:
        doc.claim_study(source, take_stale=mode == "take over")
    except StudyOpenElsewhere as error:
        said.update(refused=str(error), stale=error.stale, owner_pid=error.owner.pid if error.owner else None)
        if mode != "copy":
            print(json.dumps(said), flush=True)
            sys.exit(3)
        doc.claim_study(source, copy=True)
    claims = [(s.folder, claim_session(s.folder)) for s in find_sessions(root)]  # as a window's start-up offer
    said["recoverable"] = [str(folder) for folder, claim in claims if claim is not None]
    for _folder, claim in claims:
        if claim is not None:
            claim.release()
    doc.set_volume(read_image(source), source=source)
    doc.new_label_map()
    assert doc.apply(tools.dab(doc.label_map, (15, 30 + 30 * value, 60), 6.0, value), "dab")
    said["journal"] = str(doc.journal.folder)
    print(json.dumps(said), flush=True)
    sys.stdin.read()  # until the test closes our stdin
    doc.close_journal(discard=True)
    doc.release_study()
""")


def _start(root: Path, source: Path, mode: str, value: int) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-c", SCRIPT, str(root), str(source), mode, str(value)], cwd=REPO,
                            env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _said(process: subprocess.Popen) -> dict:
    line = process.stdout.readline()
    assert line, process.stderr.read()
    return json.loads(line)


def _end(process: subprocess.Popen) -> None:
    process.stdin.close()
    assert process.wait(timeout=60) == 0, process.stderr.read()


@pytest.fixture
def study(ct_dir: Path) -> Path:
    return ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"


@pytest.mark.timeout(300)
def test_a_second_process_is_told_and_edits_a_copy_journalled_apart(tmp_path: Path, study: Path) -> None:
    root = tmp_path / "sessions"
    first = _start(root, study, "edit", 1)
    try:
        mine = _said(first)
        assert "refused" not in mine
        before = (Path(mine["journal"]) / "journal-1.bin").read_bytes()
        assert len(read_journal(Path(mine["journal"]) / "journal-1.bin")[0]) == 1

        refused = _start(root, study, "edit", 2)
        told = _said(refused)
        assert refused.wait(timeout=60) == 3
        assert told["owner_pid"] == first.pid and not told["stale"]
        assert f"process {first.pid} on " in told["refused"] and "example_ct_sm.nii.gz" in told["refused"]
        assert "open it as a copy" in told["refused"]

        copy = _start(root, study, "copy", 2)
        theirs = _said(copy)
        assert theirs["owner_pid"] == first.pid
        assert theirs["journal"] != mine["journal"]
        # the first window's journal is alive: never offered (its Discard would delete it under the writer)
        assert mine["journal"] not in theirs["recoverable"]
        _end(copy)
        assert (Path(mine["journal"]) / "journal-1.bin").read_bytes() == before  # written by one process only
        assert not Path(theirs["journal"]).exists()  # the copy's own journal, closed cleanly
        _end(first)
    finally:
        if first.poll() is None:
            first.kill()
    assert not list((root / "locks").glob("*.lock"))  # a clean close leaves nothing stale behind


@pytest.mark.timeout(300)
def test_a_lock_left_by_a_killed_process_is_taken_over_only_when_asked(tmp_path: Path, study: Path) -> None:
    root = tmp_path / "sessions"
    first = _start(root, study, "edit", 1)
    mine = _said(first)
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    first.stdout.close(), first.stdin.close(), first.stderr.close()

    asked = _start(root, study, "edit", 2)
    told = _said(asked)
    assert asked.wait(timeout=60) == 3
    assert told["stale"] and told["owner_pid"] == first.pid
    assert f"process {first.pid} on " in told["refused"] and "ended without closing it" in told["refused"]

    taken = _start(root, study, "take over", 2)
    try:
        said = _said(taken)
        assert "refused" not in said
        assert mine["journal"] in said["recoverable"]  # the dead process's edits are offered now
    finally:
        _end(taken)
    _source, label_map = recover(Path(mine["journal"]))
    deltas, _steps = read_journal(Path(mine["journal"]) / "journal-1.bin")
    assert len(deltas) == 1 and np.count_nonzero(label_map.array == 1) == deltas[0].count
