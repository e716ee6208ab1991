"""The app measures the CPU engines of the models it was asked to while it is idle (issue #51).

A Segment or a plan that finds no measurement of its model on this machine (never measured, or the
machine changed: another CPU, memory or thread count) runs PyTorch at once and schedules one
(medseg.model.cpu_runtime.schedule). This object watches the one list of running jobs
(medseg.job_registry): once nothing has run for :data:`IDLE_MS`, it measures the scheduled models
in one job of the app's job runner (medseg.gui.common.jobs), on a small tile (seconds per engine:
medseg.model.engine_measurement). Any other job starting (the user opened, segmented, saved ...)
cancels it at once; it stops between engines and what is left stays scheduled for the next idle
moment. ``measured`` is emitted when a measurement was stored (the Segment panel shows it in its plan).
"""

from __future__ import annotations

import time

from PySide6.QtCore import QObject, QTimer, Signal

from medseg.gui.common.jobs import Job
from medseg.job_registry import RUNNING_JOBS, JobRegistry

IDLE_MS = 3000  # how long no job has run before a measurement starts
POLL_MS = 1000
TITLE = "measuring the CPU engines (while idle; any work stops it)"


def _measure(progress=None, cancel=None) -> int:
    from medseg.model.engine_measurement import measure_scheduled

    return measure_scheduled(progress, cancel)


class IdleMeasurer(QObject):
    measured = Signal(int)  # a measurement job ended (how many models it measured)

    def __init__(self, parent: QObject | None = None, registry: JobRegistry | None = None,
                 idle_ms: int = IDLE_MS) -> None:
        super().__init__(parent)
        self.registry = registry if registry is not None else RUNNING_JOBS
        self.idle_ms = idle_ms
        self.job: Job | None = None
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
        from medseg.model.cpu_runtime import scheduled

        if not scheduled():
            return
        self.job = Job("idle engine measurement", _measure, self, background=False, computes=True, title=TITLE,
                       registry=self.registry)
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
