"""What an editing operation is: its parameters, what it needs besides them, what it proposes, and the
mouse tool that performs it. The catalogue itself (the entries, and the hook through which a higher
layer adds its own) is :mod:`medseg.edit.operations`.

An operation is Slicer's Segment Editor effect as a record: a name, help, parameters with units and
ranges, ``run(document, values, context) -> Change``, and for a mouse tool its shortcut and its
gesture (napari's mode → handler table: the gesture names the effect in
:mod:`medseg.edit.effects`, which holds the tool's state). A :class:`Change` is a preview: nothing is written until it is
performed, as one undoable, journalled step of the document.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Mapping

from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.core.labels import Label
    from medseg.edit.delta import Delta
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.tools.rules import PaintRules

LABEL_KINDS = ("label", "new-label")
# Values the GUI takes from the mouse or from another part of the app (a Segment result), never from a box.
# "model": a model reference (the Segment panel's choice; on the command line an id, a name or a folder).
INPUT_KINDS = ("point", "points", "view", "seeds-file", "polygon-file", "segmentation-file", "choice", "model",
               "prompt-spec")
SETTING_KINDS = ("number", "flag")  # one Property each in the tool controller, one widget in the Edit panel
# A mouse tool's gesture names its effect, the object that holds the tool's state, mouse handling, drawing and
# options: one module each in medseg.edit.effects (stroke, click, outline, seeds, prompts), listed in its EFFECTS.


@dataclass(frozen=True)
class Parameter:
    """One value an operation takes. ``name`` is its one name: the recipe's, the tool controller's
    Property and the Edit panel's widget (objectName); ``metavar`` is how the command line shows it;
    ``option`` (e.g. ``--roi-margin``) makes it a command-line option rather than a positional value
    (a ``flag`` is an option without a value; a ``text`` option takes a string)."""

    name: str
    metavar: str
    kind: str
    label: str = ""
    unit: str = ""
    minimum: float | None = None
    maximum: float | None = None
    default: Any = None
    step: float | None = None
    decimals: int = 1
    option: str | None = None
    choices: tuple[str, ...] = ()
    # a value of a kind only a higher layer knows (an interactive prompt): ``parse(text, image)`` -> the value,
    # raising MedsegError; the recipe calls it before anything runs
    parse: Callable[[str, Any], Any] | None = field(default=None, compare=False, repr=False)

    @property
    def is_setting(self) -> bool:
        """A number or a yes/no the GUI keeps in a Property (a spin box, slider or check box), not a label
        or a mouse input."""
        return self.kind in SETTING_KINDS

    def check(self, value: float, what: str) -> float:
        low = -float("inf") if self.minimum is None else self.minimum
        high = float("inf") if self.maximum is None else self.maximum
        if not low <= value <= high:
            unit = f" {self.unit}" if self.unit else ""
            raise MedsegError(f"{what}: {self.metavar} must be from {low:g} to {high:g}{unit}, got {value:g}")
        return value

    def describe(self, with_default: bool = True) -> str:
        """For help texts: "MM (0-100 mm, default 2)"."""
        if self.choices:
            return f"{self.metavar} ({' or '.join(self.choices)})"
        parts = []
        if self.minimum is not None and self.maximum is not None:
            parts.append(f"{self.minimum:g}-{self.maximum:g}{' ' + self.unit if self.unit else ''}")
        if with_default and self.default is not None and self.kind == "number":
            parts.append(f"default {self.default:g}")
        return f"{self.metavar} ({', '.join(parts)})" if parts else self.metavar


@dataclass(frozen=True)
class Context:
    """What an operation needs besides its values: the paint rules; the index axis (z, y, x) of the view it
    was asked from (interpolation runs across it; the command line's is axial); the HU range a fill by HU
    fills within (the panel's range, also when painting is not limited to it); and the one label an eraser
    may change (None: any unlocked label)."""

    rules: "PaintRules | None" = None
    axis_zyx: int = 0
    hu_range: tuple[float, float] | None = None
    only_label: int | None = None


@dataclass(frozen=True)
class Change:
    """What an operation would do, not yet done (a preview): the voxels it changes, the label-table entries
    it sets (None removes one) and warnings the user should read once it is done. ``revision``: for a change
    computed in another thread than the document's, the document's revision it was computed against
    (:meth:`SegmentationDocument.apply_change` applies it only while the document is still there). ``block``:
    the delta's whole box as it is after the change, when the operation has it (a merge): with a revision that
    still stands, the document copies it in at once instead of scattering the changed voxels."""

    delta: "Delta | None"
    labels: "Mapping[int, Label | None]" = field(default_factory=dict)
    cautions: tuple[str, ...] = ()
    revision: int | None = None
    block: Any = field(default=None, repr=False, compare=False)

    @property
    def count(self) -> int:
        return self.delta.count if self.delta is not None else 0


@dataclass(frozen=True)
class EditOperation:
    """One entry of the catalogue. ``run`` returns a Delta (voxels only) or a Change. ``modifies``/``locks``:
    the label parameters it changes (refused when locked) or locks. ``check(values)`` raises MedsegError for
    values that cannot go together (before a recipe runs anything). A mouse tool has a ``gesture`` (see
    :mod:`medseg.edit.effects`) and a ``shortcut``; ``hover(document, values)`` previews, under the mouse, the 2D region a
    click would fill; ``engine(document)`` gives a prompt tool (gesture "prompts") its model."""

    name: str
    title: str  # the Edit panel's button or tool
    help: str
    parameters: tuple[Parameter, ...]
    run: Callable[["SegmentationDocument", dict, Context], "Delta | Change | None"] = field(repr=False)
    modifies: tuple[str, ...] = ()
    locks: tuple[str, ...] = ()
    gesture: str | None = None
    shortcut: str | None = None
    check: Callable[[dict], None] | None = field(default=None, repr=False)
    hover: Callable[["SegmentationDocument", dict], Any] | None = field(default=None, repr=False)
    # a prompt tool's model (gesture "prompt"): ``engine(document)`` -> a PromptEngine (medseg.edit.prompt_session)
    engine: Callable[["SegmentationDocument"], Any] | None = field(default=None, repr=False)

    @property
    def positional(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.option is None)

    @property
    def settings(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.is_setting)

    @property
    def inputs(self) -> tuple[Parameter, ...]:
        """The values that come from the mouse or from another part of the app, not from the panel."""
        return tuple(p for p in self.parameters if p.kind in INPUT_KINDS)

    def preview(self, document: "SegmentationDocument", values: dict, context: Context = Context()) -> Change:
        """What this operation would change with ``values`` (by parameter name); nothing is written."""
        if self.check is not None:
            self.check(values)
        proposed = self.run(document, values, context)
        return proposed if isinstance(proposed, Change) else Change(proposed)

    def perform(self, document: "SegmentationDocument", values: dict, context: Context = Context(),
                description: str = "", announce: str = "") -> bool:
        """Preview and write the change as one undoable, journalled step (``description`` names it in the
        undo list, ``announce`` in the user's words); False when nothing changed."""
        change = self.preview(document, values, context)
        changed = document.apply(change.delta, description or self.name, change.labels, announce=announce)
        if changed:
            for text in change.cautions:
                document.announce(text, "warning")
        return changed

    def summary(self, values: dict) -> str:
        """The operation with its settings, as the user reads it ("Grow 2 mm")."""
        shown = [f"{values[p.name]:g} {p.unit}".rstrip() for p in self.settings
                 if p.option is None and p.kind == "number" and p.name in values]
        return " ".join([self.title, *shown])


@dataclass(frozen=True)
class Tool:
    """A mouse tool of the Edit panel: an operation with a gesture, or Navigate (the mouse moves the
    crosshair and edits nothing)."""

    name: str
    title: str
    shortcut: str
    help: str
    operation: EditOperation | None = None

    @property
    def gesture(self) -> str | None:
        return self.operation.gesture if self.operation is not None else None


NAVIGATE = Tool("navigate", "Navigate", "N", "the left button moves the crosshair; nothing is edited")


__all__ = ["Change", "Context", "EditOperation", "INPUT_KINDS", "LABEL_KINDS", "NAVIGATE", "Parameter",
           "SETTING_KINDS", "Tool"]
