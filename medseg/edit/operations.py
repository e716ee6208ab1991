"""The catalogue of editing operations: one entry per operation, as 3D Slicer has one class per
Segment Editor effect, mouse tools included.

Each :class:`~medseg.edit.operation.EditOperation` has a name, help text, its parameters (with units,
ranges and defaults) and ``run(document, values, context)``; a mouse tool also has a shortcut and a
gesture. Everything that offers an operation is generated from this table, so names, keys and
parameters cannot drift: the ``medseg edit`` flags and ``--help`` (one ``--NAME`` per operation, its
positional values in order, its settings as options), the batch recipe (:mod:`medseg.edit.recipe`),
the tool controller (one Property per setting, one gesture handler per tool), and the Edit panel (a
tool button with its key per mouse tool, a button per other operation, a widget per setting).

Parameter kinds: ``label`` (an existing label), ``new-label`` (may be created), ``number`` (a setting
with unit and range), ``flag`` (a yes/no setting), ``point`` (LPS mm on the command line, the clicked
voxel in the GUI), ``points`` (a path: ``X,Y,Z;X,Y,Z;…``, the dragged path in the GUI), ``view``
(axial/coronal/sagittal: the view clicked in), ``choice`` (one of ``choices``), and files on the
command line that the GUI takes from the mouse or from a Segment: ``seeds-file``, ``polygon-file``,
``segmentation-file``.

A higher layer adds its own operations with :func:`register` (``medseg.workflows`` adds the
model-backed ones: ``edit`` never imports ``model``). A registered operation is offered everywhere
the built-in ones are: a recipe, the tool controller, and the command line built after it.
"""

from __future__ import annotations

from medseg.edit import operation_runs as runs
from medseg.edit.effects import EFFECTS
from medseg.edit.operation import (
    INPUT_KINDS,
    LABEL_KINDS,
    NAVIGATE,
    Change,
    Context,
    EditOperation,
    Parameter,
    Tool,
)
from medseg.edit.tool_parameters import ConfidenceParameters, GrowParameters, LevelTraceParameters
from medseg.errors import MedsegError

VIEWS = {"sagittal": 0, "coronal": 1, "axial": 2}  # the LPS axis each view looks along
HU_LIMITS = (-32768.0, 32767.0)  # any value a CT voxel can hold


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
POINTS = Parameter("points", "POINTS", "points", "the dragged path")
VIEW = Parameter("view", "VIEW", "view", "the view clicked in")
POLYGON = Parameter("polygon", "POLYGON", "polygon-file", "the outline drawn")
SEEDS = Parameter("seeds", "SEEDS", "seeds-file", "the seeds painted")
RADIUS = Parameter("radius_mm", "MM", "number", "Radius", "mm", 0.1, 100.0, 5.0, 0.5, option="--radius")
SPHERE = Parameter("sphere", "", "flag", "3D sphere (else a disc on the view)", default=False, option="--sphere")
FILL_3D = Parameter("fill_3d", "", "flag", "Fill in 3D (else on the view's slice)", default=False,
                    option="--fill-3d")
FILL_BY_HU = Parameter("fill_by_hu", "", "flag", "Fill within the HU range (else the clicked label's region)",
                       default=False, option="--fill-by-hu")
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
SEGMENTATION = Parameter("segmentation", "SEGMENTATION", "segmentation-file", "the segmentation to merge")
MERGE_MODE = Parameter("mode", "MODE", "choice", "how it meets the labels here", choices=("replace", "add"))
SCISSORS_FILE_HELP = ('a JSON object: {"view": "axial"|"coronal"|"sagittal", "points_lps_mm": [[x, y, z], ...], '
                      '"operation": "erase-inside"|"erase-outside"|"fill-inside"|"fill-outside", "slab_mm": null|MM, '
                      '"label": LABEL (to fill)}')
PATH_HELP = "POINTS are X,Y,Z positions in LPS mm joined by ';'"

