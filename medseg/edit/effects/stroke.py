"""Brush and eraser: the path painted while the mouse moves (the user sees it), one undo step at release.

Its options: the radius and the 3D sphere (the brush's settings in the catalogue)."""

from __future__ import annotations

from medseg.edit.effects.base import Effect, Form, entry, text


class Stroke(Effect):
    name = "stroke"
    forms = (Form("stroke", (text("Radius", 0, 0), entry("radius_mm", 0, 1), entry("sphere", 0, 2, text="3D sphere")),
                  stretch=((1, 1),)),)

    def press(self, op, zyx, plane):
        self._paint(op, [zyx])
        return True

    def drag(self, op, zyx):
        self._paint(op, [self.controller.last_position, zyx])

    def release(self, op):
        self.controller.document.end_stroke(op.name)

    def _paint(self, op, points) -> None:
        controller = self.controller
        values = controller.operation_values(op, {"points": points, "view": controller.plane_axis})
        delta = op.preview(controller.document, values, controller.context()).delta
        controller.document.stroke_apply(delta)
