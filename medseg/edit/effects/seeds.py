"""Grow from seeds: strokes paint seeds (of the active label, of background, or erase them); each finished stroke
computes a new preview (off the GUI thread in the app: the GUI's runner computes it, then calls
:meth:`GrowFromSeeds.preview_ready`); Apply writes it as one undoable step, Cancel drops seeds and preview.

It shows the seeds (opaque, in the seed palette) and the preview (the labels Apply would write). Its options:
what a stroke paints, the region's margin, the seed locality (a slider), whether labels already drawn are seeds,
and the brush's radius (the seeds are painted with it)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from medseg.edit.effects.base import Cell, Form, SeedPaint, SessionEffect, entry, text
from medseg.edit.operation import Parameter
from medseg.edit.tool_parameters import GrowParameters

if TYPE_CHECKING:
    from medseg.edit.grow_session import GrowSession

SEED_KIND = Parameter("seed_kind", "KIND", "choice", "Paint seeds of", default="structure",
                      choices=("structure", "background", "erase"))
EXISTING = Parameter("existing_seeds", "", "flag",
                     "Labels already drawn are seeds of themselves (locked ones always are)",
                     default=GrowParameters.use_existing_labels)
APPLY_TIP = "Write the grown labels (one undo step) and clear the seeds"
CANCEL_TIP = "Drop the seeds and the preview; the segmentation stays as it was"


class GrowFromSeeds(SessionEffect):
    name = "seeds"
    options = (SEED_KIND, EXISTING)
    shows = ("stroke",)  # the seeds are painted with the brush's radius
    forms = (Form("grow", (text("Seeds", 0, 0), entry("seed_kind", 0, 1), text("ROI +", 0, 2), entry("roi_margin_mm", 0, 3),
                           text("Locality", 1, 0), entry("seed_locality", 1, 1, columns=2, widget="slider"),
                           Cell("readout", "seed_locality", 1, 3, text="{:.1f} HU/mm"),
                           entry("existing_seeds", 2, 0, columns=2, text="Labels are seeds"),
                           Cell("action", "apply", 2, 2, text="Apply", tip=APPLY_TIP),
                           Cell("action", "cancel", 2, 3, text="Cancel", tip=CANCEL_TIP))),)

    def __init__(self, controller) -> None:
        super().__init__(controller)
        self.session: GrowSession | None = None
        self._compute = self._compute_now  # the GUI's runner calls compute() off the GUI thread instead
        for name in ("seed_locality", "roi_margin_mm", "existing_seeds"):
            controller.settings[name].changed.connect(self._parameters_changed)

    @property
    def active(self) -> bool:
        return self.session is not None

    # mouse
    def press(self, op, zyx, plane):
        self._paint([zyx])
        return True

    def drag(self, op, zyx):
        self._paint([self.controller.last_position, zyx])

    def release(self, op):
        if self.session is not None and self.session.pending():
            self._compute(self.session)

    def _paint(self, points) -> None:
        controller = self.controller
        session = self.start()
        # what a seed stroke paints: the active label's seeds, background seeds, or none (it erases seeds)
        from medseg.edit.tools.grow_seeds import BACKGROUND_SEED

        value = {"structure": controller.view.active_label, "background": BACKGROUND_SEED,
                 "erase": None}[controller.settings["seed_kind"].value]
        plane = None if controller.settings["sphere"].value else controller.plane_axis
        box = session.paint(points, float(controller.settings["radius_mm"].value), value, plane)
        if box is not None:
            self.layer_changed.emit(box)  # the seeds show at once; the preview follows when the stroke ends

    # the session
    def parameters(self) -> GrowParameters:
        settings = self.controller.settings
        return GrowParameters(roi_margin_mm=float(settings["roi_margin_mm"].value),
                              seed_locality=float(settings["seed_locality"].value),
                              use_existing_labels=bool(settings["existing_seeds"].value))

    def start(self) -> GrowSession:
        """The running session (one is started by the first seed)."""
        if self.session is None:
            from medseg.edit.grow_session import GrowSession

            self.session = GrowSession(self.controller.document, self.parameters(), self.controller.rules())
        return self.session

    def set_runner(self, run) -> None:
        """``run(session)`` computes a preview (the GUI: in a worker thread, then :meth:`preview_ready`); by
        default it is computed at once, on the calling thread."""
        self._compute = run

    def preview_ready(self, box=None) -> None:
        """A preview computed elsewhere is ready (``box``: where it changed; None: no preview)."""
        self.layer_changed.emit(box)

    def _compute_now(self, session: GrowSession) -> None:
        """Headless (tests, scripts): compute the preview at once, on this thread."""
        session.compute()
        self.layer_changed.emit(session.preview.box if session.preview is not None else None)

    def _parameters_changed(self, _value=None) -> None:
        if self.session is not None:
            self.session.set_parameters(self.parameters())
            self._compute(self.session)

    # drawing (the preview, Apply and Cancel: SessionEffect's)
    def paints(self, axis, position):
        session = self.session
        if session is None or session.seed_box is None:
            return []
        lo, hi = session.seed_box
        if not lo[axis] <= position < hi[axis]:
            return []
        index: list = [slice(None)] * 3
        index[axis] = position
        return [SeedPaint(session.seeds[tuple(index)])]
