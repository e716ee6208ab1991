"""Interactive AI off the GUI thread: each prompt asks for a new object; one worker thread runs the model.

As the grow-from-seeds runner: the worker loops while prompts are queued in the session, and the finished
preview reaches the views through a queued signal. A prompt added while the model runs cancels the running
one (the session does it: only the newest counts), so the window never waits and work never piles up.
One worker at a time, for every session of the window: the model session behind them is one object, never
used from two threads; a session started while an older worker still winds down is run when it ends.
"""

from __future__ import annotations

import logging
import threading

from PySide6.QtCore import QObject, Signal, Slot

from medseg.edit.interaction import ToolController
from medseg.edit.prompt_session import PromptSession

log = logging.getLogger(__name__)


class PromptRunner(QObject):
    finished = Signal(object, object)  # (session, error or None): emitted from the worker, queued to the GUI thread
    started = Signal()  # the model started on a prompt (the panel says so)
    preview_shown = Signal()  # a new object is on screen (tests wait on it)
    failed = Signal(object)

    def __init__(self, tools: ToolController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self.finished.connect(self._on_finished)
        tools.set_prompt_runner(self.request)

    def busy(self) -> bool:
        with self._lock:
            return self._thread is not None

    def request(self, session: PromptSession) -> None:
        with self._lock:
            if self._thread is not None:
                return  # the running worker takes the new prompt when it loops, or _on_finished starts one
            self._thread = threading.Thread(target=self._work, args=(session,), name="medseg-prompt", daemon=True)
            self._thread.start()
        self.started.emit()

    def _work(self, session: PromptSession) -> None:
        error = None
        try:
            while session.pending():
                session.compute()
        except Exception as exc:  # noqa: BLE001 - shown to the user, never lost
            error = exc
        with self._lock:
            self._thread = None
        self.finished.emit(session, error)

    @Slot(object, object)
    def _on_finished(self, session: PromptSession, error) -> None:
        tools = self.tools
        current = tools.prompt
        if current is not None and current.pending():
            self.request(current)  # a prompt that came while the worker wound down (or of a newer session)
        if error is not None:
            log.warning("interactive prompt failed: %s", error)
            if tools.prompt is session:
                tools.cancel_prompt()
            self.failed.emit(error)
            return
        if current is not session:
            return  # applied or cancelled meanwhile
        preview = session.preview
        tools.prompt_ready(preview.box if preview is not None else None)
        self.preview_shown.emit()

    def wait(self, timeout: float = 600.0) -> None:
        """Until the running worker ends (Apply writes what the last prompt asked for)."""
        with self._lock:
            thread = self._thread
        if thread is not None:
            thread.join(timeout)
