"""What a stateful mouse tool is (3D Slicer's Segment Editor effect): one object holding its state, what it
does with the mouse, what it shows over a slice and the options it shows in the Edit panel.

Qt-free: the tool says *what* to draw, as the few primitives below in voxel indices (z, y, x); the slice view
(:mod:`medseg.gui.viewer.slice_view`) draws them, and the Edit panel builds the option widgets from the
:class:`Form` declarations and the :class:`~medseg.edit.operation.Parameter` behind each field
(:mod:`medseg.gui.editing.option_form`). So a new tool is one module here and one entry in
:data:`medseg.edit.effects.EFFECTS`; an operation of the catalogue names it as its ``gesture``.

Positions are continuous voxel indices (z, y, x); ``plane`` is the index axis (z, y, x) a view looks along.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from medseg.edit.events import Event
from medseg.edit.operation import EditOperation, Parameter
from medseg.edit.properties import Property

# --- what a tool draws over a slice ----------------------------------------------------------------------------
Pen = tuple[tuple[int, int, int, int], float]  # (RGBA, width in screen pixels)


@dataclass(frozen=True)
class SeedPaint:
    """Seeds painted opaque over the slice image, each value in the seed palette's colour. ``plane``: the
    slice as numpy indexing leaves it (array order), 0 where there is none."""

    plane: np.ndarray


@dataclass(frozen=True)
class RegionEdge:
    """The edge of a 2D region (array order), painted over the slice image in one ARGB colour."""

    plane: np.ndarray
    argb: int


@dataclass(frozen=True)
class CrispMask:
    """Voxels of a plane (array order), drawn over the slice unsmoothed in one ARGB colour, so a stroke one
    voxel wide stays crisp (``edge``: only the region's outline)."""

    plane: np.ndarray
    argb: int
    edge: bool = False


@dataclass(frozen=True)
class Circle:
    centre_zyx: tuple[float, float, float]
    radius_px: float
    pens: tuple[Pen, ...]


@dataclass(frozen=True)
class Rectangle:
    """A rectangle on the slice between two voxel positions (corners, not centres)."""

    lo_zyx: tuple[float, float, float]
    hi_zyx: tuple[float, float, float]
    pens: tuple[Pen, ...]


@dataclass(frozen=True)
class ClosedLine:
    points_zyx: tuple[np.ndarray, ...]
    pens: tuple[Pen, ...]


OUTLINE_PEN: Pen = ((255, 230, 0, 255), 2.0)  # an outline being drawn (scissors, lasso, a prompt's box)


# --- the options a tool shows ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class Cell:
    """One place of an options form's grid. ``kind``: ``text`` (``text`` shown), ``field`` (the widget of the
    setting or option ``name``: a spin box, a check box titled ``text``, a list of choices, or a slider when
    ``widget`` is "slider"), ``readout`` (the value of ``name`` as ``text`` formats it), ``action`` (a button
    titled ``text`` that runs the tool's method ``name``), ``custom`` (a widget the GUI supplies by ``name``)."""

    kind: str
    name: str
    row: int
    column: int
    rows: int = 1
    columns: int = 1
    text: str = ""
    widget: str = ""
    tip: str = ""


def text(words: str, row: int, column: int) -> Cell:
    return Cell("text", "", row, column, text=words)


def entry(name: str, row: int, column: int, columns: int = 1, text: str = "", widget: str = "") -> Cell:
    return Cell("field", name, row, column, 1, columns, text=text, widget=widget)


@dataclass(frozen=True)
class Form:
    """A group of option widgets. A tool shows it when it holds one of its operation's settings, when the
    operation is in ``tools``, or when the tool's effect lists it in :attr:`Effect.shows`. ``stretch``: (column,
    factor) of the grid; ``row``: the cells side by side in a row that ends in a stretch."""

    name: str
    cells: tuple[Cell, ...]
    stretch: tuple[tuple[int, int], ...] = ()
    row: bool = False
    tools: tuple[str, ...] = ()

    @property
    def fields(self) -> set[str]:
        return {c.name for c in self.cells if c.kind in ("field", "readout")}

    @property
    def actions(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.cells if c.kind == "action")


def property_of(parameter: Parameter) -> Property:
    """The Property the panel binds a setting's or option's widget to (its range, unit, step and default)."""
    if parameter.kind == "flag":
        return Property(bool(parameter.default), label=parameter.label)
    if parameter.kind == "choice":
        return Property(parameter.default, choices=parameter.choices, label=parameter.label)
    return Property(parameter.default, parameter.minimum, parameter.maximum, label=parameter.label,
                    unit=parameter.unit, step=parameter.step, decimals=parameter.decimals)


# --- the tool ---------------------------------------------------------------------------------------------------
class Effect:
    """The base: a tool that uses no more than the press, keeps nothing and draws nothing.

    ``controller`` is the :class:`~medseg.edit.interaction.ToolController`, which builds one object of each
    effect and forwards the mouse to the active tool's; the effect reads the active label and the settings from
    it and performs its operation through it, so a click paints what ``medseg edit`` would."""

    name: ClassVar[str] = ""  # what a catalogue operation's ``gesture`` says to use it
    options: ClassVar[tuple[Parameter, ...]] = ()  # its own options (not settings of an operation)
    forms: ClassVar[tuple[Form, ...]] = ()  # its option widgets, as groups
    shows: ClassVar[tuple[str, ...]] = ()  # forms its tools show besides those holding their settings
    layer: ClassVar[int] = 0  # drawing order over the slice: the lower first
    redraw_whole: ClassVar[bool] = False  # a change redraws every slice (the old prompts' too), not its box
    reads_shift: ClassVar[bool] = False  # shift+left goes to it (else it changes the window/level)

    def __init__(self, controller: Any) -> None:
        self.controller = controller
        self.layer_changed = Event()  # (box or None): what it paints into the slice image changed

    # mouse
    def press(self, op: EditOperation, zyx: np.ndarray, plane: int) -> bool:
        return True

    def drag(self, op: EditOperation, zyx: np.ndarray) -> None:
        """The mouse moved with the button down (``zyx`` already kept on the slice the press was on)."""

    def release(self, op: EditOperation) -> None:
        """The button went up after a press this effect used."""

    def hover(self, op: EditOperation, voxel_zyx: tuple[int, int, int], plane: int) -> None:
        """The mouse moved with no button down."""

    def forget_hover(self) -> None:
        """The mouse is over no view of this tool, or the tool changed: drop what the hover showed."""

    def cancel_outline(self) -> None:
        """Escape, or another tool: drop an outline being drawn."""

    @property
    def active(self) -> bool:
        """Work is pending that Apply would write (its actions are enabled)."""
        return False

    # drawing
    def preview(self) -> Any:
        """What Apply would write (an object with ``box`` and ``labels``), pasted into the label plane; or None."""
        return None

    def paints(self, axis: int, position: int) -> list[SeedPaint | RegionEdge]:
        """What it paints opaque into the slice ``position`` along index ``axis`` (zyx)."""
        return []

    def crisp(self, axis: int, position: int, shape_zyx: tuple[int, int, int]) -> list[CrispMask]:
        return []

    def shapes(self, axis: int, position: int) -> list[Circle | Rectangle | ClosedLine]:
        """Lines and marks drawn over the slice at screen resolution."""
        return []


class SessionEffect(Effect):
    """An effect that builds one pending result in a session (grow from seeds, Interactive AI): Apply writes it
    as one undoable step and ends the session, Cancel drops it, and the preview is the session's."""

    session: Any = None  # the session's own type in each effect; None while nothing is pending

    def apply(self) -> bool:
        session, self.session = self.session, None
        if session is None:
            return False
        changed = bool(session.apply())
        self.layer_changed.emit(None)
        return changed

    def cancel(self) -> None:
        session, self.session = self.session, None
        if session is not None:
            session.cancel()
            self.layer_changed.emit(None)

    def preview(self) -> Any:
        return self.session.preview if self.session is not None else None
