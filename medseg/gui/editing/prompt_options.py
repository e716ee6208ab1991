"""The Edit panel's Interactive AI row: the prompt kind, Apply / Cancel, and the new-object key.

With the Interactive AI tool (key I) a click in any view is a point (shift-click: a negative one), a drag a
box, a scribble or a lasso, by the kind chosen here; the model refines the object in a worker and the
object shows as a preview. *Apply* writes it into the active label (one undo step; never over a locked
label); *Cancel* drops it; *New object* (key A) applies it and starts the next object. *Small first patch*
(off by default) runs a small object's prompt on half the model's patch first, the exact patch when the answer
reaches that half patch's faces: faster, but not nnInteractive's exact result (docs/interactive.md).

What a prompt costs on this computer is said before it runs: under the prompt kind, for the kind chosen
(from the model's measured runtime choice, then from the last pass the model ran), and in the status line
as a prompt is drawn; while the model runs the status line follows it pass by pass ("prompt 2 (box), pass 3
of 5: refining at full resolution, about 40 s left").
"""

from __future__ import annotations

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QLabel, QPushButton, QWidget

from medseg.edit.interaction import ToolController
from medseg.edit.prompt_session import Prompt
from medseg.gui.common.bind import bind, follow_setting
from medseg.gui.editing.prompt_runner import PromptRunner, prompts_effect
from medseg.model.interactive.cost import duration_text, largest_single_pass_extent, short_text
from medseg.settings import SETTINGS
from medseg.workflows import interactive

NEW_OBJECT_KEY = "A"


