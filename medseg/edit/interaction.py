"""The active tool and its options; views forward mouse presses, drags and releases here.

Qt-free, so a test drives the same brush a user drags: ``press(xyz, plane_axis)``,
``drag(xyz)``, ``release()`` with continuous voxel positions (x, y, z) and the index
axis the view looks along. Ctrl-click picks the label under the mouse as the active one
(whatever the tool). Options are :class:`~medseg.edit.properties.Property` objects the
GUI binds to widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from medseg.edit import tools
from medseg.edit.properties import Property
from medseg.edit.tools import PaintRules
from medseg.errors import MedsegError

if TYPE_CHECKING:
    from medseg.edit.document import ViewerDocument

TOOLS = ("navigate", "brush", "eraser", "fill", "keep_island")
TOOL_NAMES = {"navigate": "Navigate", "brush": "Brush", "eraser": "Eraser", "fill": "Fill", "keep_island": "Keep island"}


class ToolController:
    def __init__(self, document: "ViewerDocument") -> None:
        self.document = document
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
            doc.pick_label_at(voxel)  # type: ignore[arg-type]
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
        elif self.active == "fill":
            hu = self.rules().hu_range if self.fill_by_hu.value else None
            if self.fill_by_hu.value and hu is None:
                hu = (float(self.hu_low.value), float(self.hu_high.value))
            delta = tools.flood_fill(lm, seed, doc.active_label, self.rules(), doc.volume, hu_range=hu,
                                     plane_axis=None if self.fill_3d.value else plane)
            doc.apply(delta, "fill")
        elif self.active == "keep_island":
            try:
                doc.apply(tools.keep_clicked(lm, seed), "keep island")
            except MedsegError:
                return True  # clicked background or a locked label: nothing to keep
        return True

    def drag(self, xyz: tuple[float, float, float]) -> None:
        if self._last is None:
            return
        zyx = np.asarray(xyz[::-1], dtype=float)
        if self._plane_axis is not None:
            zyx[self._plane_axis] = self._last[self._plane_axis]  # a drag stays on the slice it began on
        self._paint([self._last, zyx])
        self._last = zyx

    def release(self) -> None:
        if self._last is not None:
            self._last = None
            self.document.end_stroke("erase" if self.active == "eraser" else "brush")

    def _paint(self, points) -> None:
        doc = self.document
        lm = doc.label_map
        assert lm is not None
        erase = self.active == "eraser"
        only = doc.active_label if erase and self.eraser_active_only.value else None
        plane = None if self.sphere.value else self._plane_axis
        delta = tools.stroke(lm, points, float(self.radius_mm.value), doc.active_label, self.rules(), doc.volume,
                             plane, erase=erase, only_value=only)
        doc.stroke_apply(delta)

    # --- one-click operations on the active label ------------------------------------------------
    def run_operation(self, name: str) -> bool:
        """"grow", "shrink", "keep_largest", "remove_small", "fill_holes", "interpolate", "smooth"."""
        doc = self.document
        lm = doc.label_map
        if lm is None:
            raise MedsegError("there is no segmentation yet; draw or segment first")
        value = doc.active_label
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
        return doc.apply(delta, f"{name.replace('_', ' ')} {entry.name if entry else value}")
