"""Issue #51: the app measures the CPU engines in the background only while idle, through the app's job
runner, and any work the user starts cancels it (what is left stays scheduled for the next idle moment)."""

from __future__ import annotations

import threading
import time

from medseg.gui.common import idle_measure
from medseg.job_registry import JobRegistry
from medseg.model import cpu_runtime


def test_an_idle_measurement_starts_only_when_nothing_runs_and_work_cancels_it(qtbot, monkeypatch):
    registry = JobRegistry()  # the app's list of running jobs, this test's own
    started, seen_cancel = threading.Event(), []

    def measurement(progress=None, cancel=None, starter=False) -> int:  # stands in for the engines' timing: runs until cancelled
        started.set()
        while not cancel.cancelled:
            time.sleep(0.01)
        seen_cancel.append(True)
        cancel.raise_if_cancelled()
        return 1

    monkeypatch.setattr(idle_measure, "_measure", measurement)
    from medseg.workflows.models import open_model

    package = open_model(None).package  # the built-in starter: measured by nothing here (a stand-in measures)
    cpu_runtime.schedule(package, "2d", 2)
    try:
        user_work = registry.add("opening a study")  # the user is busy: nothing starts
        measurer = idle_measure.IdleMeasurer(registry=registry, idle_ms=0)
        measurer._poll()  # what its timer calls
        assert measurer.job is None and not started.is_set()
        user_work.finish()  # idle: the measurement starts, listed in the job runner's list as itself
        measurer._poll()
        qtbot.waitUntil(started.is_set, timeout=10_000)
        assert [job.name for job in registry.jobs()] == [idle_measure.TITLE]
        with qtbot.waitSignal(measurer.measured, timeout=10_000):
            registry.add("segmenting")  # the user starts work: the measurement is cancelled at once
        assert seen_cancel == [True] and measurer.job is None
        assert (package, "2d", 2) in cpu_runtime.scheduled()  # not measured: asked for again later
        measurer.stop()
    finally:
        cpu_runtime.unschedule(package, "2d", 2)
