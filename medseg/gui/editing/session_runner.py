"""One worker thread for an editing session's previews (grow from seeds, Interactive AI).

A request while the worker runs starts nothing: the worker loops while the session has work pending,
so a fast user never waits and work never piles up. The finished result reaches the GUI thread through
a queued signal: subclasses handle it in a ``@Slot`` ``_on_finished`` (PySide6 runs plain callables
connected to a signal in the emitting thread). ``wait`` lets Apply write what the last request asked for.
"""

from __future__ import annotations

import threading
from typing import Any

from PySide6.QtCore import QObject, Signal


class SessionRunner(QObject):
    finished = Signal(object, object)  # (session, error or None): emitted from the worker, queued to the GUI thread
    preview_shown = Signal()  # a new preview is on screen (tests wait on it)
    failed = Signal(object)
    thread_name = "medseg-session"
    wait_timeout = 120.0

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.finished.connect(self._on_finished)

    def busy(self) -> bool:
        with self._lock:
            return self._thread is not None

    def request(self, session: Any) -> bool:
        """Start a worker on ``session``; False when one runs already (it takes the new work when it loops)."""
        with self._lock:
            if self._thread is not None:
                return False
            self._thread = threading.Thread(target=self._work, args=(session,), name=self.thread_name, daemon=True)
            self._thread.start()
        return True

    def _compute(self, session: Any) -> None:
        while session.pending():
            session.compute()

    def _work(self, session: Any) -> None:
        error = None
        try:
            self._compute(session)
        except Exception as exc:  # noqa: BLE001 - shown to the user, never lost
            error = exc
        with self._lock:
            self._thread = None
        self.finished.emit(session, error)

    def _on_finished(self, session: Any, error: Exception | None) -> None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> None:
        """Until the running worker ends."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(self.wait_timeout if timeout is None else timeout)
