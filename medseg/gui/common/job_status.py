"""The status-bar widget for every running job: text, progress bar and one Cancel button.

It observes :data:`medseg.job_registry.RUNNING_JOBS` (or another registry): shown while any
job runs, it follows the newest job and says how many others run; Cancel cancels the
newest cancellable one. The tooltip lists them all.
"""

from __future__ import annotations

import time

import shiboken6
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QHBoxLayout, QLabel, QProgressBar, QPushButton, QWidget

from medseg.job_registry import RUNNING_JOBS, JobRegistry

REFRESH_INTERVAL_S = 0.1  # a visible QProgressBar repaints synchronously: at most ~10 times a second


class JobStatusWidget(QWidget):
    def __init__(self, registry: JobRegistry | None = None, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.registry = registry if registry is not None else RUNNING_JOBS
        self.progress_text = QLabel(self)
        self.progress_bar = QProgressBar(self)
        self.progress_bar.setRange(0, 1000)
        self.progress_bar.setMaximumWidth(220)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.clicked.connect(self.registry.cancel_newest)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        for widget in (self.progress_text, self.progress_bar, self.cancel_button):
            layout.addWidget(widget)
            widget.hide()
        self._last_refresh = 0.0
        self._pending = QTimer(self)
        self._pending.setSingleShot(True)
        self._pending.timeout.connect(self.refresh)
        self._unsubscribe = self.registry.subscribe(self._on_registry_changed)
        self.destroyed.connect(self._unsubscribe)

    def detach(self) -> None:
        self._unsubscribe()

    def _on_registry_changed(self) -> None:
        if not shiboken6.isValid(self):
            self._unsubscribe()
            return
        jobs = self.registry.jobs()
        started_or_ended = bool(jobs) != self.cancel_button.isVisible()
        now = time.monotonic()
        if started_or_ended or now - self._last_refresh >= REFRESH_INTERVAL_S:
            self.refresh()
        elif not self._pending.isActive():
            self._pending.start(int(REFRESH_INTERVAL_S * 1000))

    def refresh(self) -> None:
        self._last_refresh = time.monotonic()
        jobs = self.registry.jobs()
        busy = bool(jobs)
        if busy and not self.progress_bar.isVisible():
            self.progress_bar.setValue(0)  # while hidden: a visible QProgressBar repaints synchronously
        for widget in (self.progress_text, self.progress_bar, self.cancel_button):
            widget.setVisible(busy)
        if not busy:
            self.progress_text.setText("")
            return
        newest = jobs[-1]
        others = f"  (+{len(jobs) - 1} more)" if len(jobs) > 1 else ""
        self.progress_text.setText(f"{newest.text or newest.name}{others}")
        # A job that has not said how far it is shows a moving "busy" bar, never a stuck 0 %.
        maximum = 1000 if newest.reported else 0
        if self.progress_bar.maximum() != maximum:
            self.progress_bar.setRange(0, maximum)
        if newest.reported:
            self.progress_bar.setValue(int(newest.fraction * 1000))
        self.cancel_button.setEnabled(self.registry.newest_cancellable() is not None)
        self.setToolTip("\n".join(f"{job.name}: " + (f"{job.fraction:.0%} " if job.reported else "") + job.text
                                  for job in jobs))