BUILT_IN = (
    EditOperation("brush", "Brush", f"paint LABEL along the path POINTS, discs of --radius on the VIEW's slice "
                  f"(or spheres with --sphere); {PATH_HELP}", (POINTS, VIEW, NEW_LABEL, RADIUS, SPHERE),
                  runs.stroke(erase=False), gesture="stroke", shortcut="B"),
    EditOperation("erase", "Eraser", f"erase every unlocked label along the path POINTS, discs of --radius on the "
                  f"VIEW's slice (or spheres with --sphere); {PATH_HELP}", (POINTS, VIEW, RADIUS, SPHERE),
                  runs.stroke(erase=True), gesture="stroke", shortcut="E"),
    EditOperation("fill", "Fill", "fill with LABEL the region around the point X,Y,Z (LPS mm) that carries the "
                  "label found there, on the VIEW's slice (in 3D with --fill-3d); with --fill-by-hu the region "
                  "whose HU lies in --hu-mask", (POINT, VIEW, NEW_LABEL, FILL_3D, FILL_BY_HU), runs.fill,
                  gesture="click", shortcut="F"),
    EditOperation("keep-island", "Keep island", "keep only the island under the point X,Y,Z (LPS mm) of the label "
                  "found there; its other islands go", (POINT,), runs.keep_island, gesture="click", shortcut="K"),
    EditOperation("threshold", "Threshold", "paint LABEL where LOW <= HU <= HIGH (locks respected)",
                  (HU_LOW, HU_HIGH, NEW_LABEL), runs.threshold, check=runs.check_threshold),
    EditOperation("keep-largest", "Keep largest", "keep only the largest 26-connected island of LABEL",
                  (LABEL,), runs.tool("keep_largest", "label"), modifies=("label",)),
    EditOperation("remove-smaller", "Remove small", "remove islands of LABEL smaller than ML millilitres",
                  (LABEL, ISLAND), runs.tool("remove_smaller", "label", "island_ml"), modifies=("label",)),
    EditOperation("grow", "Grow", "add every voxel whose centre lies within MM of LABEL (anisotropy-aware)",
                  (LABEL, MARGIN), runs.tool("grow", "label", "margin_mm", with_rules=True, image=True)),
    EditOperation("shrink", "Shrink", "remove every voxel of LABEL within MM of the outside",
                  (LABEL, MARGIN), runs.tool("shrink", "label", "margin_mm"), modifies=("label",)),
    EditOperation("smooth", "Smooth", "Gaussian-smooth LABEL with sigma MM",
                  (LABEL, SMOOTH), runs.tool("smooth", "label", "smooth_mm", with_rules=True, image=True),
                  modifies=("label",)),
    EditOperation("fill-holes", "Fill holes", "fill background that LABEL encloses (3D)",
                  (LABEL,), runs.tool("fill_holes", "label")),
    EditOperation("interpolate", "Interpolate", "fill empty slices between slices where LABEL is drawn (axial on the "
                  "command line; across the view last worked in, in the app)", (LABEL,), runs.interpolate),
    EditOperation("union", "Union", "B's voxels join A", (A, B), runs.logical("union"), modifies=("b",),
                  check=runs.check_two_labels),
    EditOperation("intersect", "Intersect", "keep A only inside B's region (B, holes filled)", (A, B),
                  runs.logical("intersect"), modifies=("a",), check=runs.check_two_labels),
    EditOperation("subtract", "Subtract", "remove A inside B's region (B, holes filled)", (A, B),
                  runs.logical("subtract"), modifies=("a",), check=runs.check_two_labels),
    EditOperation("lock", "Locked", "protect LABEL from later operations", (LABEL,), runs.lock, locks=("label",)),
    EditOperation("grow-from-seeds", "Grow from seeds",
                  "grow the labels painted in SEEDS (a label image on the image's grid; 0 = no seed) into the image, "
                  "competing (GrowCut); only they change, within their bounding box plus --roi-margin",
                  (SEEDS, ROI, LOCALITY), runs.grow_from_seeds, gesture="seeds", shortcut="G"),
    EditOperation("confidence-connected", "Click 3D",
                  "paint LABEL over the connected region around the point X,Y,Z (LPS mm) within mean +- K standard "
                  "deviations of its neighbourhood, iterated (ITK ConfidenceConnected)",
                  (POINT, CONFIDENCE_K, NEW_LABEL), runs.confidence, gesture="click", shortcut="C"),
    EditOperation("level-trace", "Level trace",
                  "paint LABEL over the region around the point X,Y,Z (LPS mm) on the VIEW's slice (axial, coronal or "
                  "sagittal) whose voxels lie within HU of the point's",
                  (POINT, VIEW, TOLERANCE, NEW_LABEL), runs.level_trace, gesture="click", shortcut="L",
                  hover=runs.level_trace_preview),
    EditOperation("scissors", "Scissors", "erase or fill inside/outside an outline through the volume or a slab; "
                  "POLYGON is " + SCISSORS_FILE_HELP, (POLYGON,), runs.scissors, gesture="outline", shortcut="X"),
    EditOperation("lasso", "Lasso", "fill LABEL inside an outline on one slice (the slice through the outline's "
                  "points); POLYGON as for --scissors (its operation and slab are not used)",
                  (POLYGON, NEW_LABEL), runs.lasso, gesture="outline", shortcut="O"),
    EditOperation("merge-segmentation", "Merge segmentation",
                  "merge SEGMENTATION (a label map with its .labels.json sidecar, or a DICOM SEG, placed on the "
                  "image) into the label map: MODE replace (every unlocked voxel takes it) or add (only its labels "
                  "not here yet, only where there is no label); locked labels never change (as --segment merges a "
                  "model's result)", (SEGMENTATION, MERGE_MODE), runs.merge_segmentation),
)



