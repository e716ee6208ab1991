"""The active tool and its options; views forward mouse presses, drags and releases here.

Qt-free, so a test drives the same brush a user drags: ``press(xyz, plane_axis)``,
``drag(xyz)``, ``release()`` with continuous voxel positions (x, y, z) and the index
axis the view looks along. Ctrl-click picks the label under the mouse as the active one
(whatever the tool). The tools are the catalogue's (:func:`medseg.edit.operations.tools`);
each names its effect (:mod:`medseg.edit.effects`: one object per stateful tool, holding its
state, what it draws and its options), and the controller forwards the mouse to the active
tool's. Settings and options are :class:`~medseg.edit.properties.Property` objects the GUI
binds to widgets, one per name (``controller.radius_mm``, ``controller.settings["seed_kind"]``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from medseg.edit.effects import EFFECTS, Effect
from medseg.edit.effects.base import property_of
from medseg.edit.events import Event
from medseg.edit.operations import CATALOGUE, Context, EditOperation, Parameter, settings, tools
from medseg.edit.properties import Property
from medseg.edit.tools.rules import PaintRules
from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.edit.document import SegmentationDocument


class ActiveLabel(Protocol):
    """What the controller needs of the view state (which builds it): the label the tools paint."""

    active_label: int

    def pick_label_at(self, xyz: tuple[int, int, int]) -> int | None: ...


class ToolController:
    """The active tool and its options, working on ``document`` for the label ``view.active_label``."""

    def __init__(self, document: "SegmentationDocument", view: ActiveLabel) -> None:
        self.document = document
        self.view = view
        self.tool = Property("navigate", choices=tuple(tools()), label="Tool")
        # the paint rules (every tool and operation that paints keeps to them) and the eraser's limit
        self.hu_masked = Property(False, label="Only where HU in")
        self.only_background = Property(False, label="Paint only over background")
        self.eraser_active_only = Property(False, label="Erase only the active label")
        self.other_label = Property(0, label="with")  # the second label (B) of union, intersect, subtract
        # one Property per setting of the operation catalogue (its name, unit, range and default) and per option
        # of an effect; the HU range stays editable with the mask off: it is also the Threshold operation's range
        self.settings: dict[str, Property] = {name: property_of(p) for name, p in settings().items()}
        for effect_class in EFFECTS.values():
            self.settings.update((p.name, property_of(p)) for p in effect_class.options)
        self.outline_changed = Event()  # an outline being drawn changed (the views repaint, nothing re-rendered)
        self.shift_held = False  # shift was held at the last press (a prompt tool's negative prompt)
        self.last_position: np.ndarray | None = None  # where the running drag was last (z, y, x)
        self.plane_axis: int | None = None  # the index axis (z, y, x) of the view the last press was in
        # one object per effect, in drawing order
        self.effects: dict[str, Effect] = {name: cls(self) for name, cls in
                                           sorted(EFFECTS.items(), key=lambda item: item[1].layer)}
        self.tool.changed.connect(self._tool_changed)

    def __getattr__(self, name: str) -> Property:
        """A setting's or option's Property by its name (``controller.radius_mm``)."""
        found = self.__dict__.get("settings", {}).get(name)
        if found is None:
            raise AttributeError(name)
        return found

    # --- rules ---------------------------------------------------------------------------
    def rules(self) -> PaintRules:
        hu = self._hu_range() if self.hu_masked.value else None
        return PaintRules(hu_range=hu, overwrite="background" if self.only_background.value else "unlocked")

    def _hu_range(self) -> tuple[float, float]:
        low, high = sorted((float(self.settings["hu_low"].value), float(self.settings["hu_high"].value)))
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

    def _handler(self) -> tuple[EditOperation, Effect] | None:
        op = self._operation()
        if op is None or op.gesture is None:
            return None
        return op, self.effects[op.gesture]

    def wants_mouse(self) -> bool:
        return self._handler() is not None

    def claims_shift(self) -> bool:
        """The active tool reads shift+left itself (a negative prompt); elsewhere it changes window/level."""
        found = self._handler()
        return found is not None and found[1].reads_shift

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
        op, effect = found
        zyx = np.asarray(xyz[::-1], dtype=float)
        self.plane_axis = 2 - int(plane_axis_xyz)
        doc.new_label_map()
        self.last_position = zyx
        return effect.press(op, zyx, self.plane_axis)

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
            for effect in self.effects.values():
                effect.forget_hover()
            return
        found[1].hover(found[0], tuple(int(v) for v in xyz[::-1]), 2 - int(plane_axis_xyz))  # type: ignore[arg-type]

    def cancel_outline(self) -> None:
        """Escape: drop the outline being drawn."""
        self.last_position = None
        for effect in self.effects.values():
            effect.cancel_outline()

    def _tool_changed(self, _name=None) -> None:
        self.cancel_outline()
        for effect in self.effects.values():
            effect.forget_hover()  # the next hover shows the new tool's preview, if it has one

    # --- what the effects hold (the views draw it; the panel's Apply and Cancel act on it) ----------------------
    def preview(self):
        """What Apply would write, pasted into the views' label planes: the first effect with work pending."""
        for effect in self.effects.values():
            if effect.active:
                return effect.preview()
        return None

    @property
    def grow(self):
        """The running grow-from-seeds session (None: no seeds painted)."""
        return self.effects["seeds"].session

    @property
    def prompt(self):
        """The object being made by the interactive (model) tool (None: none)."""
        return self.effects["prompts"].session

    @property
    def outline(self) -> tuple[int, list[np.ndarray]] | None:
        """The outline being drawn (plane axis zyx, points zyx), by whichever tool draws one."""
        return next((e.outline for e in self.effects.values() if getattr(e, "outline", None) is not None), None)

    @property
    def polygon_open(self) -> bool:
        """An outline tool: clicks are adding vertices to :attr:`outline`."""
        return self.effects["outline"].polygon_open

    @property
    def trace(self):
        """The region a level-trace click would fill, under the mouse: (axis zyx, slice, 2D region), or None."""
        return self.effects["click"].trace

    # --- operations of the catalogue ----------------------------------------------------------
    def setting(self, parameter: Parameter) -> Property:
        """The Property of a setting (made on first use for an operation registered after this controller)."""
        if parameter.name not in self.settings:
            self.settings[parameter.name] = property_of(parameter)
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
