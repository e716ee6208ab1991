"""Run a long job (load, scan, ...) in a QThread without ever blocking the GUI thread.

PySide6 6.12 runs plain Python callables connected to a worker's signal *in the worker
thread*; only ``@Slot`` methods of a QObject living in the GUI thread are queued to it
(stack-notes §2.3). So the worker's signals connect only to the slots of :class:`Job`,
which lives in the GUI thread, stops the thread (quit + wait) when the work is over and
re-emits GUI-thread signals. Tests wait on those, never on the worker's own signals.
"""

from __future__ import annotations

import gc
import logging
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, Signal, Slot

from medseg.progress import CancelToken, Progress

log = logging.getLogger(__name__)

# While any job runs, Python's cyclic garbage collector is paused: decoding creates
# many objects, and a full collection (tens of ms, holding the GIL) in the middle of a
# load is what stalled the GUI in our measurements. Reference counting still frees
# almost everything at once; the collector resumes when the last job ends.
_running_jobs = 0


def _pause_gc() -> None:
    global _running_jobs
    _running_jobs += 1
    gc.disable()


def _resume_gc() -> None:
    global _running_jobs
    _running_jobs = max(0, _running_jobs - 1)
    if _running_jobs == 0:
        gc.enable()

# A job function takes progress= and cancel= keywords (medseg/progress.py convention).
JobFunction = Callable[..., Any]


class _Worker(QObject):
    """Lives in the worker thread; only emits."""

    progressed = Signal(float, str)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, function: JobFunction, cancel: CancelToken) -> None:
        super().__init__()
        self._function = function
        self._cancel = cancel

    def _report(self, progress: Progress) -> None:
        self.progressed.emit(progress.fraction, progress.text)

    @Slot()
    def run(self) -> None:
        try:
            result = self._function(progress=self._report, cancel=self._cancel)
        except BaseException as error:  # noqa: BLE001 - every failure must reach the GUI
            self.failed.emit(error)
        else:
            self.succeeded.emit(result)


class Job(QObject):
    """One background job. Signals are emitted in the GUI thread."""

    progressed = Signal(float, str)
    finished_ok = Signal(object)  # the function's result
    finished_error = Signal(object)  # the exception (MedsegError, Cancelled, or a bug)

    def __init__(self, name: str, function: JobFunction, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.name = name
        self.cancel_token = CancelToken()
        self.running = False
        self._worker_thread = QThread()
        self._worker_thread.setObjectName(f"medseg-{name}")
        self._worker = _Worker(function, self.cancel_token)
        self._worker.moveToThread(self._worker_thread)
        self._worker_thread.started.connect(self._worker.run)
        self._worker.progressed.connect(self._on_progress)
        self._worker.succeeded.connect(self._on_succeeded)
        self._worker.failed.connect(self._on_failed)

    def start(self) -> None:
        self.running = True
        _pause_gc()
        log.info("job %s started", self.name)
        self._worker_thread.start()

    def cancel(self) -> None:
        self.cancel_token.cancel()

    def _stop_thread(self) -> None:
        if self.running:
            _resume_gc()
        self.running = False
        self._worker_thread.quit()
        self._worker_thread.wait()

    @Slot(float, str)
    def _on_progress(self, fraction: float, text: str) -> None:
        self.progressed.emit(fraction, text)

    @Slot(object)
    def _on_succeeded(self, result: Any) -> None:
        self._stop_thread()
        log.info("job %s finished", self.name)
        self.finished_ok.emit(result)

    @Slot(object)
    def _on_failed(self, error: BaseException) -> None:
        self._stop_thread()
        log.info("job %s failed: %s", self.name, type(error).__name__)
        self.finished_error.emit(error)

    def wait_stopped(self) -> None:
        """Cancel and block until the thread is gone (used when closing the window)."""
        if self.running:
            self.cancel()
            self._worker_thread.quit()
            self._worker_thread.wait()
            self.running = False
            _resume_gc()
