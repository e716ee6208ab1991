"""Interactive AI off the GUI thread: each prompt asks for a new object; one worker thread runs the model.

As the grow-from-seeds runner: the worker loops while prompts are queued in the session, and the finished
preview reaches the views through a queued signal. A prompt added while the model runs cancels the running
one (the session does it: only the newest counts), so the window never waits and work never piles up.
One worker at a time, for every session of the window: the model session behind them is one object, never
used from two threads; a session started while an older worker still winds down is run when it ends. What the
model is doing (loading, each network pass as it starts and ends) reaches the panel through ``progress``.
"""

from __future__ import annotations

import logging

from PySide6.QtCore import QObject, Signal, Slot

from medseg.edit.effects.prompts import Prompts
from medseg.edit.interaction import ToolController
from medseg.edit.prompt_session import PromptSession
from medseg.gui.editing.session_runner import SessionRunner

log = logging.getLogger(__name__)


def prompts_effect(tools: ToolController) -> Prompts:
    """The Interactive AI tool's object (the controller keeps its effects by name, typed as the base)."""
    effect = tools.effects["prompts"]
    assert isinstance(effect, Prompts), "the controller builds the Prompts effect under 'prompts'"
    return effect


class PromptRunner(SessionRunner):
    started = Signal()  # the model started on a prompt (the panel says so)
    progress = Signal(object)  # medseg.progress.Progress: emitted from the worker, queued to the GUI thread
    thread_name = "medseg-prompt"
    wait_timeout = 600.0

    def __init__(self, tools: ToolController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.tools = tools
        self.effect = prompts_effect(tools)
        self.effect.set_runner(self.request)

    def request(self, session: PromptSession) -> bool:
        # a running worker takes the new prompt when it loops, or _on_finished starts one
        session.progress = self.progress.emit
        started = super().request(session)
        if started:
            self.started.emit()
        return started

    @Slot(object, object)
    def _on_finished(self, session: PromptSession, error) -> None:
        tools = self.tools
        current = tools.prompt
        if current is not None and current.pending():
            self.request(current)  # a prompt that came while the worker wound down (or of a newer session)
        if error is not None:
            log.warning("interactive prompt failed: %s", error)
            if tools.prompt is session:
                self.effect.cancel()
            self.failed.emit(error)
            return
        if current is not session:
            return  # applied or cancelled meanwhile
        preview = session.preview
        self.effect.preview_ready(preview.box if preview is not None else None)
        self.preview_shown.emit()
