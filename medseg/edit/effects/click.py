"""Fill, keep island, level trace, click 3D: one press runs the operation at the voxel. What stops it (the
background clicked, a locked label, an HU outside the range) is said, not raised into the view. A tool whose
operation previews (level trace) shows, under the mouse, the edge of the region a click would fill.

Its options: the fill's 3D and HU switches, the trace tolerance, the 3D click's k (each shown with the tool
whose operation declares it)."""

from __future__ import annotations

import numpy as np

from medseg.edit.effects.base import Effect, Form, RegionEdge, entry, text
from medseg.errors import MedsegError

TRACE_EDGE = 0xFFFFE000  # the traced region's edge (ARGB)


def _voxel(zyx: np.ndarray) -> tuple[int, int, int]:
    return tuple(int(round(v)) for v in zyx)  # type: ignore[return-value]


class Click(Effect):
    name = "click"
    layer = 1  # the traced edge over the seeds
    forms = (Form("fill", (entry("fill_3d", 0, 0, text="Fill in 3D"), entry("fill_by_hu", 0, 1, text="Fill by HU range")),
                  row=True),
             Form("trace", (text("Within ±", 0, 0), entry("trace_tolerance_hu", 0, 1)), stretch=((2, 1),)),
             Form("confidence", (text("Mean ± k·SD, k", 0, 0), entry("confidence_k", 0, 1)), stretch=((2, 1),)))

    def __init__(self, controller) -> None:
        super().__init__(controller)
        self.trace: tuple[int, int, np.ndarray] | None = None  # (axis zyx, slice, 2D region) under the mouse

    def press(self, op, zyx, plane):
        controller = self.controller
        try:
            controller.perform(op, {"point": _voxel(zyx), "view": plane})
        except MedsegError as error:
            controller.document.announce(f"{op.title}: {error.message}.", "warning")
        return True

    def hover(self, op, voxel_zyx, plane):
        controller = self.controller
        if op.hover is None or controller.document.volume is None:
            self.show_trace(None)
            return
        values = controller.operation_values(op, {"point": voxel_zyx, "view": plane})
        self.show_trace((plane, voxel_zyx[plane], op.hover(controller.document, values)))

    def forget_hover(self) -> None:
        self.show_trace(None)

    def show_trace(self, trace: tuple[int, int, np.ndarray] | None) -> None:
        if trace is not None or self.trace is not None:
            self.trace = trace
            self.layer_changed.emit()

    def paints(self, axis, position):
        trace = self.trace
        if trace is None or trace[0] != axis or trace[1] != position:
            return []
        return [RegionEdge(trace[2], TRACE_EDGE)]
