"""The active tool and its options; views forward mouse presses, drags and releases here.

Qt-free, so a test drives the same brush a user drags: ``press(xyz, plane_axis)``,
``drag(xyz)``, ``release()`` with continuous voxel positions (x, y, z) and the index
axis the view looks along. Ctrl-click picks the label under the mouse as the active one
(whatever the tool). Options are :class:`~medseg.edit.properties.Property` objects the
GUI binds to widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

import numpy as np

from medseg.edit import tools
from medseg.edit.events import Event
from medseg.edit.grow_session import GrowSession
from medseg.edit.properties import Property
from medseg.edit.tools import PaintRules
from medseg.edit.operations import CATALOGUE, Context, EditOperation, Parameter, settings
from medseg.edit.tool_parameters import SCISSORS_OPERATIONS, GrowParameters, LevelTraceParameters, ScissorsParameters
from medseg.edit.tools.click_region import level_trace_region
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED
from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.edit.document import SegmentationDocument


class ActiveLabel(Protocol):
    """What the controller needs of the view state (which builds it): the label the tools paint."""

    active_label: int

    def pick_label_at(self, xyz: tuple[int, int, int]) -> int | None: ...

TOOLS = ("navigate", "brush", "eraser", "fill", "keep_island", "grow_seeds", "level_trace", "confidence", "scissors",
         "lasso")
TOOL_NAMES = {"navigate": "Navigate", "brush": "Brush", "eraser": "Eraser", "fill": "Fill", "keep_island": "Keep island",
              "grow_seeds": "Grow seeds", "level_trace": "Level trace", "confidence": "Click 3D",
              "scissors": "Scissors", "lasso": "Lasso"}
SEED_KINDS = ("structure", "background", "erase")
CLICK_VOXELS = 2.0  # a press-release that moved less than this is a click (scissors: a polygon vertex)
CLOSE_VOXELS = 4.0  # a click this close to a polygon's first vertex closes it


def _extent_voxels(points) -> float:
    points = np.asarray(points, dtype=float)
    return float(np.max(points.max(axis=0) - points.min(axis=0))) if len(points) else 0.0


class ToolController:
    """The active tool and its options, working on ``document`` for the label ``view.active_label``."""

    def __init__(self, document: "SegmentationDocument", view: ActiveLabel) -> None:
        self.document = document
        self.view = view
        self.tool = Property("navigate", choices=TOOLS, label="Tool")
        self.radius_mm = Property(5.0, 0.1, 100.0, label="Radius", unit="mm", step=0.5)
        self.sphere = Property(False, label="3D sphere (else a disc on the view)")
        self.hu_masked = Property(False, label="Only where HU in")
        self.only_background = Property(False, label="Paint only over background")
        self.eraser_active_only = Property(False, label="Erase only the active label")
        self.fill_3d = Property(False, label="Fill in 3D (else on the view's slice)")
        self.fill_by_hu = Property(False, label="Fill within the HU range (else the clicked label's region)")
        # one Property per setting of the operation catalogue (its name, unit, range and default)
        self.settings: dict[str, Property] = {name: _property(p) for name, p in settings().items()}
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
        for prop in (self.seed_locality, self.roi_margin_mm, self.existing_seeds):
            prop.changed.connect(self._grow_parameters_changed)
        self.tool.changed.connect(self._tool_changed)
        self._polygon_open = False  # scissors/lasso: clicks are adding vertices to self.outline
        self._last: np.ndarray | None = None
        self._plane_axis: int | None = None
        # the HU range stays editable with the mask off: it is also the Threshold operation's range

    # --- rules ---------------------------------------------------------------------------
    def rules(self) -> PaintRules:
        hu = None
        if self.hu_masked.value:
            low, high = sorted((float(self.hu_low.value), float(self.hu_high.value)))
            hu = (low, high)
        return PaintRules(hu_range=hu, overwrite="background" if self.only_background.value else "unlocked")

    @property
    def active(self) -> str:
        return str(self.tool.value)

    def wants_mouse(self) -> bool:
        return self.active != "navigate"

    # --- mouse ---------------------------------------------------------------------------
    def press(self, xyz: tuple[float, float, float], plane_axis_xyz: int, ctrl: bool = False) -> bool:
        """A left press at continuous voxel ``xyz`` in a view looking along index axis ``plane_axis_xyz``.
        Returns True when the tool used it (the view then does not move the crosshair)."""
        doc = self.document
        if doc.volume is None:
            return False
        voxel = tuple(int(round(v)) for v in xyz)
        if ctrl:
            self.view.pick_label_at(voxel)  # type: ignore[arg-type]
            return True
        if not self.wants_mouse():
            return False
        zyx = np.asarray(xyz[::-1], dtype=float)
        plane = 2 - int(plane_axis_xyz)
        self._plane_axis = plane
        seed = tuple(int(round(v)) for v in zyx)
        doc.new_label_map()
        lm = doc.label_map
        assert lm is not None
        if self.active in ("brush", "eraser"):
            self._last = zyx
            self._paint([zyx])
        elif self.active == "grow_seeds":
            self._last = zyx
            self._paint_seeds([zyx])
        elif self.active in ("scissors", "lasso"):
            if self._polygon_open and self.outline is not None and self.outline[0] == plane:
                return self._polygon_click(zyx)
            self._polygon_open = False
            self._last = zyx
            self.outline = (plane, [zyx])
            self.outline_changed.emit()
        elif self.active == "level_trace":
            self._apply(CATALOGUE["level-trace"], {"point": seed, "view": plane})
        elif self.active == "confidence":
            self._apply(CATALOGUE["confidence-connected"], {"point": seed})
        elif self.active == "fill":
            self._fill(seed, plane)
        elif self.active == "keep_island":
            try:
                doc.apply(tools.keep_clicked(lm, seed), "keep island", announce="Keep island")
            except MedsegError as error:
                doc.announce(f"Keep island: {error.message}.", "warning")  # background or a locked label
        return True

    def _fill(self, seed: tuple[int, ...], plane: int) -> None:
        doc = self.document
        lm = doc.label_map
        hu = self.rules().hu_range if self.fill_by_hu.value else None
        if self.fill_by_hu.value and hu is None:
            hu = (float(self.hu_low.value), float(self.hu_high.value))
        in_plane = not self.fill_3d.value
        what = "Fill" if in_plane else "Fill in 3D"
        if hu is not None and doc.volume is not None:
            clicked = float(doc.volume.array[seed])
            if not hu[0] <= clicked <= hu[1]:  # the region would be empty: say why, don't fail silently
                doc.announce(f"{what}: the clicked voxel is {clicked:.0f} HU, outside the range {hu[0]:.0f} to "
                                f"{hu[1]:.0f} HU, so nothing was filled.", "warning")
                return
        clicked_background = int(lm.array[seed]) == 0
        delta = tools.flood_fill(lm, seed, self.view.active_label, self.rules(), doc.volume, hu_range=hu,
                                 plane_axis=plane if in_plane else None)
        if doc.apply(delta, "fill", announce=what) and clicked_background and hu is None and \
                _touches_edge(delta.box, lm.shape_zyx, plane if in_plane else None):
            doc.announce(f"{what} reached the edge of the image: it filled the background around the patient "
                            f"({delta.count * doc.voxel_ml():.1f} ml). Ctrl+Z undoes it; to fill inside a structure, "
                            "click inside its outline or use 'Fill by HU range'.", "warning")
        return True

    def drag(self, xyz: tuple[float, float, float]) -> None:
        if self._last is None:
            return
        zyx = np.asarray(xyz[::-1], dtype=float)
        if self._plane_axis is not None:
            zyx[self._plane_axis] = self._last[self._plane_axis]  # a drag stays on the slice it began on
        if self.active == "grow_seeds":
            self._paint_seeds([self._last, zyx])
        elif self.active in ("scissors", "lasso") and self.outline is not None:
            self.outline[1].append(zyx)
            self.outline_changed.emit()
        else:
            self._paint([self._last, zyx])
        self._last = zyx

    def release(self) -> None:
        if self._last is None:
            return
        self._last = None
        if self.active in ("scissors", "lasso"):
            if self.outline is not None and _extent_voxels(self.outline[1]) < CLICK_VOXELS:
                self.outline = (self.outline[0], self.outline[1][:1])  # a click: a polygon's first vertex
                self._polygon_open = True
            else:
                self._cut()
        elif self.active == "grow_seeds" and self.grow is not None and self.grow.pending():
            self._grow_compute(self.grow)  # one new preview per stroke, computed off the GUI thread in the app
        elif self.active in ("brush", "eraser"):
            self.document.end_stroke("erase" if self.active == "eraser" else "brush")

    def hover(self, xyz: tuple[int, int, int] | None, plane_axis_xyz: int) -> None:
        """The mouse moved over a view (no button): level tracing shows the region it would fill."""
        doc = self.document
        if self.active != "level_trace" or xyz is None or doc.volume is None:
            if self.trace is not None:
                self.trace = None
                self.trace_changed.emit()
            return
        seed = tuple(int(v) for v in xyz[::-1])
        plane = 2 - int(plane_axis_xyz)
        region = level_trace_region(doc.volume, seed, plane, self._trace_parameters())
        self.trace = (plane, seed[plane], region)
        self.trace_changed.emit()

    def _trace_parameters(self) -> LevelTraceParameters:
        return LevelTraceParameters(float(self.trace_tolerance_hu.value))

    # --- scissors and lasso ----------------------------------------------------------------------
    def _polygon_click(self, zyx: np.ndarray) -> bool:
        """A click while a polygon is open: a new vertex, or, near the first vertex, close it and cut."""
        assert self.outline is not None
        points = self.outline[1]
        if len(points) >= 3 and _extent_voxels([points[0], zyx]) < CLOSE_VOXELS:
            self._polygon_open = False
            self._cut()
        else:
            points.append(zyx)
            self.outline_changed.emit()
        return True

    @property
    def polygon_open(self) -> bool:
        """A scissors / lasso polygon is being clicked vertex by vertex."""
        return self._polygon_open

    def cancel_outline(self) -> None:
        """Escape: drop the outline being drawn."""
        self._polygon_open, self._last = False, None
        if self.outline is not None:
            self.outline = None
            self.outline_changed.emit()

    def _cut(self) -> None:
        outline, self.outline = self.outline, None
        self.outline_changed.emit()
        doc = self.document
        if outline is None or len(outline[1]) < 3 or doc.label_map is None:
            return
        axis, points = outline
        plane_axes = [a for a in range(3) if a != axis]
        points_ij = np.asarray(points)[:, plane_axes]
        centre = int(round(points[0][axis]))
        polygon = {"points": points_ij, "axis": axis, "centre": centre, "value": self.view.active_label}
        if self.active == "lasso":
            self._apply(CATALOGUE["lasso"], {"polygon": polygon})
            return
        polygon["parameters"] = ScissorsParameters(str(self.scissors_operation.value),
                                                   float(self.slab_mm.value) if self.scissors_slab.value else None)
        polygon["only_value"] = self.view.active_label if self.eraser_active_only.value else None
        self._apply(CATALOGUE["scissors"], {"polygon": polygon})

    # --- grow from seeds ----------------------------------------------------------------------------
    def grow_parameters(self) -> GrowParameters:
        return GrowParameters(roi_margin_mm=float(self.roi_margin_mm.value),
                              seed_locality=float(self.seed_locality.value),
                              use_existing_labels=bool(self.existing_seeds.value))

    def _paint_seeds(self, points) -> None:
        doc = self.document
        if self.grow is None:
            self.grow = GrowSession(doc, self.grow_parameters(), self.rules())
        kind = self.seed_kind.value
        value = None if kind == "erase" else (BACKGROUND_SEED if kind == "background" else self.view.active_label)
        plane = None if self.sphere.value else self._plane_axis
        box = self.grow.paint(points, float(self.radius_mm.value), value, plane)
        if box is not None:
            self.grow_changed.emit(box)  # the seeds show at once; the preview follows when the stroke ends

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

    def _tool_changed(self, _name=None) -> None:
        self.cancel_outline()
        if self.trace is not None and self.active != "level_trace":
            self.trace = None
            self.trace_changed.emit()

    def _paint(self, points) -> None:
        doc = self.document
        lm = doc.label_map
        assert lm is not None
        erase = self.active == "eraser"
        only = self.view.active_label if erase and self.eraser_active_only.value else None
        plane = None if self.sphere.value else self._plane_axis
        delta = tools.stroke(lm, points, float(self.radius_mm.value), self.view.active_label, self.rules(), doc.volume,
                             plane, erase=erase, only_value=only)
        doc.stroke_apply(delta)

    # --- operations of the catalogue ----------------------------------------------------------
    def operation_values(self, op: EditOperation, inputs: dict | None = None) -> dict:
        """The values an operation runs with here: the active label, the second label box, the settings'
        Properties, and ``inputs`` from the mouse (point, view, outline, seeds)."""
        values = dict(inputs or {})
        labels = [p for p in op.parameters if p.kind in ("label", "new-label")]
        for parameter, value in zip(labels, (self.view.active_label, int(self.other_label.value))):
            values.setdefault(parameter.name, value)
        for parameter in op.settings:
            values.setdefault(parameter.name, float(self.settings[parameter.name].value))
        return values

    def _apply(self, op: EditOperation, inputs: dict | None = None) -> bool:
        doc = self.document
        values = self.operation_values(op, inputs)
        delta = op.apply(doc, values, Context(rules=self.rules(), axis_zyx=self._plane_axis or 0))
        entry = doc.labels.get(self.view.active_label)
        target = entry.name if entry else f"label {self.view.active_label}"
        return doc.apply(delta, f"{op.name} {target}", announce=f"{self.operation_text(op.name)} on {target}")

    def run_operation(self, name: str) -> bool:
        """Run a catalogue operation (by its catalogue name) on the active label with the settings shown."""
        op = CATALOGUE[name]
        if op.tool is not None:
            raise MedsegError(f"{op.title} works with the mouse: choose the {op.title} tool and click in a view")
        if self.document.label_map is None:
            raise MedsegError("there is no segmentation yet; draw or segment first")
        return self._apply(op)

    def operation_text(self, name: str) -> str:
        """The operation with its setting, as the user reads it ("Grow 2 mm")."""
        op = CATALOGUE[name]
        return op.summary({p.name: float(self.settings[p.name].value) for p in op.settings})


def _property(parameter: Parameter) -> Property:
    return Property(parameter.default, parameter.minimum, parameter.maximum, label=parameter.label,
                    unit=parameter.unit, step=parameter.step, decimals=parameter.decimals)


def _touches_edge(box, shape_zyx, plane_axis: int | None) -> bool:
    """Does the (z, y, x) box reach the image's border along an axis of the fill (not across slices)?"""
    (lo, hi) = box
    axes = [a for a in range(3) if a != plane_axis]
    return any(lo[a] == 0 or hi[a] == shape_zyx[a] for a in axes)
