"""A new stateful tool as a developer adds one (docs/developer-guide.md, "Add a tool"): this one module and one
registration. It marks the voxels clicked, draws a ring of its option's size round each mark on its slice, and
has a Clear action, enabled while there are marks."""

from __future__ import annotations

from medseg.edit.effects.base import Cell, Circle, Effect, Form, entry, text
from medseg.edit.operation import EditOperation, Parameter

SIZE = Parameter("mark_ring_px", "PX", "number", "Ring round a mark", "px", 1.0, 20.0, 4.0, 1.0)


class Marks(Effect):
    name = "marks"
    options = (SIZE,)
    shows = ("marks",)
    forms = (Form("marks", (text("Ring", 0, 0), entry("mark_ring_px", 0, 1), Cell("action", "clear", 0, 2, text="Clear")),
                  stretch=((1, 1),)),)

    def __init__(self, controller) -> None:
        super().__init__(controller)
        self.marks: list[tuple[int, int, int]] = []

    @property
    def active(self) -> bool:
        return bool(self.marks)

    def press(self, op, zyx, plane):
        self.marks.append(tuple(int(round(v)) for v in zyx))
        self.layer_changed.emit(None)
        return True

    def clear(self) -> None:
        self.marks = []
        self.layer_changed.emit(None)

    def shapes(self, axis, position):
        size = float(self.controller.settings["mark_ring_px"].value)
        return [Circle(mark, size, (((255, 0, 255, 255), 1.0),)) for mark in self.marks if mark[axis] == position]


def mark_operation() -> EditOperation:
    """The catalogue entry (once the effect it names is registered)."""
    return EditOperation("mark", "Mark", "mark voxels (a tool of the developer guide's example)", (),
                         lambda document, values, context: None, gesture="marks", shortcut="J")
