"""A finished run's plots as PNGs in its run folder: a plot rendered per event-loop turn (the window stays
responsive), the PNGs encoded and written in a worker."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

from PySide6.QtCore import QObject, QTimer, Signal
from PySide6.QtGui import QImage

from medseg.gui.common.jobs import Job
from medseg.gui.train.plots import LiveCurves, write_pngs


class RunPlots(QObject):
    saved = Signal(str)  # the run folder, once its plot PNGs are written
    not_saved = Signal(str)  # why they were not

    def __init__(self, curves: LiveCurves, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.curves = curves
        self._job: Job | None = None  # writing the PNGs
        self._steps: Iterator[tuple[str, QImage] | None] | None = None  # rendering them, a step per event-loop turn
        self._folder: Path | None = None
        self._images: list = []

    def save(self, folder: Path) -> None:
        self._folder, self._steps, self._images = folder, self.curves.render_steps(), []
        self._next_step()

    def _next_step(self) -> None:
        if self._steps is None:  # finished, or done at once by finish_now()
            return
        item = next(self._steps, False)
        if item is not False:
            if item is not None:
                self._images.append(item)
            QTimer.singleShot(0, self, self._next_step)
            return
        folder, images, self._steps = self._folder, self._images, None
        assert folder is not None, "save() set it with the steps"
        self._job = Job("save plots", lambda progress=None, cancel=None: write_pngs(folder, images), self,
                        cancellable=False)
        self._job.finished_ok.connect(lambda _written: self.saved.emit(str(folder)))
        self._job.finished_error.connect(lambda error: self.not_saved.emit(f"the plots were not saved: {error}"))
        self._job.start()

    def finish_now(self) -> None:
        """On closing: the remaining steps at once, in this thread (the PNGs are small)."""
        if self._steps is not None:
            steps, self._steps = self._steps, None
            assert self._folder is not None, "save() set it with the steps"
            write_pngs(self._folder, [*self._images, *(item for item in steps if item is not None)])
        if self._job is not None and self._job.running:
            self._job.wait_stopped()
