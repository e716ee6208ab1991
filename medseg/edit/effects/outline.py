"""Scissors and lasso: a freehand outline dragged, or a polygon clicked vertex by vertex (closed by a click near
its first vertex); the operation runs on the closed outline. The outline shows, as it is drawn, on the view it
is drawn on (with a ring round the first vertex while a polygon is open: click there to close it).

Its options: the scissors' operation and slab (the scissors tool's own; the lasso has none)."""

from __future__ import annotations

import numpy as np

from medseg.edit.effects.base import OUTLINE_PEN, Circle, ClosedLine, Effect, Form, entry
from medseg.edit.operation import Parameter
from medseg.edit.tool_parameters import SCISSORS_OPERATIONS, ScissorsParameters

CLICK_VOXELS = 2.0  # a press-release that moved less than this is a click (an outline: a polygon's first vertex)
CLOSE_VOXELS = 4.0  # a click this close to a polygon's first vertex closes it
CLOSE_RING_PX = 5.0

SCISSORS = Parameter("scissors_operation", "OPERATION", "choice", "Scissors", default="erase-inside",
                     choices=SCISSORS_OPERATIONS)
SLAB = Parameter("scissors_slab", "", "flag", "Only a slab (else through the whole volume)", default=False)
SLAB_MM = Parameter("slab_mm", "MM", "number", "Slab thickness", "mm", 0.1, 1000.0, 10.0, 1.0)


def extent_voxels(points) -> float:
    points = np.asarray(points, dtype=float)
    return float(np.max(points.max(axis=0) - points.min(axis=0))) if len(points) else 0.0


class Outline(Effect):
    name = "outline"
    layer = 3  # over a prompt's marks
    options = (SCISSORS, SLAB, SLAB_MM)
    forms = (Form("scissors", (entry("scissors_operation", 0, 0, columns=2), entry("scissors_slab", 0, 2, text="Slab"),
                               entry("slab_mm", 0, 3)), tools=("scissors",)),)

    def __init__(self, controller) -> None:
        super().__init__(controller)
        self.outline: tuple[int, list[np.ndarray]] | None = None  # (plane axis zyx, points zyx) being drawn
        self.polygon_open = False  # clicks are adding vertices to the outline
        self._freehand = False  # the press started an outline (a drag draws it), not a polygon's next vertex

    def set_outline(self, outline: tuple[int, list[np.ndarray]] | None) -> None:
        self.outline = outline
        self.controller.outline_changed.emit()

    def cancel_outline(self) -> None:
        self.polygon_open = False
        if self.outline is not None:
            self.set_outline(None)

    def press(self, op, zyx, plane):
        self._freehand = not (self.polygon_open and self.outline is not None and self.outline[0] == plane)
        if not self._freehand:
            return self._polygon_click(op, zyx)
        self.polygon_open = False
        self.set_outline((plane, [zyx]))
        return True

    def drag(self, op, zyx):
        if self._freehand and self.outline is not None:
            self.outline[1].append(zyx)
            self.set_outline(self.outline)

    def release(self, op):
        if not self._freehand:
            return  # a vertex click: the polygon stays open (or was closed and cut by the click)
        self._freehand = False
        outline = self.outline
        if outline is not None and extent_voxels(outline[1]) < CLICK_VOXELS:
            self.set_outline((outline[0], outline[1][:1]))  # a click: a polygon's first vertex
            self.polygon_open = True
        else:
            self._cut(op)

    def _polygon_click(self, op, zyx) -> bool:
        assert self.outline is not None
        points = self.outline[1]
        if len(points) >= 3 and extent_voxels([points[0], zyx]) < CLOSE_VOXELS:
            self.polygon_open = False
            self._cut(op)
        else:
            points.append(zyx)
            self.set_outline(self.outline)
        return True

    def _cut(self, op) -> None:
        controller = self.controller
        outline = self.outline
        self.set_outline(None)
        if outline is None or len(outline[1]) < 3 or controller.document.label_map is None:
            return
        axis, points = outline
        plane_axes = [a for a in range(3) if a != axis]
        options = controller.settings
        slab = float(options["slab_mm"].value) if options["scissors_slab"].value else None
        polygon = {"points": np.asarray(points)[:, plane_axes], "axis": axis, "centre": int(round(points[0][axis])),
                   "value": controller.view.active_label,
                   "parameters": ScissorsParameters(str(options["scissors_operation"].value), slab)}
        controller.perform(op, {"polygon": polygon})

    def shapes(self, axis, position):
        return outline_shapes(self.outline, axis, self.polygon_open)


def outline_shapes(outline, axis: int, ring: bool) -> list:
    """An outline being drawn, closed, on the view it is drawn on (``ring``: round its first vertex)."""
    if outline is None or outline[0] != axis or len(outline[1]) < 2:
        return []
    shapes: list = [ClosedLine(tuple(outline[1]), (OUTLINE_PEN,))]
    if ring:
        shapes.append(Circle(tuple(outline[1][0]), CLOSE_RING_PX, (OUTLINE_PEN,)))
    return shapes
