"""medseg computes with every core it may use, and its own concurrent jobs share them (issue #40).

The default is the cores of this process's affinity mask (capped by a cgroup CPU quota), never
what other programs happen to be doing: a busy program beside it leaves the default as it is.
Jobs inside one process (a segmentation, the 3D mesher, grow from seeds, a batch's read-ahead)
split the budget through medseg.threads and get it back when the others end; ``--threads`` is
honoured by every computing command.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
from probes import json_event, rewrite_series, run_medseg

from medseg import threads

needs_affinity = pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="the OS has no CPU affinity masks")


def _clean_environment() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")}


def _expected_all_cores(cpus: set[int]) -> int:
    """Every usable core: the mask's CPUs, in physical cores where the machine has SMT (as PyTorch counts)."""
    import psutil

    logical, physical = psutil.cpu_count(logical=True), psutil.cpu_count(logical=False)
    if physical and logical and physical < logical:
        return max(1, round(len(cpus) * physical / logical))
    return len(cpus)


def _budget_in_a_fresh_process(affinity: set[int] | None = None) -> tuple[int, int, dict]:
    """(configure()'s budget, torch's thread count, `medseg devices --json`) in a new interpreter."""
    probe = ("from medseg import threads; budget = threads.configure(None)\n"
             "import json, torch\n"
             "from medseg.model.devices import probe\n"
             "report = probe()\n"
             "print(json.dumps([budget, torch.get_num_threads(), {'threads': report.threads, "
             "'threads_source': report.threads_source, 'usable': report.cpu_usable_cores}]))")
    pin = (lambda: os.sched_setaffinity(0, affinity)) if affinity else None
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, env=_clean_environment(),
                          preexec_fn=pin, check=True, timeout=300)
    budget, torch_threads, report = json.loads(done.stdout.strip().splitlines()[-1])
    return budget, torch_threads, report


@needs_affinity
def test_a_busy_program_pinned_beside_it_leaves_every_usable_core_to_medseg() -> None:
    cpus = os.sched_getaffinity(0)
    busy = subprocess.Popen([sys.executable, "-c", "while True: pass"],
                            preexec_fn=lambda: os.sched_setaffinity(0, {min(cpus)}))
    try:
        with open(f"/proc/{busy.pid}/stat") as stat:  # running, not still starting
            while stat.read().split()[2] != "R":
                stat.seek(0)
        budget, torch_threads, report = _budget_in_a_fresh_process()
    finally:
        busy.kill()
        busy.wait()
    expected = _expected_all_cores(cpus)
    assert (budget, torch_threads, report["threads"]) == (expected, expected, expected)
    assert "affinity mask" in report["threads_source"]


@needs_affinity
def test_an_affinity_mask_of_one_core_gives_one_thread() -> None:
    budget, torch_threads, report = _budget_in_a_fresh_process({min(os.sched_getaffinity(0))})
    assert (budget, torch_threads, report["threads"], report["usable"]) == (1, 1, 1, 1)
    assert report["threads_source"].startswith(threads.FROM_AFFINITY)


@pytest.fixture
def budget_of_four():
    """The process's budget set to 4 threads for one test (whatever this machine has), then put back."""
    before = threads.budget_count()
    torch_before = torch.get_num_threads()
    threads.configure(4, threads.FROM_SETTING)
    yield threads.BUDGET
    threads.BUDGET.set_count(before)
    torch.set_num_threads(torch_before)


def test_two_concurrent_jobs_split_the_budget_and_the_second_gets_it_all_back(budget_of_four) -> None:
    """Each job's torch thread count, read in its own thread: 4 alone, 2 + 2 together, 4 again after."""
    seen: dict[str, list[int]] = {"first": [], "second": []}
    second_started, first_done, first_may_end, second_may_refresh = (threading.Event() for _ in range(4))

    def first() -> None:
        with threads.job("segment"):
            seen["first"].append(torch.get_num_threads())
            second_started.wait(30)
            threads.refresh()  # between two tiles
            seen["first"].append(torch.get_num_threads())
            first_may_end.wait(30)
        first_done.set()

    def second() -> None:
        with threads.job("3D surfaces"):
            second_started.set()
            seen["second"].append(torch.get_num_threads())
            second_may_refresh.wait(30)
            threads.refresh()
            seen["second"].append(torch.get_num_threads())

    one = threading.Thread(target=first)
    one.start()
    while not seen["first"]:  # the first job runs with its lease before the second starts
        one.join(0.01)
    two = threading.Thread(target=second)
    two.start()
    second_started.wait(30)
    while len(seen["first"]) < 2:
        one.join(0.01)
    first_may_end.set()
    first_done.wait(30)
    second_may_refresh.set()
    one.join(30)
    two.join(30)
    assert seen == {"first": [4, 2], "second": [2, 4]}
    assert threads.BUDGET.leases() == []


def test_a_single_threaded_job_leaves_the_rest_to_the_others(budget_of_four) -> None:
    with threads.job("segment") as segment:
        assert segment.threads == 4
        preview = threads.BUDGET.lease("grow from seeds", most=1)
        assert (segment.threads, preview.threads) == (3, 1)
        preview.release()
        assert segment.threads == 4


