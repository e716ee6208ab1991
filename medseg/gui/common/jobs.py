"""Run any long job in a QThread without ever blocking the GUI thread.

A job is a function taking ``progress=`` and ``cancel=`` keywords (medseg/progress.py).
It may return its result directly (a load, a segmentation), or be a generator: then every
value it yields reaches the GUI through the one :attr:`Job.yielded` signal (a yielded
:class:`~medseg.progress.Progress` also drives :attr:`Job.progressed`), cancellation and
pause are checked between yields, and the result is the generator's return value.

PySide6 runs plain Python callables connected to a worker's signal *in the worker
thread*; only ``@Slot`` methods of a QObject living in the GUI thread are queued to it
(stack-notes §2.3). So the worker's signals connect only to the slots of :class:`Job`,
which lives in the GUI thread, stops the thread (quit + wait) when the work is over and
re-emits GUI-thread signals. Tests wait on those, never on the worker's own signals.

Every job registers in the Qt-free :mod:`medseg.job_registry` while it runs; the status
bar shows that list.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import logging
import threading
import time
from typing import Any, Callable

from PySide6.QtCore import QObject, QThread, QTimer, Signal, Slot

from medseg.errors import Cancelled
from medseg.job_registry import RUNNING_JOBS, JobRegistry, RunningJob
from medseg.progress import CancelToken, Progress

log = logging.getLogger(__name__)

# Load jobs may pause Python's cyclic garbage collector while they run: decoding creates
# many objects, and a full collection (tens of ms, holding the GIL) in the middle of a
# load is what stalled the GUI in our measurements. Opt-in (``pause_gc=True``): a training
# job runs for hours and must not run without the collector. Reference counting still
# frees almost everything at once; the collector resumes when the last such job ends.
_gc_pausing_jobs = 0


def _pause_gc() -> None:
    global _gc_pausing_jobs
    _gc_pausing_jobs += 1
    gc.disable()


def _resume_gc() -> None:
    global _gc_pausing_jobs
    _gc_pausing_jobs = max(0, _gc_pausing_jobs - 1)
    if _gc_pausing_jobs == 0:
        gc.enable()


# Long background jobs (training, segmenting; ``background=True``) instead freeze the heap.
# gc.freeze() moves every object alive now into the collector's permanent generation, so a full
# collection scans only what the job creates afterwards. Measured with a plain training thread beside
# a 5 ms GUI timer: each full collection scanned the libraries' million objects (torch,
# SimpleITK, Qt bindings) and held the GIL for 115-245 ms, and those were the event-loop
# gaps; with the heap frozen they fell to tens of ms. The job freezes again after each event or
# progress report of its first FREEZE_WINDOW_S (its lazy imports and set-up happen then), and the heap is
# unfrozen when the last such job ends, so cyclic garbage frozen with it is collected then.
# These jobs run at the user's priority: they are what the user is waiting for. A nice value of
# 10 (as before issue #40) made Segment in the window yield to every other program on the machine
# (45-82 s against the command line's 11.6 s on a 2-core machine with other work). The window
# stays responsive without it: the GUI thread sleeps between events, so the scheduler serves it
# first when it wakes, and the job's compute threads run without the GIL.
FREEZE_WINDOW_S = 30.0
_heap_freezing_jobs = 0


def _freeze_heap() -> None:
    global _heap_freezing_jobs
    _heap_freezing_jobs += 1
    gc.freeze()


def _unfreeze_heap() -> None:
    global _heap_freezing_jobs
    _heap_freezing_jobs = max(0, _heap_freezing_jobs - 1)
    if _heap_freezing_jobs == 0:
        gc.unfreeze()


# A job function takes progress= and cancel= keywords and returns a result or a generator.
JobFunction = Callable[..., Any]


# What the status bar says while a job runs: words for the user, not the job's internal name.
JOB_TITLES = {
    "load": "Opening the image", "load-series": "Opening the series", "label-map": "Opening the label map",
    "segment": "Segmenting", "scan": "Looking for series", "demo": "Preparing the demo study",
    "save-segmentation": "Saving the segmentation", "open-segmentation": "Opening the segmentation",
    "pacs-echo": "Testing the PACS connection", "pacs-query": "Searching the PACS",
    "pacs-series": "Listing the study's series", "pacs-retrieve": "Retrieving the series from the PACS",
    "pacs-send": "Sending to the PACS", "export": "Exporting the model", "evaluate": "Comparing the models",
    "open comparison": "Opening the comparison case", "training": "Training", "save plots": "Saving the plots",
    "inspect cases": "Checking the training cases", "convert DICOM SEG case": "Adding the DICOM + SEG case",
}


def job_title(name: str) -> str:
    return JOB_TITLES.get(name) or name.replace("-", " ").replace("_", " ").capitalize()


class _Worker(QObject):
    """Lives in the worker thread; only emits."""

    progressed = Signal(float, str)
    yielded = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, function: JobFunction, cancel: CancelToken, running: threading.Event,
                 background: bool = False, computes: str | None = None) -> None:
        super().__init__()
        self._computes = computes  # the job's name on medseg's thread budget, None for a job that waits on I/O
        self._function: JobFunction | None = function
        self._cancel = cancel
        self._running = running  # cleared while paused
        self.held = threading.Event()  # set while the generator is held at a yield by a pause
        self._background = background
        self._started_at = 0.0

    def _report(self, progress: Progress) -> None:
        self.progressed.emit(progress.fraction, progress.text)
        self._freeze_if_young()

    def _freeze_if_young(self) -> None:
        if self._background and time.monotonic() - self._started_at < FREEZE_WINDOW_S:
            gc.freeze()

    def _between_yields(self) -> None:
        self._cancel.raise_if_cancelled()
        if self._running.is_set():
            return
        from medseg import threads

        with threads.paused():  # a held job computes nothing: its share of the cores goes to the other jobs
            self.held.set()
            try:
                while not self._running.wait(0.1):
                    self._cancel.raise_if_cancelled()
            finally:
                self.held.clear()

    def _drain(self, generator) -> Any:
        try:
            while True:
                self._between_yields()
                try:
                    item = next(generator)
                except StopIteration as stop:
                    return stop.value
                if isinstance(item, Progress):
                    self.progressed.emit(item.fraction, item.text)
                self.yielded.emit(item)
                self._freeze_if_young()
        finally:
            generator.close()  # a cancelled generator runs its finally blocks now, in this thread

    @Slot()
    def run(self) -> None:
        self._started_at = time.monotonic()
        try:
            self._cancel.raise_if_cancelled()  # cancelled before its thread started
            function = self._function
            assert function is not None, "a worker runs its job once"
            with _lease(self._computes):
                result = function(progress=self._report, cancel=self._cancel)
                if inspect.isgenerator(result):
                    result = self._drain(result)
        except BaseException as error:  # noqa: BLE001 - every failure must reach the GUI
            self.failed.emit(error)
        else:
            self.succeeded.emit(result)
        finally:
            # The worker outlives its job (Qt deletes it later; the registry may hold it): the
            # function's closure must not. A load's closure held its series, its scan and the
            # volume's array, so a closed 512 x 512 x 1000 study kept 500 MB until the next load.
            self._function = None


def _lease(name: str | None):
    """The job's share of medseg's CPU threads while it runs (medseg.threads): concurrent jobs split them."""
    if name is None:
        return contextlib.nullcontext()
    from medseg import threads

    return threads.job(name)


class Job(QObject):
    """One background job. Signals are emitted in the GUI thread.

    ``pause_gc``: pause the cyclic garbage collector while this job runs (load jobs).
    ``background``: a long job (training, segmenting): freeze the heap at start and during the
    job's first seconds.
    ``computes``: the job computes (default: a background job does): it takes a lease on medseg's
    thread budget while it runs, so two segmentations, a segmentation and the 3D mesher, or a load
    beside a segmentation split the cores between them instead of each taking them all. Jobs that
    wait on the network or the disk (PACS, saving) leave the running ones their share.
    ``registry``: where the job is listed while it runs (the application's by default).
    """

    progressed = Signal(float, str)
    yielded = Signal(object)  # each value a generator job yields, in order (not `event`: that is QObject.event)
    finished_ok = Signal(object)  # the function's result (a generator's return value)
    finished_error = Signal(object)  # the exception (MedsegError, Cancelled, or a bug)

    def __init__(self, name: str, function: JobFunction, parent: QObject | None = None, *,
                 pause_gc: bool = False, background: bool = False, registry: JobRegistry | None = None,
                 cancellable: bool = True, title: str = "", computes: bool | None = None) -> None:
        super().__init__(parent)
        self.name = name  # for the log and the thread's name
        self.title = title or job_title(name)  # what the user reads while it runs
        self.cancel_token = CancelToken()
        self.running = False
        self.pause_gc = pause_gc
        self.background = background
        self.cancellable = cancellable
        self.registry = registry if registry is not None else RUNNING_JOBS
        self.entry: RunningJob | None = None
        self._resume_event = threading.Event()
        self._resume_event.set()
        self._worker_thread = QThread()
        self._worker_thread.setObjectName(f"medseg-{name}")
        computes = background if computes is None else computes
        self._worker = _Worker(function, self.cancel_token, self._resume_event, background,
                               name if computes else None)
        self._worker.moveToThread(self._worker_thread)
        self._worker_thread.started.connect(self._worker.run)
        self._worker.progressed.connect(self._on_progress)
        self._worker.yielded.connect(self._on_event)
        self._worker.succeeded.connect(self._on_succeeded)
        self._worker.failed.connect(self._on_failed)

    def start(self, delay_ms: int = 0) -> None:
        """Start now, or list the job now and start its thread after ``delay_ms`` (the GUI paints first)."""
        self.running = True
        if self.pause_gc:
            _pause_gc()
        if self.background:
            _freeze_heap()
        self.entry = self.registry.add(self.title, self.cancel if self.cancellable else None)
        if self.paused:
            self.entry.update(paused=True, text="paused")
        log.info("job %s started", self.name)
        if delay_ms:
            QTimer.singleShot(delay_ms, self._worker_thread.start)
        else:
            self._worker_thread.start()

    def cancel(self) -> None:
        self.cancel_token.cancel()
        self._resume_event.set()

    @property
    def paused(self) -> bool:
        return not self._resume_event.is_set()

    @property
    def held(self) -> bool:
        """True once a paused generator job has stopped at a yield (nothing of it runs until resume)."""
        return self._worker.held.is_set()

    def pause(self) -> None:
        """Hold a generator job at its next yield (a plain function runs on)."""
        self._resume_event.clear()
        if self.entry is not None:
            self.entry.update(paused=True, text="paused")

    def resume(self) -> None:
        self._resume_event.set()
        if self.entry is not None:
            self.entry.update(paused=False)

    def _stop_thread(self) -> None:
        if self.running and self.pause_gc:
            _resume_gc()
        if self.running and self.background:
            _unfreeze_heap()
        self.running = False
        if self.entry is not None:
            self.entry.finish()
            self.entry = None
        self._worker_thread.quit()
        self._worker_thread.wait()

    @Slot(float, str)
    def _on_progress(self, fraction: float, text: str) -> None:
        if self.entry is not None:  # a report made before the hold arrives late: the status still says "paused"
            self.entry.update(fraction, None if self.paused else text)
        self.progressed.emit(fraction, text)

    @Slot(object)
    def _on_event(self, item: Any) -> None:
        self.yielded.emit(item)

    @Slot(object)
    def _on_succeeded(self, result: Any) -> None:
        self._stop_thread()
        log.info("job %s finished", self.name)
        self.finished_ok.emit(result)

    @Slot(object)
    def _on_failed(self, error: BaseException) -> None:
        self._stop_thread()
        log.info("job %s %s", self.name, "cancelled" if isinstance(error, Cancelled) else f"failed: {type(error).__name__}")
        self.finished_error.emit(error)

    def wait_stopped(self) -> None:
        """Cancel and block until the thread is gone (used when closing the window)."""
        if self.running:
            self.cancel()
            self._worker_thread.quit()
            self._worker_thread.wait()
            self._stop_thread()
