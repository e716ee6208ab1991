"""Grow from seeds off the GUI thread: each seed stroke asks for a new preview; one worker thread computes it.

The worker is not niced: it holds the GIL between kernel calls, and a low-priority thread holding
the GIL on a busy machine makes the GUI thread wait for it.

A stroke asks for a preview when it ends (mouse release); strokes painted while the worker runs
are queued in the session and taken by its next pass
(the worker loops while strokes are pending), so a fast painter never waits and never piles
up work. The compiled kernel releases the GIL while it grows, so the window keeps drawing.
The finished preview reaches the views through a queued signal (a ``@Slot`` of this
GUI-thread object: PySide6 runs plain callables connected to a signal in the emitting
thread). Apply waits for the running pass (so it writes what the preview shows, including
the last stroke); Cancel drops the result.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Slot

from medseg.edit.effects.seeds import GrowFromSeeds
from medseg.edit.grow_session import GrowSession
from medseg.edit.interaction import ToolController
from medseg.gui.editing.session_runner import SessionRunner

log = logging.getLogger(__name__)


class GrowRunner(SessionRunner):
    thread_name = "medseg-grow"

    def __init__(self, tools: ToolController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        effect = tools.effects["seeds"]  # the grow-from-seeds tool's object
        assert isinstance(effect, GrowFromSeeds), "the controller builds GrowFromSeeds under 'seeds'"
        self.effect = effect
        self.effect.set_runner(self.request)

    def _compute(self, session: GrowSession) -> None:
        from medseg import threads

        # one core (the kernel is single-threaded), taken from a segmentation running meanwhile
        with threads.job("grow from seeds", most=1):
            super()._compute(session)

    @Slot(object, object)
    def _on_finished(self, session: GrowSession, error) -> None:
        tools = self.tools
        if error is not None:
            log.warning("grow from seeds failed: %s", error)
            self.failed.emit(error)
            return
        if tools.grow is not session:
            return  # applied or cancelled meanwhile
        if session.pending():
            self.request(session)  # a stroke arrived after the worker's last look
        preview = session.preview
        self.effect.preview_ready(preview.box if preview is not None else None)
        self.preview_shown.emit()
