"""What each mouse gesture does with a left press, drag, release and hover: napari's mode → handler
table. The catalogue says which gesture a tool has (:attr:`EditOperation.gesture`); the tool
controller looks the handler up in :data:`HANDLERS` and forwards the mouse to it, so no code asks
which tool is active.

Positions are continuous voxel indices (z, y, x); ``plane`` is the index axis (z, y, x) the view
looks along. A handler reads the values it needs from the controller (the active label, the
settings' Properties) and performs its operation through the catalogue, so the click paints what
``medseg edit`` would.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from medseg.edit.operation import EditOperation
from medseg.edit.prompt_session import Prompt, prompt_from_outline
from medseg.edit.tool_parameters import ScissorsParameters
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED
from medseg.errors import MedsegError

CLICK_VOXELS = 2.0  # a press-release that moved less than this is a click (an outline: a polygon's first vertex)
CLOSE_VOXELS = 4.0  # a click this close to a polygon's first vertex closes it


def extent_voxels(points) -> float:
    points = np.asarray(points, dtype=float)
    return float(np.max(points.max(axis=0) - points.min(axis=0))) if len(points) else 0.0


def _voxel(zyx: np.ndarray) -> tuple[int, int, int]:
    return tuple(int(round(v)) for v in zyx)  # type: ignore[return-value]


class Gesture:
    """The base: a tool that uses no more than the press."""

    def __init__(self, controller: Any) -> None:
        self.controller = controller  # the ToolController (medseg.edit.interaction), which builds the handlers

    def press(self, op: EditOperation, zyx: np.ndarray, plane: int) -> bool:
        return True

    def drag(self, op: EditOperation, zyx: np.ndarray) -> None:
        """The mouse moved with the button down (``zyx`` already kept on the slice the press was on)."""

    def release(self, op: EditOperation) -> None:
        """The button went up after a press this gesture used."""

    def hover(self, op: EditOperation, voxel_zyx: tuple[int, int, int], plane: int) -> None:
        """The mouse moved with no button down."""


class Stroke(Gesture):
    """Brush and eraser: the path painted while the mouse moves (the user sees it), one undo step at release."""

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


class Click(Gesture):
    """One press runs the operation at the voxel (fill, keep island, level trace, click 3D). What stops it (the
    background clicked, a locked label, an HU outside the range) is said, not raised into the view."""

    def press(self, op, zyx, plane):
        controller = self.controller
        try:
            controller.perform(op, {"point": _voxel(zyx), "view": plane})
        except MedsegError as error:
            controller.document.announce(f"{op.title}: {error.message}.", "warning")
        return True

    def hover(self, op, voxel_zyx, plane):
        controller = self.controller
        if op.hover is None or controller.document.volume is None:
            controller.show_trace(None)
            return
        values = controller.operation_values(op, {"point": voxel_zyx, "view": plane})
        controller.show_trace((plane, voxel_zyx[plane], op.hover(controller.document, values)))


class Outline(Gesture):
    """Scissors and lasso: a freehand outline dragged, or a polygon clicked vertex by vertex (closed by a click
    near its first vertex); the operation runs on the closed outline."""

    def __init__(self, controller: Any) -> None:
        super().__init__(controller)
        self._freehand = False  # the press started an outline (a drag draws it), not a polygon's next vertex

    def press(self, op, zyx, plane):
        controller = self.controller
        self._freehand = not (controller.polygon_open and controller.outline is not None
                              and controller.outline[0] == plane)
        if not self._freehand:
            return self._polygon_click(op, zyx)
        controller.polygon_open = False
        controller.set_outline((plane, [zyx]))
        return True

    def drag(self, op, zyx):
        outline = self.controller.outline
        if self._freehand and outline is not None:
            outline[1].append(zyx)
            self.controller.set_outline(outline)

    def release(self, op):
        if not self._freehand:
            return  # a vertex click: the polygon stays open (or was closed and cut by the click)
        self._freehand = False
        controller = self.controller
        outline = controller.outline
        if outline is not None and extent_voxels(outline[1]) < CLICK_VOXELS:
            controller.set_outline((outline[0], outline[1][:1]))  # a click: a polygon's first vertex
            controller.polygon_open = True
        else:
            self._cut(op)

    def _polygon_click(self, op, zyx) -> bool:
        controller = self.controller
        assert controller.outline is not None
        points = controller.outline[1]
        if len(points) >= 3 and extent_voxels([points[0], zyx]) < CLOSE_VOXELS:
            controller.polygon_open = False
            self._cut(op)
        else:
            points.append(zyx)
            controller.set_outline(controller.outline)
        return True

    def _cut(self, op) -> None:
        controller = self.controller
        outline = controller.outline
        controller.set_outline(None)
        if outline is None or len(outline[1]) < 3 or controller.document.label_map is None:
            return
        axis, points = outline
        plane_axes = [a for a in range(3) if a != axis]
        polygon = {"points": np.asarray(points)[:, plane_axes], "axis": axis, "centre": int(round(points[0][axis])),
                   "value": controller.view.active_label,
                   "parameters": ScissorsParameters(str(controller.scissors_operation.value),
                                                    float(controller.slab_mm.value)
                                                    if controller.scissors_slab.value else None)}
        controller.perform(op, {"polygon": polygon})


class Seeds(Gesture):
    """Grow from seeds: strokes paint seeds (of the active label, of background, or erase them); each finished
    stroke computes a new preview (off the GUI thread in the app); Apply writes it."""

    def press(self, op, zyx, plane):
        self._paint([zyx])
        return True

    def drag(self, op, zyx):
        self._paint([self.controller.last_position, zyx])

    def release(self, op):
        session = self.controller.grow
        if session is not None and session.pending():
            self.controller.compute_grow(session)

    def _paint(self, points) -> None:
        controller = self.controller
        session = controller.grow_session()
        # what a seed stroke paints: the active label's seeds, background seeds, or none (it erases seeds)
        value = {"structure": controller.view.active_label, "background": BACKGROUND_SEED,
                 "erase": None}[controller.seed_kind.value]
        plane = None if controller.sphere.value else controller.plane_axis
        box = session.paint(points, float(controller.radius_mm.value), value, plane)
        if box is not None:
            controller.grow_changed.emit(box)  # the seeds show at once; the preview follows when the stroke ends


class PromptGesture(Gesture):
    """Interactive AI: by the prompt kind chosen, a click is a point, a drag a box, a scribble or a lasso
    (freehand) on the slice it starts on; shift held at the press makes the prompt negative. Each finished
    prompt goes to the controller's prompt session, whose model refines the object (off the GUI thread in
    the app) into a preview that Apply writes."""

    def press(self, op, zyx, plane):
        controller = self.controller
        self._negative = bool(controller.shift_held)
        if controller.prompt_kind.value == "point":
            controller.add_prompt(op, Prompt("point", not self._negative, point=tuple(float(v) for v in zyx)))
            return True
        controller.set_outline((plane, [zyx]))
        return True

    def drag(self, op, zyx):
        controller = self.controller
        outline = controller.outline
        if outline is None or controller.prompt_kind.value == "point":
            return
        if controller.prompt_kind.value == "box":  # the rectangle from the press to the mouse, on the slice
            start = outline[1][0]
            axes = [a for a in range(3) if a != outline[0]]
            corners = []
            for first, second in ((0, 0), (0, 1), (1, 1), (1, 0)):
                corner = np.array(start, dtype=float)
                corner[axes[0]] = (start, zyx)[first][axes[0]]
                corner[axes[1]] = (start, zyx)[second][axes[1]]
                corners.append(corner)
            controller.set_outline((outline[0], corners))
        else:
            outline[1].append(zyx)
            controller.set_outline(outline)

    def release(self, op):
        controller = self.controller
        outline = controller.outline
        kind = str(controller.prompt_kind.value)
        if kind == "point" or outline is None:
            return
        controller.set_outline(None)
        prompt = prompt_from_outline(kind, outline[1], outline[0], controller.document.volume.shape_zyx,
                                     positive=not self._negative)
        if prompt is None:
            points = np.rint(np.asarray(outline[1], dtype=float))
            wide = [np.ptp(points[:, axis]) >= 1 for axis in range(3) if axis != outline[0]]
            if kind == "box" and not any(wide):  # a click, or a drag within a voxel: never a 1-voxel box
                text = ("the box's two corners are in the same voxel (a click, not a drag), so no box was drawn; "
                        "drag from one corner of the box to the opposite one (for a click, choose AI prompt: point)")
            elif kind == "box":
                text = "the box is one voxel high or wide (a line, not a box), so no box was drawn; drag it larger"
            else:
                text = f"the {kind} has no extent on the image; draw it larger"
            controller.document.announce(f"{op.title}: {text}.", "warning")
            return
        controller.add_prompt(op, prompt)


HANDLERS: dict[str, type[Gesture]] = {"stroke": Stroke, "click": Click, "outline": Outline, "seeds": Seeds,
                                      "prompts": PromptGesture}
