"""One job runner for callback functions and generators, one Qt-free registry behind the status bar."""

from __future__ import annotations

import gc
import os
import threading

import torch

from medseg.errors import Cancelled
from medseg.gui.common.jobs import Job
from medseg.job_registry import JobRegistry
from medseg.progress import Progress, report


def test_a_generator_job_streams_its_events_and_returns_its_value(qtbot):
    registry = JobRegistry()
    seen_threads = []

    def work(progress=None, cancel=None):
        def events():
            for number in range(5):
                seen_threads.append(threading.current_thread())
                yield {"n": number}
            yield Progress(1.0, "done", "end")
            return "the result"
        return events()

    job = Job("gen", work, registry=registry)
    received = []
    job.yielded.connect(received.append)
    changes = []
    registry.subscribe(lambda: changes.append(len(registry.jobs())))
    with qtbot.waitSignal(job.finished_ok, timeout=10_000) as blocker:
        job.start()
        assert [j.name for j in registry.jobs()] == ["Gen"]  # listed while it runs, by its title
    assert blocker.args == ["the result"]
    assert received[:5] == [{"n": n} for n in range(5)] and received[5] == Progress(1.0, "done", "end")
    assert all(t is not threading.main_thread() for t in seen_threads)  # it ran in the worker
    assert registry.jobs() == [] and changes[0] == 1 and changes[-1] == 0
    assert gc.isenabled()  # the collector is paused only for jobs that ask (loads)


def test_cancel_is_checked_between_yields_and_the_generator_is_closed(qtbot):
    registry = JobRegistry()
    state = {"yielded": 0, "closed": False}
    working, gate = threading.Event(), threading.Event()

    def work(progress=None, cancel=None):
        def events():
            try:
                for number in range(1000):
                    state["yielded"] += 1
                    if number == 3:
                        working.set()
                        gate.wait(10)  # a long unit of work, during which the GUI presses Cancel
                    yield number
            finally:
                state["closed"] = True
        return events()

    job = Job("cancel-me", work, registry=registry)
    with qtbot.waitSignal(job.finished_error, timeout=10_000) as blocker:
        job.start()
        qtbot.waitUntil(working.is_set, timeout=5_000)
        job.cancel()
        gate.set()
    assert isinstance(blocker.args[0], Cancelled)
    # the unit of work under way finishes and yields; the check before the next one stops the job
    assert state["yielded"] == 4 and state["closed"] and registry.jobs() == []


def test_pause_holds_a_generator_at_its_next_yield(qtbot):
    registry = JobRegistry()
    progress_seen, yielded, delivered = [], [], []
    paused_by_gui = threading.Event()

    def work(progress=None, cancel=None):
        report(progress, 0.5, "half way")  # a callback-style report from a generator job still arrives

        def events():
            for number in range(6):
                yielded.append(number)
                yield number
                if number == 2:
                    paused_by_gui.wait(10)  # item 3 is under way when the GUI pauses on item 2
            return "finished"
        return events()

    def on_event(number):
        delivered.append(number)
        if number == 2:
            job.pause()
            paused_by_gui.set()

    job = Job("pausable", work, registry=registry)
    job.progressed.connect(lambda f, t: progress_seen.append((f, t)))
    job.yielded.connect(on_event)
    job.pause()
    with qtbot.waitSignal(job.finished_ok, timeout=10_000):
        job.start()
        qtbot.waitUntil(lambda: job.held, timeout=5_000)  # held before its first item
        assert registry.jobs()[0].paused and registry.jobs()[0].text == "paused"
        assert yielded == [] and not delivered
        job.resume()
        qtbot.waitUntil(lambda: job.held and len(delivered) >= 3, timeout=5_000)  # held again
        assert yielded == [0, 1, 2, 3]  # the item under way was finished, and the next one not begun
        qtbot.waitUntil(lambda: delivered == [0, 1, 2, 3], timeout=5_000)
        assert job.held and yielded == [0, 1, 2, 3] and registry.jobs()[0].text == "paused"
        job.resume()
    assert delivered == yielded == list(range(6))  # resumed where it stopped: nothing lost, nothing twice
    assert progress_seen[0] == (0.5, "half way")


def test_status_bar_cancel_reaches_the_newest_cancellable_job():
    registry = JobRegistry()
    cancelled = []
    registry.add("loading", lambda: cancelled.append("loading"))
    registry.add("not cancellable", None)
    assert registry.cancel_newest() and cancelled == ["loading"]


def _collectable(kind: type) -> int:
    """How many ``kind`` objects a collection would look at (frozen ones are in no generation)."""
    return sum(isinstance(o, kind) for o in gc.get_objects())


