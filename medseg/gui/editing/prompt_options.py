"""The Edit panel's Interactive AI row: the prompt kind, Apply / Cancel, and the new-object key.

With the Interactive AI tool (key I) a click in any view is a point (shift-click: a negative one), a drag a
box, a scribble or a lasso, by the kind chosen here; the model refines the object in a worker and the
object shows as a preview. *Apply* writes it into the active label (one undo step; never over a locked
label); *Cancel* drops it; *New object* (key A) applies it and starts the next object. *Small first patch*
(off by default) runs a small object's prompt on half the model's patch first, the exact patch when the answer
reaches that half patch's faces: faster, but not nnInteractive's exact result (docs/interactive.md).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QKeySequence
from PySide6.QtWidgets import QCheckBox, QComboBox, QGridLayout, QLabel, QPushButton, QWidget

from medseg.edit.interaction import ToolController
from medseg.gui.common.bind import bind
from medseg.gui.editing.prompt_runner import PromptRunner
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
        self.small_first.setChecked(interactive.settings["mode"] == "small-first")
        self.small_first.toggled.connect(self._set_small_first)
        self.status = QLabel(self)
        self.status.setObjectName("prompt_status")
        self.status.setWordWrap(True)
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.cancel)
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(QLabel("AI prompt", self), 0, 0)
        grid.addWidget(self.kind, 0, 1)
        grid.addWidget(self.apply_button, 0, 2)
        grid.addWidget(self.cancel_button, 0, 3)
        grid.addWidget(self.new_object_button, 1, 0)
        grid.addWidget(self.status, 1, 1, 1, 3)
        grid.addWidget(self.small_first, 2, 0, 1, 4)
        controller.prompt_changed.connect(lambda _box=None: self._sync())
        runner.started.connect(self._sync)
        runner.finished.connect(lambda *_: self._sync())
        self._sync()

    def _sync(self) -> None:
        session = self.controller.prompt
        active = session is not None
        for widget in (self.apply_button, self.cancel_button, self.new_object_button):
            widget.setEnabled(active)
        if session is None:
            self.status.setText("")
            return
        count = len(session.prompts)
        if self.runner.busy():
            self.status.setText(f"computing the object ({count} prompt{'s' if count != 1 else ''} so far)…")
        else:
            text = f"{count} prompt{'s' if count != 1 else ''}"
            if session.dropped:
                text += f"; {session.dropped} replaced by a newer one"
            engine = session.started_engine
            runtime = getattr(engine, "runtime", None)
            result = getattr(engine, "last_result", None)
            mode = f"; last prompt: {result.mode}" if result is not None and result.mode != "exact" else ""
            self.status.setText(text + (f"; runtime {runtime}" if runtime else "") + mode)

    @staticmethod
    def _set_small_first(checked: bool) -> None:
        interactive.settings["mode"] = "small-first" if checked else "exact"  # from the next prompt on

    def apply(self) -> bool:
        self.runner.wait()
        changed = self.controller.apply_prompt()
        self._sync()
        self.done.emit()
        return changed

    def cancel(self) -> None:
        self.controller.cancel_prompt()
        self._sync()
        self.done.emit()

    def new_object(self) -> None:
        if self.controller.prompt is not None:
            self.apply()
