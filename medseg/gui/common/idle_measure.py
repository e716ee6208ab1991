"""The app measures the CPU engines of the models it was asked to while it is idle (issue #51).

A Segment or a plan that finds no measurement of its model on this machine (never measured, or the
machine changed: another CPU, memory or thread count) runs PyTorch at once and schedules one
(medseg.model.cpu_runtime.schedule). This object watches the one list of running jobs
(medseg.job_registry): once nothing has run for :data:`IDLE_MS`, it measures the scheduled models
in one job of the app's job runner (medseg.gui.common.jobs), on one tile (seconds to tens of seconds per engine:
medseg.model.engine_measurement). Any other job starting (the user opened, segmented, saved ...)
cancels it at once; it stops between engines and what is left stays scheduled for the next idle
moment. The built-in starter, which no install measures, is looked at once a session (scheduled when
unmeasured), so that its first Segment finds its engine measured. ``measured`` is emitted when a
measurement job ended (the Segment panel shows the choice in its plan).
"""

from __future__ import annotations

import functools
import os
import sys
import time

from PySide6.QtCore import QObject, QTimer, Signal

from medseg.gui.common.jobs import Job
from medseg.job_registry import RUNNING_JOBS, JobRegistry

IDLE_MS = 3000  # how long no job has run before a measurement starts
POLL_MS = 1000
TITLE = "measuring the CPU engines (while idle; any work stops it)"


def _schedule_starter() -> None:
    """The built-in starter is never installed (where a model is measured): scheduled here if unmeasured."""
    from medseg import threads
    from medseg.model import cpu_runtime
    from medseg.model.kinds import open_path
    from medseg.model.package import starter_model_path

    model = open_path(starter_model_path(), "starter")
    for package, configuration in model.pipeline.engine_packages():
        cpu_runtime.planned_choice(package, configuration, threads.budget())  # schedules it when unmeasured


def _measure(progress=None, cancel=None, starter: bool = False) -> int:
    from medseg.model.engine_measurement import measure_scheduled

    if starter:
        _schedule_starter()
    return measure_scheduled(progress, cancel)


def _pinned() -> bool:
    """$MEDSEG_CPU_ENGINE names one engine for every model (the test suite pins PyTorch): nothing to measure."""
    return os.environ.get("MEDSEG_CPU_ENGINE", "").strip().lower() not in ("", "measure")


class IdleMeasurer(QObject):
    measured = Signal(int)  # a measurement job ended (how many models it measured)

    def __init__(self, parent: QObject | None = None, registry: JobRegistry | None = None,
                 idle_ms: int = IDLE_MS) -> None:
        super().__init__(parent)
        self.registry = registry if registry is not None else RUNNING_JOBS
        self.idle_ms = idle_ms
        self.job: Job | None = None
        self._starter_checked = False  # the built-in starter's measurement looked for (once a session)
        self._idle_since = time.monotonic()
        self._unsubscribe = self.registry.subscribe(self._on_jobs_changed)
        self._timer = QTimer(self)
        self._timer.setInterval(POLL_MS)
        self._timer.timeout.connect(self._poll)
        self._timer.start()

    def _others(self) -> list:
        # by its title: its entry is listed (and this called) before Job.start has it
        return [entry for entry in self.registry.jobs() if entry.name != TITLE]

    def _on_jobs_changed(self) -> None:
        if self._others():
            self._idle_since = time.monotonic()
            if self.job is not None and self.job.running:
                self.job.cancel()  # the user started work: it goes first

    def _poll(self) -> None:
        if self.job is not None or self._others():
            return
        if (time.monotonic() - self._idle_since) * 1000 < self.idle_ms:
            return
        # never imports PyTorch on the GUI thread: until the app's own job has imported it, nothing was scheduled
        runtime = sys.modules.get("medseg.model.cpu_runtime")
        pending = runtime is not None and bool(runtime.scheduled())
        starter = not self._starter_checked and "torch" in sys.modules and not _pinned()
        if not (pending or starter):
            return
        self._starter_checked = self._starter_checked or starter
        # computes=False: the measurement takes its own lease of the thread budget (measure_model), with the whole
        # budget while the app is idle: the thread count a Segment then runs with, which the record is keyed by
        self.job = Job("idle engine measurement", functools.partial(_measure, starter=starter), self,
                       background=False, computes=False, title=TITLE, registry=self.registry)
        self.job.finished_ok.connect(self._on_done)
        self.job.finished_error.connect(lambda _error: self._on_done(0))
        self.job.start()

    def _on_done(self, count: int) -> None:
        self.job = None
        self._idle_since = time.monotonic()
        self.measured.emit(int(count))  # also after a cancel: what it stored before is shown

    def stop(self) -> None:
        """On closing the window: no new measurement, the running one cancelled and waited for."""
        self._timer.stop()
        self._unsubscribe()
        if self.job is not None:
            self.job.wait_stopped()
            self.job = None


__all__ = ["IDLE_MS", "IdleMeasurer", "TITLE"]
