"""The catalogue of editing operations: one entry per operation, as 3D Slicer has one class per
Segment Editor effect.

Each :class:`EditOperation` has a name, help text, its parameters (with units, ranges and
defaults) and ``apply(document, values, context) -> Delta``. Everything that offers an
operation is generated from this list, so the names and parameters cannot drift: the
``medseg edit`` flags and ``--help`` (one ``--NAME`` per operation, its positional values in
order, its settings as options), the batch recipe (:mod:`medseg.edit.recipe`), the tool
controller (one Property per setting, ``run_operation(name)``) and the Edit panel (a button
per operation, or the interactive tool that performs it, and a widget per setting).

Parameter kinds: ``label`` (an existing label), ``new-label`` (may be created), ``number``
(a setting with unit and range), ``point`` (LPS mm on the command line, the clicked voxel in
the GUI), ``view`` (axial/coronal/sagittal: the view clicked in), ``seeds-file`` and
``polygon-file`` (files on the command line, painted or drawn with the mouse in the GUI).

This module imports no image-processing library (``medseg --help`` builds the CLI from it);
each ``apply`` loads the tool it runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable

from medseg.edit.tool_parameters import (
    ConfidenceParameters,
    GrowParameters,
    LevelTraceParameters,
)
from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.edit.delta import Delta
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.tools.rules import PaintRules

LABEL_KINDS = ("label", "new-label")
INPUT_KINDS = ("point", "view", "seeds-file", "polygon-file")  # the GUI takes these from the mouse
VIEWS = {"sagittal": 0, "coronal": 1, "axial": 2}  # the LPS axis each view looks along
HU_LIMITS = (-32768.0, 32767.0)  # any value a CT voxel can hold


@dataclass(frozen=True)
class Parameter:
    """One value an operation takes. ``name`` is its one name: the recipe's, the tool controller's
    Property and the Edit panel's widget (objectName); ``metavar`` is how the command line shows it;
    ``option`` (e.g. ``--roi-margin``) makes it a command-line option rather than a positional value."""

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

    @property
    def is_setting(self) -> bool:
        """A number the GUI keeps in a Property (a spin box or slider), not a label or a mouse input."""
        return self.kind == "number"

    def check(self, value: float, what: str) -> float:
        low = -float("inf") if self.minimum is None else self.minimum
        high = float("inf") if self.maximum is None else self.maximum
        if not low <= value <= high:
            unit = f" {self.unit}" if self.unit else ""
            raise MedsegError(f"{what}: {self.metavar} must be from {low:g} to {high:g}{unit}, got {value:g}")
        return value

    def describe(self, with_default: bool = True) -> str:
        """For help texts: "MM (0-100 mm, default 2)"."""
        parts = []
        if self.minimum is not None and self.maximum is not None:
            parts.append(f"{self.minimum:g}-{self.maximum:g}{' ' + self.unit if self.unit else ''}")
        if with_default and self.default is not None:
            parts.append(f"default {self.default:g}")
        return f"{self.metavar} ({', '.join(parts)})" if parts else self.metavar


@dataclass(frozen=True)
class Context:
    """What an operation needs besides its values: the paint rules, and the index axis (z, y, x) of
    the view it was asked from (interpolation runs across it; the command line's is axial)."""

    rules: "PaintRules | None" = None
    axis_zyx: int = 0


@dataclass(frozen=True)
class EditOperation:
    name: str
    title: str  # the Edit panel's button
    help: str
    parameters: tuple[Parameter, ...]
    run: Callable[["SegmentationDocument", dict, Context], "Delta | None"] = field(repr=False)
    modifies: tuple[str, ...] = ()  # the label parameters it changes: refused when locked
    tool: str | None = None  # the Edit panel's interactive tool that performs it (its inputs come from the mouse)

    @property
    def positional(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.option is None)

    @property
    def settings(self) -> tuple[Parameter, ...]:
        return tuple(p for p in self.parameters if p.is_setting)

    def apply(self, document: "SegmentationDocument", values: dict, context: Context = Context()) -> "Delta | None":
        """The change this operation would make with ``values`` (by parameter name), as a delta for
        ``document.apply``; None when nothing would change."""
        return self.run(document, values, context)

    def summary(self, values: dict) -> str:
        """The operation with its settings, as the user reads it ("Grow 2 mm")."""
        shown = [f"{values[p.name]:g} {p.unit}".rstrip() for p in self.settings if p.option is None and p.name in values]
        return " ".join([self.title, *shown])


def _rules(context: Context):
    from medseg.edit.tools.rules import PaintRules

    return context.rules or PaintRules()


def _label_map(document):
    if document.label_map is None:
        raise MedsegError("there is no segmentation yet; draw or segment first")
    return document.label_map


def _threshold(doc, v, c):
    from medseg.edit import tools

    if v["hu_low"] > v["hu_high"]:
        raise MedsegError("the threshold range is empty (LOW > HIGH)")
    return tools.threshold(_label_map(doc), doc.volume, v["hu_low"], v["hu_high"], int(v["label"]), _rules(c))


def _tool(name: str, *keys: str, rules: bool = False, image: bool = False):
    """apply for a tool taking (label_map, *values[keys], [rules], [image])."""

    def run(doc, v, c):
        from medseg.edit import tools

        args = [v[k] for k in keys]
        if rules:
            args.append(_rules(c))
        if image:
            args.append(doc.volume)
        return getattr(tools, name)(_label_map(doc), *args)

    return run


def _interpolate(doc, v, c):
    from medseg.edit import tools

    return tools.interpolate_slices(_label_map(doc), v["label"], c.axis_zyx)


def _logical(name: str):
    def run(doc, v, c):
        from medseg.edit import tools

        if v["a"] == v["b"]:
            raise MedsegError(f"{name}: A and B are the same label")
        extra = (_rules(c),) if name == "union" else ()
        return getattr(tools, name)(_label_map(doc), v["a"], v["b"], *extra)

    return run


def _lock(doc, v, c):
    """Not a voxel change: the label table's lock (undoable through the document)."""
    if int(v["label"]) in doc.labels:
        doc.set_label_locked(int(v["label"]), True)
    return None


def _grow_from_seeds(doc, v, c):
    from medseg.edit import tools

    parameters = GrowParameters(roi_margin_mm=v.get("roi_margin_mm", GrowParameters.roi_margin_mm),
                                seed_locality=v.get("seed_locality", GrowParameters.seed_locality))
    return tools.grow_from_seeds(_label_map(doc), doc.volume, v["seeds"], parameters, _rules(c))


def _confidence(doc, v, c):
    from medseg.edit import tools

    return tools.confidence_connected(_label_map(doc), doc.volume, v["point"], int(v["label"]),
                                      ConfidenceParameters(k=v["confidence_k"]), _rules(c))


def _level_trace(doc, v, c):
    from medseg.edit import tools

    return tools.level_trace(_label_map(doc), doc.volume, v["point"], v["view"], int(v["label"]),
                             LevelTraceParameters(tolerance_hu=v["trace_tolerance_hu"]), _rules(c))


def _scissors(doc, v, c):
    from medseg.edit import tools

    outline = v["polygon"]
    return tools.scissors(_label_map(doc), outline["points"], outline["axis"], outline["parameters"],
                          outline["centre"], outline["value"], _rules(c), doc.volume,
                          only_value=outline.get("only_value"))


def _lasso(doc, v, c):
    from medseg.edit import tools

    outline = v["polygon"]
    return tools.lasso(_label_map(doc), outline["points"], outline["axis"], outline["centre"], int(v["label"]),
                       _rules(c), doc.volume)


def _range(parameters, name: str) -> tuple[float, float]:
    low, high, _unit = parameters.RANGES[name]
    return float(low), float(high)


LABEL = Parameter("label", "LABEL", "label", "Label")
NEW_LABEL = Parameter("label", "LABEL", "new-label", "Label")
A, B = Parameter("a", "A", "label", "Label"), Parameter("b", "B", "label", "with")
MARGIN = Parameter("margin_mm", "MM", "number", "Margin", "mm", 0.0, 100.0, 2.0, 0.5)
ISLAND = Parameter("island_ml", "ML", "number", "Islands under", "ml", 0.0, 10000.0, 1.0, 0.5, decimals=2)
SMOOTH = Parameter("smooth_mm", "MM", "number", "Smoothing σ", "mm", 0.1, 20.0, 1.5, 0.5)
HU_LOW = Parameter("hu_low", "LOW", "number", "from", "HU", *HU_LIMITS, -100.0, 10, decimals=0)
HU_HIGH = Parameter("hu_high", "HIGH", "number", "to", "HU", *HU_LIMITS, 200.0, 10, decimals=0)
POINT = Parameter("point", "X,Y,Z", "point", "the clicked voxel")
VIEW = Parameter("view", "VIEW", "view", "the view clicked in")
POLYGON = Parameter("polygon", "POLYGON", "polygon-file", "the outline drawn")
SEEDS = Parameter("seeds", "SEEDS", "seeds-file", "the seeds painted")
ROI = Parameter("roi_margin_mm", "MM", "number", "Region of interest: the seeds' box plus", "mm",
                *_range(GrowParameters, "roi_margin_mm"), GrowParameters.roi_margin_mm, 5.0, option="--roi-margin")
LOCALITY = Parameter("seed_locality", "HU_PER_MM", "number", "Seed locality (how far a seed reaches)", "HU/mm",
                     *_range(GrowParameters, "seed_locality"), GrowParameters.seed_locality, 0.5,
                     option="--seed-locality")
CONFIDENCE_K = Parameter("confidence_k", "K", "number", "Click 3D: mean ± k·SD", "",
                         *_range(ConfidenceParameters, "k"), ConfidenceParameters.k, 0.1)
TOLERANCE = Parameter("trace_tolerance_hu", "HU", "number", "Level trace: within ± of the voxel under the mouse", "HU",
                      *_range(LevelTraceParameters, "tolerance_hu"), LevelTraceParameters.tolerance_hu, 10,
                      decimals=0)
SCISSORS_FILE_HELP = ('a JSON object: {"view": "axial"|"coronal"|"sagittal", "points_lps_mm": [[x, y, z], ...], '
                      '"operation": "erase-inside"|"erase-outside"|"fill-inside"|"fill-outside", "slab_mm": null|MM, '
                      '"label": LABEL (to fill)}')

CATALOGUE: dict[str, EditOperation] = {op.name: op for op in (
    EditOperation("threshold", "Threshold", "paint LABEL where LOW <= HU <= HIGH (locks respected)",
                  (HU_LOW, HU_HIGH, NEW_LABEL), _threshold),
    EditOperation("keep-largest", "Keep largest", "keep only the largest 26-connected island of LABEL",
                  (LABEL,), _tool("keep_largest", "label"), modifies=("label",)),
    EditOperation("remove-smaller", "Remove small", "remove islands of LABEL smaller than ML millilitres",
                  (LABEL, ISLAND), _tool("remove_smaller", "label", "island_ml"), modifies=("label",)),
    EditOperation("grow", "Grow", "add every voxel whose centre lies within MM of LABEL (anisotropy-aware)",
                  (LABEL, MARGIN), _tool("grow", "label", "margin_mm", rules=True, image=True)),
    EditOperation("shrink", "Shrink", "remove every voxel of LABEL within MM of the outside",
                  (LABEL, MARGIN), _tool("shrink", "label", "margin_mm"), modifies=("label",)),
    EditOperation("smooth", "Smooth", "Gaussian-smooth LABEL with sigma MM",
                  (LABEL, SMOOTH), _tool("smooth", "label", "smooth_mm", rules=True, image=True), modifies=("label",)),
    EditOperation("fill-holes", "Fill holes", "fill background that LABEL encloses (3D)",
                  (LABEL,), _tool("fill_holes", "label")),
    EditOperation("interpolate", "Interpolate", "fill empty slices between slices where LABEL is drawn (axial on the "
                  "command line; across the view last worked in, in the app)", (LABEL,), _interpolate),
    EditOperation("union", "Union", "B's voxels join A", (A, B), _logical("union"), modifies=("b",)),
    EditOperation("intersect", "Intersect", "keep A only inside B's region (B, holes filled)", (A, B),
                  _logical("intersect"), modifies=("a",)),
    EditOperation("subtract", "Subtract", "remove A inside B's region (B, holes filled)", (A, B),
                  _logical("subtract"), modifies=("a",)),
    EditOperation("lock", "Locked", "protect LABEL from later operations", (LABEL,), _lock),
    EditOperation("grow-from-seeds", "Grow from seeds",
                  "grow the labels painted in SEEDS (a label image on the image's grid; 0 = no seed) into the image, "
                  "competing (GrowCut); only they change, within their bounding box plus --roi-margin",
                  (SEEDS, ROI, LOCALITY), _grow_from_seeds, tool="grow_seeds"),
    EditOperation("confidence-connected", "Click 3D",
                  "paint LABEL over the connected region around the point X,Y,Z (LPS mm) within mean +- K standard "
                  "deviations of its neighbourhood, iterated (ITK ConfidenceConnected)",
                  (POINT, CONFIDENCE_K, NEW_LABEL), _confidence, tool="confidence"),
    EditOperation("level-trace", "Level trace",
                  "paint LABEL over the region around the point X,Y,Z (LPS mm) on the VIEW's slice (axial, coronal or "
                  "sagittal) whose voxels lie within HU of the point's",
                  (POINT, VIEW, TOLERANCE, NEW_LABEL), _level_trace, tool="level_trace"),
    EditOperation("scissors", "Scissors", "erase or fill inside/outside an outline through the volume or a slab; "
                  "POLYGON is " + SCISSORS_FILE_HELP, (POLYGON,), _scissors, tool="scissors"),
    EditOperation("lasso", "Lasso", "fill LABEL inside an outline on one slice (the slice through the outline's "
                  "points); POLYGON as for --scissors (its operation and slab are not used)",
                  (POLYGON, NEW_LABEL), _lasso, tool="lasso"),
)}


def options() -> dict[str, Parameter]:
    """The settings given as command-line options, by option (shared by the operations that take them)."""
    found: dict[str, Parameter] = {}
    for op in CATALOGUE.values():
        for p in op.parameters:
            if p.option is not None:
                found.setdefault(p.option, p)
    return found


def settings() -> dict[str, Parameter]:
    """Every setting by name (one Property each in the tool controller, one widget in the Edit panel)."""
    found: dict[str, Parameter] = {}
    for op in CATALOGUE.values():
        for p in op.settings:
            if found.setdefault(p.name, p) != p:
                raise AssertionError(f"two declarations of the setting {p.name}")  # pragma: no cover
    return found


__all__ = ["CATALOGUE", "Context", "EditOperation", "Parameter", "VIEWS", "options", "settings",
           "SCISSORS_FILE_HELP"]
