"""The one list of running jobs (Qt-free): what runs, how far it is, how to cancel it.

Every background job (a load, a segmentation, a training run, a torchrun subprocess)
registers here while it runs; the status bar shows this list and its Cancel button
cancels through it, so "busy" is known in one place. Observers are plain callables
called on every change; the GUI wires one widget to it. Changes come from the thread
that owns the jobs (the GUI thread), so no locking is needed for the observers, but the
list itself is guarded so that a worker may read it.
"""

from __future__ import annotations

import itertools
import threading
from dataclasses import dataclass, field
from typing import Callable

Observer = Callable[[], None]


@dataclass
class RunningJob:
    """One entry: updated by its owner, read by the status bar."""

    id: int
    name: str
    cancel: Callable[[], None] | None  # None: this job cannot be cancelled
    fraction: float = 0.0
    text: str = ""
    paused: bool = False
    reported: bool = False  # has the job said how far it is? (until then the bar shows "busy", not 0 %)
    registry: "JobRegistry | None" = field(default=None, repr=False, compare=False)

    @property
    def cancellable(self) -> bool:
        return self.cancel is not None

    def update(self, fraction: float | None = None, text: str | None = None, paused: bool | None = None) -> None:
        if fraction is not None:
            self.fraction = min(1.0, max(0.0, float(fraction)))
            self.reported = True
        if text is not None:
            self.text = text
        if paused is not None:
            self.paused = paused
        if self.registry is not None:
            self.registry.changed()

    def finish(self) -> None:
        if self.registry is not None:
            self.registry.remove(self)


class JobRegistry:
    """Running jobs in the order they started."""

    def __init__(self) -> None:
        self._jobs: list[RunningJob] = []
        self._observers: list[Observer] = []
        self._lock = threading.Lock()
        self._ids = itertools.count(1)

    def add(self, name: str, cancel: Callable[[], None] | None = None) -> RunningJob:
        job = RunningJob(next(self._ids), name, cancel, registry=self)
        with self._lock:
            self._jobs.append(job)
        self.changed()
        return job

    def remove(self, job: RunningJob) -> None:
        with self._lock:
            if job not in self._jobs:
                return
            self._jobs.remove(job)
        self.changed()

    def jobs(self) -> list[RunningJob]:
        with self._lock:
            return list(self._jobs)

    @property
    def busy(self) -> bool:
        return bool(self.jobs())

    def newest_cancellable(self) -> RunningJob | None:
        for job in reversed(self.jobs()):
            if job.cancellable:
                return job
        return None

    def cancel_newest(self) -> bool:
        job = self.newest_cancellable()
        if job is None:
            return False
        job.cancel()  # type: ignore[misc]
        return True

    def subscribe(self, observer: Observer) -> Callable[[], None]:
        """Call ``observer`` on every change; returns the function that unsubscribes it."""
        self._observers.append(observer)
        return lambda: self._observers.remove(observer) if observer in self._observers else None

    def changed(self) -> None:
        for observer in list(self._observers):
            observer()


# The application's registry. Tests may make their own.
RUNNING_JOBS = JobRegistry()
