"""The active tool and its options; views forward mouse presses, drags and releases here.

Qt-free, so a test drives the same brush a user drags: ``press(xyz, plane_axis)``,
``drag(xyz)``, ``release()`` with continuous voxel positions (x, y, z) and the index
axis the view looks along. Ctrl-click picks the label under the mouse as the active one
(whatever the tool). The tools are the catalogue's (:func:`medseg.edit.operations.tools`);
each forwards the mouse to the handler of its gesture (:mod:`medseg.edit.gestures`).
Options are :class:`~medseg.edit.properties.Property` objects the GUI binds to widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from medseg.edit.events import Event
from medseg.edit.gestures import HANDLERS, Gesture
from medseg.edit.grow_session import GrowSession
from medseg.edit.operations import CATALOGUE, Context, EditOperation, Parameter, settings, tools
from medseg.edit.prompt_session import PROMPT_KINDS, Prompt, PromptSession
from medseg.edit.properties import Property
from medseg.edit.tool_parameters import SCISSORS_OPERATIONS, GrowParameters
from medseg.edit.tools import PaintRules
from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.edit.document import SegmentationDocument


class ActiveLabel(Protocol):
    """What the controller needs of the view state (which builds it): the label the tools paint."""

    active_label: int

    def pick_label_at(self, xyz: tuple[int, int, int]) -> int | None: ...


SEED_KINDS = ("structure", "background", "erase")


class ToolController:
    """The active tool and its options, working on ``document`` for the label ``view.active_label``."""

    def __init__(self, document: "SegmentationDocument", view: ActiveLabel) -> None:
        self.document = document
        self.view = view
        self.tool = Property("navigate", choices=tuple(tools()), label="Tool")
        self.hu_masked = Property(False, label="Only where HU in")
        self.only_background = Property(False, label="Paint only over background")
        self.eraser_active_only = Property(False, label="Erase only the active label")
        # one Property per setting of the operation catalogue (its name, unit, range and default)
        self.settings: dict[str, Property] = {name: _property(p) for name, p in settings().items()}
        self.radius_mm, self.sphere = self.settings["radius_mm"], self.settings["sphere"]
        self.fill_3d, self.fill_by_hu = self.settings["fill_3d"], self.settings["fill_by_hu"]
        self.hu_low, self.hu_high = self.settings["hu_low"], self.settings["hu_high"]  # also the brush's HU mask
        self.margin_mm, self.island_ml = self.settings["margin_mm"], self.settings["island_ml"]
        self.smooth_mm = self.settings["smooth_mm"]
        self.seed_locality, self.roi_margin_mm = self.settings["seed_locality"], self.settings["roi_margin_mm"]
        self.trace_tolerance_hu, self.confidence_k = self.settings["trace_tolerance_hu"], self.settings["confidence_k"]
        self.other_label = Property(0, label="with")  # the second label (B) of union, intersect, subtract
        self.seed_kind = Property("structure", choices=SEED_KINDS, label="Paint seeds of")
        self.existing_seeds = Property(GrowParameters.use_existing_labels,
                                       label="Labels already drawn are seeds of themselves (locked ones always are)")
        self.scissors_operation = Property("erase-inside", choices=SCISSORS_OPERATIONS, label="Scissors")
        self.scissors_slab = Property(False, label="Only a slab (else through the whole volume)")
        self.slab_mm = Property(10.0, 0.1, 1000.0, label="Slab thickness", unit="mm", step=1.0)
        self.grow: GrowSession | None = None
        self.grow_changed = Event()  # (box or None): seeds painted or the session ended
        self._grow_compute = self._compute_now  # the GUI's runner calls compute() off the GUI thread instead
        self.outline: tuple[int, list[np.ndarray]] | None = None  # (plane axis zyx, points zyx) being drawn
        self.outline_changed = Event()
        self.trace: tuple[int, int, np.ndarray] | None = None  # (axis zyx, slice, 2D region) under the mouse
        self.trace_changed = Event()
        self.polygon_open = False  # an outline tool: clicks are adding vertices to self.outline
        self.prompt_kind = Property("point", choices=PROMPT_KINDS, label="Prompt")
        self.prompt: PromptSession | None = None  # the object being made by an interactive (model) tool
        self.prompt_changed = Event()  # (box or None): a prompt added, a new preview, or the object applied or dropped
        self._prompt_compute = self._compute_prompt_now  # the GUI's runner computes off the GUI thread instead
        self.shift_held = False  # shift was held at the last press (a prompt tool's negative prompt)
        for prop in (self.seed_locality, self.roi_margin_mm, self.existing_seeds):
            prop.changed.connect(self._grow_parameters_changed)
        self.tool.changed.connect(self._tool_changed)
        self._handlers: dict[str, Gesture] = {name: handler(self) for name, handler in HANDLERS.items()}
        self.last_position: np.ndarray | None = None  # where the running drag was last (z, y, x)
        self.plane_axis: int | None = None  # the index axis (z, y, x) of the view the last press was in
        # the HU range stays editable with the mask off: it is also the Threshold operation's range

    # --- rules ---------------------------------------------------------------------------
    def rules(self) -> PaintRules:
        hu = self._hu_range() if self.hu_masked.value else None
        return PaintRules(hu_range=hu, overwrite="background" if self.only_background.value else "unlocked")

    def _hu_range(self) -> tuple[float, float]:
        low, high = sorted((float(self.hu_low.value), float(self.hu_high.value)))
        return low, high

    def context(self) -> Context:
        """What the operations need besides their values, as the panel shows it."""
        return Context(rules=self.rules(), axis_zyx=self.plane_axis or 0, hu_range=self._hu_range(),
                       only_label=self.view.active_label if self.eraser_active_only.value else None)

    @property
    def active(self) -> str:
        return str(self.tool.value)

    def _operation(self) -> EditOperation | None:
        """The catalogue operation the active tool performs (None: Navigate)."""
        return tools()[self.active].operation

    def _handler(self) -> tuple[EditOperation, Gesture] | None:
        op = self._operation()
        if op is None or op.gesture is None:
            return None
        return op, self._handlers[op.gesture]

    def wants_mouse(self) -> bool:
        return self._handler() is not None

    def claims_shift(self) -> bool:
        """The active tool reads shift+left itself (a negative prompt); elsewhere it changes window/level."""
        found = self._handler()
        return found is not None and found[0].gesture == "prompts"

    # --- mouse ---------------------------------------------------------------------------
    def press(self, xyz: tuple[float, float, float], plane_axis_xyz: int, ctrl: bool = False,
              shift: bool = False) -> bool:
        """A left press at continuous voxel ``xyz`` in a view looking along index axis ``plane_axis_xyz``.
        Returns True when the tool used it (the view then does not move the crosshair). ``shift``: see
        :meth:`claims_shift`."""
        doc = self.document
        self.shift_held = bool(shift)
        if doc.volume is None:
            return False
        if ctrl:
            self.view.pick_label_at(tuple(int(round(v)) for v in xyz))  # type: ignore[arg-type]
            return True
        found = self._handler()
        if found is None:
            return False
        op, handler = found
        zyx = np.asarray(xyz[::-1], dtype=float)
        self.plane_axis = 2 - int(plane_axis_xyz)
        doc.new_label_map()
        self.last_position = zyx
        return handler.press(op, zyx, self.plane_axis)

    def drag(self, xyz: tuple[float, float, float]) -> None:
        found = self._handler()
        if self.last_position is None or found is None:
            return
        zyx = np.asarray(xyz[::-1], dtype=float)
        if self.plane_axis is not None:
            zyx[self.plane_axis] = self.last_position[self.plane_axis]  # a drag stays on the slice it began on
        found[1].drag(found[0], zyx)
        self.last_position = zyx

    def release(self) -> None:
        found = self._handler()
        if self.last_position is None or found is None:
            return
        self.last_position = None
        found[1].release(found[0])

    def hover(self, xyz: tuple[int, int, int] | None, plane_axis_xyz: int) -> None:
        """The mouse moved over a view (no button): a tool may show what a click would do (level tracing
        shows the region it would fill)."""
        found = self._handler()
        if found is None or xyz is None or self.document.volume is None:
            self.show_trace(None)
            return
        found[1].hover(found[0], tuple(int(v) for v in xyz[::-1]), 2 - int(plane_axis_xyz))  # type: ignore[arg-type]

    def show_trace(self, trace: tuple[int, int, np.ndarray] | None) -> None:
        if trace is not None or self.trace is not None:
            self.trace = trace
            self.trace_changed.emit()

    # --- outline tools ----------------------------------------------------------------------------
    def set_outline(self, outline: tuple[int, list[np.ndarray]] | None) -> None:
        self.outline = outline
        self.outline_changed.emit()

    def cancel_outline(self) -> None:
        """Escape: drop the outline being drawn."""
        self.polygon_open, self.last_position = False, None
        if self.outline is not None:
            self.set_outline(None)

    # --- grow from seeds ----------------------------------------------------------------------------
    def grow_parameters(self) -> GrowParameters:
        return GrowParameters(roi_margin_mm=float(self.roi_margin_mm.value),
                              seed_locality=float(self.seed_locality.value),
                              use_existing_labels=bool(self.existing_seeds.value))

    def grow_session(self) -> GrowSession:
        """The running grow-from-seeds session (one is started by the first seed)."""
        if self.grow is None:
            self.grow = GrowSession(self.document, self.grow_parameters(), self.rules())
        return self.grow

    def compute_grow(self, session: GrowSession) -> None:
        self._grow_compute(session)

    def set_preview_runner(self, run) -> None:
        """``run(session)`` computes a grow-from-seeds preview (the GUI: in a worker thread, then
        :meth:`preview_ready`); by default it is computed at once, on the calling thread."""
        self._grow_compute = run

    def preview_ready(self, box=None) -> None:
        """A preview computed elsewhere is ready (``box``: where it changed; None: no preview)."""
        self.grow_changed.emit(box)

    def _compute_now(self, session: GrowSession) -> None:
        """Headless (tests, scripts): compute the preview at once, on this thread."""
        session.compute()
        self.grow_changed.emit(session.preview.box if session.preview is not None else None)

    def _grow_parameters_changed(self, _value=None) -> None:
        if self.grow is not None:
            self.grow.set_parameters(self.grow_parameters())
            self._grow_compute(self.grow)

    def apply_grow(self) -> bool:
        """Apply: the preview becomes one undoable step; the seeds are cleared."""
        session, self.grow = self.grow, None
        if session is None:
            return False
        changed = session.apply()
        self.grow_changed.emit(None)
        return changed

    def cancel_grow(self) -> None:
        session, self.grow = self.grow, None
        if session is not None:
            session.cancel()
            self.grow_changed.emit(None)

    # --- interactive (model-backed) prompts ------------------------------------------------------------
    def prompt_session(self, op: EditOperation) -> PromptSession:
        """The object being prompted (one is started by the first prompt, on the active label)."""
        if self.prompt is None:
            if op.engine is None:
                raise MedsegError(f"{op.title} has no model behind it")
            document = self.document
            self.prompt = PromptSession(document, lambda: op.engine(document), self.view.active_label, self.rules())
        return self.prompt

    def add_prompt(self, op: EditOperation, prompt: Prompt) -> None:
        """A prompt drawn with the mouse: it refines the current object (a running one is cancelled)."""
        try:
            session = self.prompt_session(op)
        except MedsegError as error:
            self.document.announce(f"{op.title}: {error.message}.", "warning")
            return
        session.add(prompt)
        self.prompt_changed.emit(None)  # the prompt is drawn, and its cost said, while the model runs
        self._prompt_compute(session)

    def set_prompt_runner(self, run) -> None:
        """``run(session)`` computes a prompt's preview (the GUI: in a worker thread, then :meth:`prompt_ready`)."""
        self._prompt_compute = run

    def prompt_ready(self, box=None) -> None:
        self.prompt_changed.emit(box)

    def _compute_prompt_now(self, session: PromptSession) -> None:
        session.compute()
        self.prompt_changed.emit(session.preview.box if session.preview is not None else None)

    def apply_prompt(self) -> bool:
        """Apply: the object becomes one undoable step of its label; the next prompt starts a new object."""
        session, self.prompt = self.prompt, None
        if session is None:
            return False
        changed = session.apply()
        self.prompt_changed.emit(None)
        return changed

    def new_prompt_object(self) -> bool:
        """The new-object key: apply this object (if any) and start the next one."""
        return self.apply_prompt()

    def cancel_prompt(self) -> None:
        session, self.prompt = self.prompt, None
        if session is not None:
            session.cancel()
            self.prompt_changed.emit(None)

    def preview_session(self):
        """The session whose preview the views draw: grow from seeds or an interactive object (or None)."""
        return self.grow if self.grow is not None else self.prompt

    def _tool_changed(self, _name=None) -> None:
        self.cancel_outline()
        self.show_trace(None)  # the next hover shows the new tool's preview, if it has one

    # --- operations of the catalogue ----------------------------------------------------------
    def setting(self, parameter: Parameter) -> Property:
        """The Property of a setting (made on first use for an operation registered after this controller)."""
        if parameter.name not in self.settings:
            self.settings[parameter.name] = _property(parameter)
        return self.settings[parameter.name]

    def operation_values(self, op: EditOperation, inputs: dict | None = None) -> dict:
        """The values an operation runs with here: the active label, the second label box, the settings'
        Properties, and ``inputs`` from the mouse (point, view, outline, seeds)."""
        values = dict(inputs or {})
        labels = [p for p in op.parameters if p.kind in ("label", "new-label")]
        for parameter, value in zip(labels, (self.view.active_label, int(self.other_label.value))):
            values.setdefault(parameter.name, value)
        for parameter in op.settings:
            value = self.setting(parameter).value
            values.setdefault(parameter.name, bool(value) if parameter.kind == "flag" else float(value))
        return values

    def perform(self, op: EditOperation, inputs: dict | None = None) -> bool:
        """Run ``op`` on the active label with the settings shown and ``inputs`` from the mouse: one undoable,
        journalled step, said to the user ("Grow 2 mm on liver: liver +23.0 ml")."""
        values = self.operation_values(op, inputs)
        labelled = [p for p in op.parameters if p.kind in ("label", "new-label")]
        if labelled:
            value = int(values[labelled[0].name])
            entry = self.document.labels.get(value)
            target = entry.name if entry else f"label {value}"
            description, announce = f"{op.name} {target}", f"{op.summary(values)} on {target}"
        else:
            description, announce = op.name, op.summary(values)
        return op.perform(self.document, values, self.context(), description, announce)

    def run_operation(self, name: str) -> bool:
        """Run a catalogue operation (by its catalogue name) on the active label with the settings shown."""
        op = CATALOGUE[name]
        if op.gesture is not None or op.inputs:
            raise MedsegError(f"{op.title} works with the mouse: choose the {op.title} tool and click in a view"
                              if op.gesture else f"{op.title} takes its input from elsewhere in the app")
        if self.document.label_map is None:
            raise MedsegError("there is no segmentation yet; draw or segment first")
        return self.perform(op)

    def operation_text(self, name: str) -> str:
        """The operation with its setting, as the user reads it ("Grow 2 mm")."""
        op = CATALOGUE[name]
        return op.summary({p.name: float(self.setting(p).value) for p in op.settings if p.kind == "number"})


def _property(parameter: Parameter) -> Property:
    if parameter.kind == "flag":
        return Property(bool(parameter.default), label=parameter.label)
    return Property(parameter.default, parameter.minimum, parameter.maximum, label=parameter.label,
                    unit=parameter.unit, step=parameter.step, decimals=parameter.decimals)
