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
from medseg.edit.tools.click_region import ConfidenceParameters, LevelTraceParameters, level_trace_region
from medseg.edit.tools.grow_seeds import BACKGROUND_SEED, GrowParameters
from medseg.edit.tools.scissors import OPERATIONS as SCISSORS_OPERATIONS, ScissorsParameters
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
        self.hu_low = Property(-100.0, -1100.0, 4000.0, label="from", unit="HU", step=10, decimals=0)
        self.hu_high = Property(200.0, -1100.0, 4000.0, label="to", unit="HU", step=10, decimals=0)
        self.only_background = Property(False, label="Paint only over background")
        self.eraser_active_only = Property(False, label="Erase only the active label")
        self.fill_3d = Property(False, label="Fill in 3D (else on the view's slice)")
        self.fill_by_hu = Property(False, label="Fill within the HU range (else the clicked label's region)")
        self.margin_mm = Property(2.0, 0.0, 100.0, label="Margin", unit="mm", step=0.5)
        self.island_ml = Property(1.0, 0.0, 10000.0, label="Islands under", unit="ml", step=0.5, decimals=2)
        self.smooth_mm = Property(1.5, 0.1, 20.0, label="Smoothing", unit="mm", step=0.5)
        # grow from seeds (ranges from GrowParameters, the operation's one declaration)
        grow_ranges = GrowParameters.RANGES
        self.seed_kind = Property("structure", choices=SEED_KINDS, label="Paint seeds of")
        self.seed_locality = Property(GrowParameters.seed_locality, *grow_ranges["seed_locality"][:2],
                                      label="Seed locality (how far a seed reaches)", unit="HU/mm", step=0.5)
        self.existing_seeds = Property(GrowParameters.use_existing_labels,
                                       label="Labels already drawn are seeds of themselves (locked ones always are)")
        self.roi_margin_mm = Property(GrowParameters.roi_margin_mm, *grow_ranges["roi_margin_mm"][:2],
                                      label="Region of interest: the seeds' box plus", unit="mm", step=5.0)
        # click to region, scissors
        self.trace_tolerance_hu = Property(LevelTraceParameters.tolerance_hu,
                                           *LevelTraceParameters.RANGES["tolerance_hu"][:2],
                                           label="Level trace: within ± of the voxel under the mouse", unit="HU",
                                           step=10, decimals=0)
        self.confidence_k = Property(ConfidenceParameters.k, *ConfidenceParameters.RANGES["k"][:2],
                                     label="Click 3D: mean ± k·SD", step=0.1)
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
        for prop in (self.hu_low, self.hu_high):
            prop.enabled = False
        self.hu_masked.changed.connect(self._sync_enabled)

    def _sync_enabled(self, _value=None) -> None:
        for prop in (self.hu_low, self.hu_high):
            prop.enabled = bool(self.hu_masked.value)

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
            region = level_trace_region(doc.volume, seed, plane, self._trace_parameters())
            lo = tuple(seed[plane] if a == plane else 0 for a in range(3))
            delta = tools.paint_mask(lm, lo, np.expand_dims(region, plane), self.view.active_label, self.rules(), doc.volume)
            doc.apply(delta, "level trace", announce="Level trace")
        elif self.active == "confidence":
            delta = tools.confidence_connected(lm, doc.volume, seed, self.view.active_label,
                                               ConfidenceParameters(k=float(self.confidence_k.value)), self.rules())
            doc.apply(delta, "click 3D", announce="Click 3D")
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
        if self.active == "lasso":
            delta = tools.lasso(doc.label_map, points_ij, axis, centre, self.view.active_label, self.rules(), doc.volume)
            doc.apply(delta, "lasso", announce="Lasso")
            return
        parameters = ScissorsParameters(str(self.scissors_operation.value),
                                        float(self.slab_mm.value) if self.scissors_slab.value else None)
        only = self.view.active_label if self.eraser_active_only.value else None
        delta = tools.scissors(doc.label_map, points_ij, axis, parameters, centre, self.view.active_label, self.rules(),
                               doc.volume, only_value=only)
        doc.apply(delta, f"scissors ({parameters.operation})", announce=f"Scissors ({parameters.operation})")

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

    # --- one-click operations on the active label ------------------------------------------------
    def run_operation(self, name: str) -> bool:
        """"grow", "shrink", "keep_largest", "remove_small", "fill_holes", "interpolate", "smooth"."""
        doc = self.document
        lm = doc.label_map
        if lm is None:
            raise MedsegError("there is no segmentation yet; draw or segment first")
        value = self.view.active_label
        rules = self.rules()
        delta = {
            "grow": lambda: tools.grow(lm, value, float(self.margin_mm.value), rules, doc.volume),
            "shrink": lambda: tools.shrink(lm, value, float(self.margin_mm.value)),
            "keep_largest": lambda: tools.keep_largest(lm, value),
            "remove_small": lambda: tools.remove_smaller(lm, value, float(self.island_ml.value)),
            "fill_holes": lambda: tools.fill_holes(lm, value),
            "interpolate": lambda: tools.interpolate_slices(lm, value, self._plane_axis or 0),
            "smooth": lambda: tools.smooth(lm, value, float(self.smooth_mm.value), rules, doc.volume),
        }[name]()
        entry = lm.labels.get(value)
        return doc.apply(delta, f"{name.replace('_', ' ')} {entry.name if entry else value}",
                         announce=f"{self.operation_text(name)} on {entry.name if entry else f'label {value}'}")

    def operation_text(self, name: str) -> str:
        """The operation with its setting, as the user reads it ("Grow 2 mm")."""
        return {
            "grow": f"Grow {self.margin_mm.value:g} mm", "shrink": f"Shrink {self.margin_mm.value:g} mm",
            "keep_largest": "Keep largest", "remove_small": f"Remove islands under {self.island_ml.value:g} ml",
            "fill_holes": "Fill holes", "interpolate": "Interpolate between slices",
            "smooth": f"Smooth {self.smooth_mm.value:g} mm",
        }[name]


def _touches_edge(box, shape_zyx, plane_axis: int | None) -> bool:
    """Does the (z, y, x) box reach the image's border along an axis of the fill (not across slices)?"""
    (lo, hi) = box
    axes = [a for a in range(3) if a != plane_axis]
    return any(lo[a] == 0 or hi[a] == shape_zyx[a] for a in axes)