class PromptOptions(QWidget):
    done = Signal()  # Apply, Cancel or New object finished: the keys go back to the view

    def __init__(self, controller: ToolController, runner: PromptRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller, self.runner = controller, runner
        self.kind = bind(QComboBox(self), controller.prompt_kind)
        self.kind.setObjectName("prompt_kind")
        self.kind.setToolTip("What a drag draws with the Interactive AI tool (a click is always a point; "
                             "shift makes any prompt negative)")
        self.apply_button = QPushButton("Apply", self)
        self.apply_button.setObjectName("prompt_apply")
        self.apply_button.setToolTip("Write the object into the active label (one undo step)")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setObjectName("prompt_cancel")
        self.cancel_button.setToolTip("Drop the object and its prompts; the segmentation stays as it was")
        self.new_object_action = QAction("New object", self)
        self.new_object_action.setObjectName("prompt_new_object")
        self.new_object_action.setShortcut(QKeySequence(NEW_OBJECT_KEY))
        self.new_object_action.setToolTip(f"New object ({NEW_OBJECT_KEY}): apply this object and start the next one")
        self.new_object_action.triggered.connect(self.new_object)
        self.new_object_button = QPushButton("New object", self)
        self.new_object_button.setObjectName("prompt_new_object")
        self.new_object_button.setToolTip(self.new_object_action.toolTip())
        self.new_object_button.clicked.connect(self.new_object)
        self.small_first = QCheckBox("Small first patch", self)
        self.small_first.setObjectName("prompt_small_first")
        self.small_first.setToolTip("Faster for small objects, not exact: a prompt runs on half the model's patch "
                                    "first, and on the whole patch when the object reaches the half patch's faces")
        self.small_first.setChecked(SETTINGS.interactive_mode == "small-first")
        self.small_first.toggled.connect(self._set_small_first)
        follow_setting(self.small_first, "interactive_mode", lambda mode: self.small_first.setChecked(mode == "small-first"))
        self.status = QLabel(self)
        self.status.setObjectName("prompt_status")
        self.status.setWordWrap(True)
        self.cost = QLabel(self)  # what a prompt of the kind chosen costs here, before one is drawn
        self.cost.setObjectName("prompt_cost")
        self.cost.setWordWrap(True)
        self._line = ""  # what the model is doing now: the cost of the prompt just drawn, then its passes
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.cancel)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(QLabel("AI prompt", self), 0, 0)
        grid.addWidget(self.kind, 0, 1)
        grid.addWidget(self.apply_button, 0, 2)
        grid.addWidget(self.cancel_button, 0, 3)
        grid.addWidget(self.new_object_button, 1, 0)
        grid.addWidget(self.small_first, 1, 1, 1, 3)
        grid.addWidget(self.status, 2, 0, 1, 4)
        grid.addWidget(self.cost, 3, 0, 1, 4)
        # room for the longest texts at once: a wrapped label that grows later does not grow the side panel,
        # and the rows under it were drawn over each other ("pass 12 of 29: refining … (patch 7 of 24), …")
        lines = self.fontMetrics().lineSpacing()
        self.status.setMinimumHeight(3 * lines)
        self.cost.setMinimumHeight(4 * lines)
        controller.effects["prompts"].layer_changed.connect(self._on_prompt_changed)
        controller.prompt_kind.changed.connect(lambda _kind=None: self.show_cost())
        runner.started.connect(self._sync)
        runner.progress.connect(self._on_progress)
        runner.finished.connect(self._on_finished)
        self._sync()
        self.show_cost()

    def showEvent(self, event) -> None:  # noqa: N802 - Qt naming
        self.show_cost()  # the tool was chosen: the model or its measurement may have changed meanwhile
        super().showEvent(event)

    def show_cost(self) -> None:
        """What a prompt of the chosen kind will cost on this computer (said before one is drawn)."""
        document = self.controller.document
        kind = str(self.controller.prompt_kind.value)
        click = interactive.prompt_cost(document)
        if click is None:
            self.cost.setText(f"The interactive model ({SETTINGS.interactive_model}) is not installed: "
                              "Segmentation ▸ Models… installs it.")
            return
        if kind == "point":
            self.cost.setText(f"A click: {click.text()}.")
            self.cost.setToolTip("Measured on this computer: when the model was installed, then by each prompt's "
                                 "passes")
            return
        widest = largest_single_pass_extent(click.patch)
        across = f"{widest} voxels"
        if document.volume is not None:
            across += f", {widest * min(document.volume.spacing_mm[:2]) / 10:.0f} cm here"
        large = interactive.prompt_cost(document, _square(2 * widest))
        self.cost.setText(f"A {kind} up to {across}: {short_text(click)}, as a click. Larger: it zooms out and "
                          f"refines, {short_text(large)} at {2 * widest} voxels." if large is not None else "")
        self.cost.setToolTip(f"Up to {widest} voxels across: {click.text()}.\nAt {2 * widest} voxels: "
                             f"{large.text() if large is not None else 'not known'}.")

    def _on_prompt_changed(self, _box=None) -> None:
        session = self.controller.prompt
        if session is not None and session.pending():  # a prompt was just drawn: say its cost before it runs
            drawn = session.drawn_prompts()
            prompt = drawn[-1]
            cost = interactive.prompt_cost(self.controller.document, prompt)
            self._line = (f"prompt {len(drawn)} ({prompt.describe()}): "
                          f"{short_text(cost) if cost is not None else 'computing'}…")
        self._sync()

    @Slot(object)
    def _on_progress(self, step) -> None:
        self._line = step.text
        self._sync()

    @Slot(object, object)
    def _on_finished(self, _session, _error) -> None:
        self._line = ""
        self._sync()
        self.show_cost()  # the pass just run measured what the next one costs

    def _sync(self) -> None:
        session = self.controller.prompt
        active = session is not None
        for widget in (self.apply_button, self.cancel_button, self.new_object_button):
            widget.setEnabled(active)
        if session is None:
            self.status.setText("")
            return
        count = len(session.prompts)
        if self._line or self.runner.busy() or session.pending():  # (a step may arrive after the worker ended)
            self.status.setText(self._line or f"computing the object ({count} prompt{'s' if count != 1 else ''} "
                                              "so far)…")
        else:
            text = f"{count} prompt{'s' if count != 1 else ''}"
            if session.dropped:
                text += f"; {session.dropped} replaced by a newer one"
            engine = session.started_engine
            runtime = getattr(engine, "runtime", None)
            result = getattr(engine, "last_result", None)
            mode = f"; last prompt: {result.mode}" if result is not None and result.mode != "exact" else ""
            took = ""
            if result is not None and "total" in result.seconds:
                took = (f"; the last took {duration_text(result.seconds['total'])} "
                        f"({result.passes} pass{'es' if result.passes != 1 else ''})")
            self.status.setText(text + (f"; runtime {runtime}" if runtime else "") + mode + took)

    @staticmethod
    def _set_small_first(checked: bool) -> None:
        SETTINGS.interactive_mode = "small-first" if checked else "exact"  # from the next prompt on

    def apply(self) -> bool:
        self.runner.wait()
        changed = prompts_effect(self.controller).apply()
        self._sync()
        self.done.emit()
        return changed

    def cancel(self) -> None:
        prompts_effect(self.controller).cancel()
        self._sync()
        self.done.emit()

    def new_object(self) -> None:
        if self.controller.prompt is not None:
            self.apply()


def _square(side: int) -> Prompt:
    """A box of ``side`` voxels on an axial slice (what a larger prompt's cost is said for)."""
    return Prompt("box", box=((0, 1), (0, side), (0, side)))
