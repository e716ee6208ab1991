"""Concurrent runs do not oversubscribe the cores: --threads is honoured by every computing
command, and without it a run takes the cores other processes leave free."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from medseg.threads import free_cores, usable_cores
from probes import json_event, rewrite_series, run_medseg


@pytest.mark.parametrize("loadavg, cores, free", [
    ("0.00 0.01 0.05 1/412 9000", 2, 2),  # idle: all of them
    ("0.90 0.50 0.20 1/412 9000", 2, 2),  # this process's own start-up is in the 1-minute load
    ("5.90 5.10 3.00 7/412 9000", 2, 1),  # six other runs: one thread, never zero
    ("1.00 1.00 1.00 3/412 9000", 8, 6),  # two runnable right now, though the average lags
    ("garbage", 4, 4),
])
def test_free_cores_from_the_load(loadavg: str, cores: int, free: int) -> None:
    assert free_cores(cores, loadavg) == free


def test_segment_runs_with_the_threads_it_is_given(three_slices: Path, tmp_path: Path) -> None:
    series = rewrite_series(three_slices, tmp_path / "ct", crop=192)
    done = json_event(run_medseg("segment", series, "-o", tmp_path / "seg.nii.gz", "--threads", "1", "--json"))
    assert done["threads"] == 1


def test_every_computing_command_takes_threads() -> None:
    for command in ("segment", "train", "evaluate", "export", "edit", "stats", "mesh", "convert"):
        run = run_medseg(command, "--help", memory_bytes=None)
        assert "--threads" in run.stdout, command


def test_with_every_core_busy_a_run_takes_one_thread() -> None:
    busy = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(usable_cores() + 1)]
    try:
        for process in busy:  # each is runnable once its interpreter started
            with open(f"/proc/{process.pid}/stat") as stat:
                while stat.read().split()[2] != "R":
                    stat.seek(0)
        probe = ("import os; os.environ.pop('OMP_NUM_THREADS', None)\n"
                 "from medseg import threads; budget = threads.configure(None)\n"
                 "import torch; print(budget, torch.get_num_threads())")
        env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}
        out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=env, check=True)
        assert out.stdout.split() == ["1", "1"], out.stdout
    finally:
        for process in busy:
            process.kill()
            process.wait()