def test_a_long_job_freezes_the_heap_while_it_runs_and_gives_it_back(qtbot):
    """background: objects alive at start, and those made during the job's first seconds, are
    moved out of the collector's reach (full collections then skip them); at the end the heap
    is unfrozen, so cyclic garbage that was frozen is collected again."""
    registry = JobRegistry()
    gc.unfreeze()
    seen = []

    class Cycle:
        def __init__(self) -> None:
            self.me = self

    niceness = []

    def work(progress=None, cancel=None):
        def events():
            niceness.append(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            seen.append(_collectable(Cycle))  # the 500 alive at start: frozen, out of the collector's reach
            made = [Cycle() for _ in range(1000)]
            seen.append(_collectable(Cycle))  # young: within the collector's reach
            yield "made"
            # the objects made before the first yield, frozen too. (Not read off the freeze count:
            # other threads free frozen objects meanwhile, and the count drops by those; CI saw 989.)
            seen.append(_collectable(Cycle))
            del made
            yield "dropped"
        return events()

    alive = [Cycle() for _ in range(500)]  # alive when the job starts
    assert _collectable(Cycle) == 500
    job = Job("long", work, registry=registry, background=True)
    with qtbot.waitSignal(job.finished_ok, timeout=10_000):
        job.start()
    assert seen == [0, 1000, 0]
    assert gc.get_freeze_count() == 0  # given back
    gc.collect()
    assert _collectable(Cycle) == 500  # the job's cyclic garbage is collected; the 500 alive are in reach again
    del alive
    gc.collect()
    assert not any(isinstance(o, Cycle) for o in gc.get_objects())  # the frozen cycles were collected after all
    # the job the user waits for runs at the user's priority (a nice of 10 made Segment yield to every
    # other program on the machine: 45-82 s in the window against 11.6 s on the command line, issue #40)
    assert niceness == [os.getpriority(os.PRIO_PROCESS, threading.get_native_id())]


def test_computing_jobs_split_the_thread_budget_and_io_jobs_leave_it(qtbot):
    """Two computing jobs (a segmentation and the 3D mesher) take 2 + 2 of a budget of 4 while both run;
    a PACS-like job that waits on the network takes no share; the budget is whole again after (issue #40)."""
    import torch

    from medseg import threads

    registry = JobRegistry()
    before, torch_before = threads.budget_count(), torch.get_num_threads()
    threads.configure(4, threads.FROM_SETTING)
    both_running, may_end = threading.Event(), threading.Event()
    seen: dict[str, list[int]] = {}

    def computing(name):
        def work(progress=None, cancel=None):
            seen.setdefault(name, []).append(threads.current())
            both_running.wait(10)
            threads.refresh()  # between two steps: the share after the other job started
            seen[name].append(torch.get_num_threads())
            may_end.wait(10)
            return name
        return work

    def waiting_on_the_network(progress=None, cancel=None):
        seen["pacs"] = [len(threads.BUDGET.leases())]
        return "pacs"

    try:
        segment = Job("segment", computing("segment"), registry=registry, background=True)
        mesher = Job("3D surfaces", computing("3D surfaces"), registry=registry, computes=True)
        pacs = Job("pacs-query", waiting_on_the_network, registry=registry)
        segment.start()
        qtbot.waitUntil(lambda: "segment" in seen, timeout=10_000)
        mesher.start()
        qtbot.waitUntil(lambda: len(threads.BUDGET.leases()) == 2, timeout=10_000)
        with qtbot.waitSignal(pacs.finished_ok, timeout=10_000):
            pacs.start()
        both_running.set()
        qtbot.waitUntil(lambda: len(seen.get("segment", [])) == 2 and len(seen.get("3D surfaces", [])) == 2,
                        timeout=10_000)
        with qtbot.waitSignals([segment.finished_ok, mesher.finished_ok], timeout=10_000):
            may_end.set()
        assert seen["pacs"] == [2]  # the network job did not add a third lease
        assert seen["segment"] == [4, 2]  # alone, then beside the mesher
        assert seen["3D surfaces"] == [2, 2]
        assert threads.BUDGET.leases() == []
    finally:
        may_end.set()
        both_running.set()
        threads.BUDGET.set_count(before)
        torch.set_num_threads(torch_before)


def test_a_paused_job_gives_its_share_of_the_threads_back_and_takes_it_again_on_resume(qtbot, monkeypatch):
    """Two computing jobs split the budget; while one is held by a pause the other computes with all of it."""
    from medseg import threads

    for name in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS"):
        monkeypatch.setenv(name, os.environ.get(name, ""))  # put back after configure() writes them
    before, torch_before = threads.budget_count(), torch.get_num_threads()
    threads.configure(4, threads.FROM_SETTING)
    registry = JobRegistry()
    shares: list[int] = []
    gates = [threading.Event() for _ in range(3)]  # each item starts when its gate opens
    gates[0].set()

    def work(progress=None, cancel=None):
        def events():
            for number in range(3):
                gates[number].wait(10)
                shares.append(threads.current())
                yield number
        return events()

    other = threads.BUDGET.lease("segment")  # a segmentation running beside it
    job = Job("pausable", work, registry=registry, computes=True)
    try:
        with qtbot.waitSignal(job.finished_ok, timeout=10_000):
            job.start()
            qtbot.waitUntil(lambda: len(shares) == 1, timeout=5_000)
            assert (shares[0], other.threads) == (2, 2)  # split while both compute
            job.pause()
            gates[1].set()  # item 1 under way finishes, then the job is held
            qtbot.waitUntil(lambda: job.held, timeout=5_000)
            assert other.threads == 4 and threads.BUDGET.leases() == [other]  # the held job's share went back
            job.resume()
            qtbot.waitUntil(lambda: len(threads.BUDGET.leases()) == 2, timeout=5_000)  # taken again on resume
            assert other.threads == 2
            gates[2].set()
        assert shares == [2, 2, 2]
        assert threads.BUDGET.leases() == [other]  # the job's lease ended with it
    finally:
        other.release()
        threads.BUDGET.set_count(before)
        torch.set_num_threads(torch_before)
