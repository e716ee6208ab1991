"""Interactive AI: by the prompt kind chosen, a click is a point, a drag a box, a scribble or a lasso (freehand) on
the slice it starts on; shift held at the press makes the prompt negative. Each finished prompt goes to the object
being made (a :class:`~medseg.edit.prompt_session.PromptSession`), whose model refines it (off the GUI thread in
the app: the GUI's runner computes it, then calls :meth:`Prompts.preview_ready`) into a preview that Apply writes.

It shows the object's prompts where they cross the slice, green positive and red negative (points as rings, boxes,
scribbles as drawn, lassos as their outline), the outline being dragged, and the preview. Its options: the prompt
kind; the GUI adds the model's cost and progress (the ``prompt`` widget of the form)."""

from __future__ import annotations

import numpy as np

from medseg.edit.effects.base import Cell, Circle, CrispMask, Form, Rectangle, SessionEffect
from medseg.edit.effects.outline import outline_shapes
from medseg.edit.operation import Parameter
from medseg.edit.prompt_session import LASSO_PROMPT, PROMPT_KINDS, Prompt, PromptSession, prompt_from_outline
from medseg.errors import MedsegError

PROMPT_KIND = Parameter("prompt_kind", "KIND", "choice", "Prompt", default="point", choices=PROMPT_KINDS)
# green for a positive prompt, red for a negative one; a dark shadow under a line shows it over a label of its colour
PROMPT_RGBA = {True: (80, 230, 80, 255), False: (240, 70, 70, 255)}
PROMPT_ARGB = {positive: 0xFF000000 | r << 16 | g << 8 | b for positive, (r, g, b, _a) in PROMPT_RGBA.items()}
SHADOW = ((0, 0, 0, 200), 4.0)
POINT_RING_PX = 5.0


class Prompts(SessionEffect):
    name = "prompts"
    layer = 2
    reads_shift = True  # shift makes a prompt negative
    redraw_whole = True  # a prompt dropped or applied: its marks go from every slice they were on
    options = (PROMPT_KIND,)
    shows = ("prompt",)
    forms = (Form("prompt", (Cell("custom", "prompt", 0, 0),)),)

    def __init__(self, controller) -> None:
        super().__init__(controller)
        self.session: PromptSession | None = None  # the object being made
        self.outline: tuple[int, list[np.ndarray]] | None = None  # a box, scribble or lasso being dragged
        self._compute = self._compute_now  # the GUI's runner computes off the GUI thread instead
        self._negative = False

    @property
    def active(self) -> bool:
        return self.session is not None

    # mouse
    def press(self, op, zyx, plane):
        controller = self.controller
        self._negative = bool(controller.shift_held)
        if controller.settings["prompt_kind"].value == "point":
            self.add(op, Prompt("point", not self._negative, point=tuple(float(v) for v in zyx)))
            return True
        self._set_outline((plane, [zyx]))
        return True

    def drag(self, op, zyx):
        outline = self.outline
        kind = self.controller.settings["prompt_kind"].value
        if outline is None or kind == "point":
            return
        if kind == "box":  # the rectangle from the press to the mouse, on the slice
            start = outline[1][0]
            axes = [a for a in range(3) if a != outline[0]]
            corners = []
            for first, second in ((0, 0), (0, 1), (1, 1), (1, 0)):
                corner = np.array(start, dtype=float)
                corner[axes[0]] = (start, zyx)[first][axes[0]]
                corner[axes[1]] = (start, zyx)[second][axes[1]]
                corners.append(corner)
            self._set_outline((outline[0], corners))
        else:
            outline[1].append(zyx)
            self._set_outline(outline)

    def release(self, op):
        controller = self.controller
        outline = self.outline
        kind = str(controller.settings["prompt_kind"].value)
        if kind == "point" or outline is None:
            return
        self._set_outline(None)
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
        self.add(op, prompt)

    def _set_outline(self, outline) -> None:
        self.outline = outline
        self.controller.outline_changed.emit()

    def cancel_outline(self) -> None:
        if self.outline is not None:
            self._set_outline(None)

    # the object
    def start(self, op) -> PromptSession:
        """The object being prompted (one is started by the first prompt, on the active label)."""
        if self.session is None:
            if op.engine is None:
                raise MedsegError(f"{op.title} has no model behind it")
            controller = self.controller
            document = controller.document
            self.session = PromptSession(document, lambda: op.engine(document), controller.view.active_label,
                                         controller.rules())
        return self.session

    def add(self, op, prompt: Prompt) -> None:
        """A prompt drawn with the mouse: it refines the current object (a running one is cancelled)."""
        try:
            session = self.start(op)
        except MedsegError as error:
            self.controller.document.announce(f"{op.title}: {error.message}.", "warning")
            return
        session.add(prompt)
        self.layer_changed.emit(None)  # the prompt is drawn, and its cost said, while the model runs
        self._compute(session)

    def set_runner(self, run) -> None:
        """``run(session)`` computes a prompt's preview (the GUI: in a worker thread, then :meth:`preview_ready`)."""
        self._compute = run

    def preview_ready(self, box=None) -> None:
        self.layer_changed.emit(box)

    def _compute_now(self, session: PromptSession) -> None:
        session.compute()
        self.layer_changed.emit(session.preview.box if session.preview is not None else None)

    # drawing (the preview, Apply and Cancel: SessionEffect's)
    def crisp(self, axis, position, shape_zyx):
        """The scribbles (as drawn) and lassos (their outline, which leaves the object under it in sight)."""
        if self.session is None:
            return []
        found = []
        for prompt in self.session.drawn_prompts():
            plane = _mask_plane(prompt, axis, position, shape_zyx) if prompt.mask is not None else None
            if plane is not None:
                found.append(CrispMask(plane, PROMPT_ARGB[prompt.positive], edge=prompt.kind == LASSO_PROMPT))
        return found

    def shapes(self, axis, position):
        shapes: list = []
        if self.session is not None:
            for prompt in self.session.drawn_prompts():
                pens = (SHADOW, (PROMPT_RGBA[prompt.positive], 2.0))
                if prompt.kind == "point" and round(prompt.point[axis]) == position:
                    shapes.append(Circle(tuple(prompt.point), POINT_RING_PX, pens))
                elif prompt.kind == "box" and prompt.box[axis][0] <= position < prompt.box[axis][1]:
                    # the voxels' outer edges: a box of one voxel's depth is drawn round the voxels it holds
                    lo = [float(position) if a == axis else b[0] - 0.5 for a, b in enumerate(prompt.box)]
                    hi = [float(position) if a == axis else b[1] - 0.5 for a, b in enumerate(prompt.box)]
                    shapes.append(Rectangle(tuple(lo), tuple(hi), pens))
        return shapes + outline_shapes(self.outline, axis, False)


def _mask_plane(prompt, axis: int, position: int, shape_zyx) -> np.ndarray | None:
    """A scribble's or lasso's voxels on slice ``position`` along ``axis`` (zyx), as a whole plane in array order
    (None when the prompt does not cross it)."""
    origin, mask = prompt.origin, prompt.mask
    if not origin[axis] <= position < origin[axis] + mask.shape[axis]:
        return None
    block = np.take(mask, position - origin[axis], axis=axis) != 0
    if not block.any():
        return None
    others = [a for a in range(3) if a != axis]
    plane = np.zeros([shape_zyx[a] for a in others], dtype=bool)
    starts = [origin[a] for a in others]
    plane[starts[0]:starts[0] + block.shape[0], starts[1]:starts[1] + block.shape[1]] = block
    return plane