def test_more_jobs_than_threads_each_keep_one(budget_of_four) -> None:
    leases = [threads.BUDGET.lease(f"job {i}") for i in range(6)]
    assert [lease.threads for lease in leases] == [1] * 6
    for lease in leases[2:]:
        lease.release()
    assert [lease.threads for lease in leases[:2]] == [2, 2]
    for lease in leases[:2]:
        lease.release()


def test_a_job_inside_a_job_of_the_same_thread_is_that_job(budget_of_four) -> None:
    with threads.job("segment") as outer:
        with threads.job("prepare") as inner:  # segment() prepares its input itself
            assert inner is outer and len(threads.BUDGET.leases()) == 1
            assert torch.get_num_threads() == 4
    assert threads.BUDGET.leases() == []


@pytest.mark.parametrize("cores, processes, shares", [(4, 3, [2, 1, 1]), (16, 4, [4, 4, 4, 4]), (2, 4, [1, 1, 1, 1])])
def test_processes_on_one_machine_split_its_cores(cores: int, processes: int, shares: list[int]) -> None:
    count = threads.CoreCount(cores, threads.FROM_AFFINITY, f"{cores} of {cores} logical CPUs")
    assert [threads.process_share(rank, processes, count).threads for rank in range(processes)] == shares


def _cgroup_v2(root: Path, limits: dict[str, str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory\n")
    for folder, limit in limits.items():
        (root / folder).mkdir(parents=True, exist_ok=True)
        (root / folder / "cpu.max").write_text(limit + "\n")
    proc = root / "proc_self_cgroup"
    proc.write_text("0::/" + max(limits, key=len) + "\n")
    return proc


def test_a_cgroup_v2_quota_counts_the_tightest_limit_on_the_path(tmp_path: Path) -> None:
    proc = _cgroup_v2(tmp_path, {"machine.slice": "300000 100000", "machine.slice/medseg.scope": "150000 100000"})
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 1.5
    proc = _cgroup_v2(tmp_path / "loose", {"a": "max 100000", "a/b": "max 100000"})
    assert threads.cgroup_cpu_quota(tmp_path / "loose", proc) is None


def test_a_cgroup_v1_quota_is_read_from_the_cpu_controller(tmp_path: Path) -> None:
    folder = tmp_path / "cpu,cpuacct" / "docker" / "abc"
    folder.mkdir(parents=True)
    (folder / "cpu.cfs_quota_us").write_text("200000\n")
    (folder / "cpu.cfs_period_us").write_text("100000\n")
    proc = tmp_path / "cgroup"
    proc.write_text("12:memory:/docker/abc\n4:cpu,cpuacct:/docker/abc\n")
    assert threads.cgroup_cpu_quota(tmp_path, proc) == 2.0
    (folder / "cpu.cfs_quota_us").write_text("-1\n")  # no quota
    assert threads.cgroup_cpu_quota(tmp_path, proc) is None


def test_segment_runs_with_the_threads_it_is_given(three_slices: Path, tmp_path: Path) -> None:
    series = rewrite_series(three_slices, tmp_path / "ct", crop=192)
    done = json_event(run_medseg("segment", series, "-o", tmp_path / "seg.nii.gz", "--threads", "1", "--json"))
    assert done["threads"] == 1


def test_every_computing_command_takes_threads() -> None:
    for command in ("segment", "train", "evaluate", "export", "edit", "stats", "mesh", "convert", "gui"):
        run = run_medseg(command, "--help", memory_bytes=None)
        assert "--threads" in run.stdout, command


def test_a_paused_lease_leaves_its_share_to_the_others_until_it_resumes(budget_of_four) -> None:
    with threads.job("training") as training:
        preview = threads.BUDGET.lease("3D surfaces")
        assert (training.threads, preview.threads) == (2, 2)
        with threads.paused():  # the training tab's Pause: the job waits at its next step
            assert preview.threads == 4 and threads.BUDGET.leases() == [preview]
        assert (training.threads, preview.threads) == (2, 2) and torch.get_num_threads() == 2
        preview.pause()
        preview.release()  # ended while paused: resuming takes nothing back
        preview.resume()
        assert threads.BUDGET.leases() == [training] and training.threads == 4


def test_training_batches_prepared_ahead_count_in_the_budget(budget_of_four) -> None:
    """The prefetch workers hold a thread each of the budget while the prefetcher is open, batch or no batch:
    the training step has the rest, the same count at every step (its reductions round the same way)."""
    from medseg.model.training.prefetch import BatchPrefetcher

    making, may_finish = threading.Event(), threading.Event()
    seen: list[int] = []

    def make(epoch: int, iteration: int):
        seen.append(torch.get_num_threads())
        making.set()
        may_finish.wait(30)
        return torch.zeros(1), torch.zeros(1)

    with threads.job("training") as training:
        with BatchPrefetcher(make, [(0, 0)], torch.device("cpu"), workers=1) as prefetcher:
            assert making.wait(30)
            assert training.threads == 3 and len(threads.BUDGET.leases()) == 2
            may_finish.set()
            prefetcher.get(0, 0)
            assert training.threads == 3  # no batch being made now: the share stays as it was
        assert seen == [1]  # the worker computes with its one thread (the sampler's rule)
        assert threads.BUDGET.leases() == [training] and training.threads == 4
