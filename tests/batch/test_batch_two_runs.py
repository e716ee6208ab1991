"""Two ``medseg batch`` runs on one output folder: the second is refused at once, naming the first (its
process and start time), and writes nothing; after a SIGKILL of the first, the next run takes over its stale
lock, says so, and finishes: every case once in the parts and the table, every output whole."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from batch_helpers import REPO_ROOT, events_of, run_cli

from medseg.batch.table import read_table, state_folder

ARGS = ("--format", "nii.gz", "--json", "--threads", "1")


def _start(archive: Path, out: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "medseg", "batch", str(archive), "-o", str(out), *ARGS],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO_ROOT)


def _until_first_case(process: subprocess.Popen) -> list[dict]:
    """The run's events up to its first finished case (it holds the folder from before its first event)."""
    seen = []
    for line in process.stdout:  # type: ignore[union-attr]
        seen.append(json.loads(line))
        if seen[-1]["event"] == "case":
            return seen
    raise AssertionError(f"the run ended before a case: {process.stderr.read()[-3000:]}")  # type: ignore[union-attr]


def _part_rows(out: Path) -> list[dict]:
    rows = []
    for part in sorted(state_folder(out).glob("part-rank*.jsonl")):
        for line in part.read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except ValueError:
                continue  # a line cut by the kill
    return rows


def _assert_consistent(out: Path, cases: int) -> None:
    rows = _part_rows(out)
    assert len(rows) == cases and len({r["case_id"] for r in rows}) == cases  # no case recorded twice
    table = read_table(out / "results.csv")
    assert len(table) == cases and len({r["case_id"] for r in table}) == cases
    assert all(r["status"] == "ok" for r in table), [r["error"] for r in table]
    for row in table:  # every output whole: the size its row recorded
        assert (out / row["output"]).stat().st_size == int(row["output_bytes"])
    assert [p.name for p in out.iterdir() if p.name.startswith(".") and p.name != ".medseg-batch"] == []


@pytest.mark.slow
def test_a_second_run_on_the_same_output_is_refused_naming_the_first(small_archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _start(small_archive, out)
    try:
        _until_first_case(first)
        # the first run stays mid-way (stopped, its lock held) until the second has tried: however fast this
        # machine, the second meets a run that is still working
        first.send_signal(signal.SIGSTOP)
        try:
            second = run_cli("batch", str(small_archive), "-o", str(out), *ARGS, timeout=300)
        finally:
            first.send_signal(signal.SIGCONT)
        assert second.returncode == 1, second.stderr[-3000:]
        failed = events_of(second.stdout)[-1]
        assert failed["event"] == "failed"
        for text in (second.stderr, failed["error"]):
            assert "another medseg batch is writing to this output folder" in text
            assert f"process {first.pid} on " in text and "since " in text
        assert not any(e["event"] in ("started", "case") for e in events_of(second.stdout))  # refused before planning
        _rest, errors = first.communicate(timeout=900)
        assert first.returncode == 0, errors[-3000:]
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(timeout=60)
    assert {r["rank"] for r in _part_rows(out)} == {0}
    _assert_consistent(out, 4)


@pytest.mark.slow
def test_after_a_sigkill_the_next_run_takes_over_and_finishes(small_archive: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    first = _start(small_archive, out)
    try:
        _until_first_case(first)
        first.send_signal(signal.SIGKILL)
        assert first.wait(timeout=60) == -signal.SIGKILL
    finally:
        if first.poll() is None:
            first.kill()
        first.wait(timeout=60)
        first.stdout.close(), first.stderr.close()  # type: ignore[union-attr]

    rerun = run_cli("batch", str(small_archive), "-o", str(out), *ARGS, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    events = events_of(rerun.stdout)
    notes = [e["text"] for e in events if e["event"] == "message"]
    assert any(f"process {first.pid} on " in n and "ended without finishing" in n for n in notes), notes
    started = next(e for e in events if e["event"] == "started")
    assert started["done_before"] >= 1 and started["to_do"] == 4 - started["done_before"]
    _assert_consistent(out, 4)
    assert not (state_folder(out) / "run.lock").exists()  # released at the end: nothing stale for the next run