def _check_gesture(operation: EditOperation) -> None:
    """A mouse tool's gesture names a registered effect (medseg.edit.effects), the object that runs it."""
    if operation.gesture is not None and operation.gesture not in EFFECTS:
        raise MedsegError(f"{operation.name}: unknown gesture {operation.gesture!r} (known: {', '.join(EFFECTS)})")


for _op in BUILT_IN:
    _check_gesture(_op)
CATALOGUE: dict[str, EditOperation] = {op.name: op for op in BUILT_IN}


def register(operation: EditOperation) -> EditOperation:
    """Add an operation to the catalogue: how a higher layer (``medseg.workflows``) adds model-backed ones,
    which are then previewable (``preview``), undoable and journalled (``perform``) like the built-in ones.
    Refused when its name, its shortcut or one of its settings' names is already taken otherwise."""
    if operation.name in CATALOGUE:
        raise MedsegError(f"the edit catalogue already has an operation named {operation.name!r}")
    _check_gesture(operation)
    if operation.shortcut is not None:
        used = {tool.shortcut.upper(): name for name, tool in tools().items()}
        if operation.shortcut.upper() in used:
            raise MedsegError(f"{operation.name}: the key {operation.shortcut} is the {used[operation.shortcut.upper()]}"
                              " tool's already")
        if operation.gesture is None:
            raise MedsegError(f"{operation.name}: a shortcut selects a mouse tool; give it a gesture")
    known = settings()
    for parameter in operation.settings:
        if parameter.name in known and known[parameter.name] != parameter:
            raise MedsegError(f"{operation.name}: the setting {parameter.name!r} is declared differently by "
                              "another operation")
    CATALOGUE[operation.name] = operation
    return operation


def unregister(name: str) -> None:
    """Take a registered operation out again (a plug-in unloaded; tests). The built-in ones stay."""
    if any(op.name == name for op in BUILT_IN):
        raise MedsegError(f"{name!r} is a built-in operation")
    CATALOGUE.pop(name, None)


def tools() -> dict[str, Tool]:
    """The Edit panel's mouse tools, in order: Navigate, then every operation with a gesture."""
    found = {NAVIGATE.name: NAVIGATE}
    for op in CATALOGUE.values():
        if op.gesture is not None:
            found[op.name] = Tool(op.name, op.title, op.shortcut or "", op.help, op)
    return found


def merge_segmentation(document, incoming, mode: str = "replace", description: str = "Segment") -> bool:
    """Merge a segmentation already on the image grid (a :class:`~medseg.edit.merge.Segmentation`) through the
    ``merge-segmentation`` operation: one undoable, journalled step named ``description``; False when nothing changed."""
    values = {"segmentation": incoming, "mode": mode}
    return CATALOGUE["merge-segmentation"].perform(document, values, description=description)


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


__all__ = ["CATALOGUE", "Change", "Context", "EditOperation", "INPUT_KINDS", "LABEL_KINDS", "Parameter",
           "SCISSORS_FILE_HELP", "Tool", "VIEWS", "merge_segmentation", "options", "register", "settings", "tools", "unregister"]
