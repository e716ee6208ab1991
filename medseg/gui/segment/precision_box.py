"""The Segment panel's precision choice (issue #51 item 3): float32, the exact path, always; a faster tier
("int8 (verified)", "bf16 (verified)") only where ``medseg models verify --tier`` (or the Models dialog)
verified it for the chosen model on this computer (medseg.workflows.precision.offered_tiers), its figures
in the item's tooltip. The plan says which precision runs and why (:meth:`PrecisionBox.plan_html`).
"""

from __future__ import annotations

import html
from typing import Any

from PySide6.QtWidgets import QWidget

from medseg.gui.segment.elided import ElidedComboBox

EXACT = "f32"


class PrecisionBox(ElidedComboBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setToolTip("What the network computes in: float32 is the exact path; a faster tier is listed only "
                        "where it was verified against float32 for this model on this computer")
        self._offers: dict[str, str] = {}
        self.refill(None)

    @property
    def precision(self) -> str:
        return self.currentData() or EXACT

    def refill(self, pipeline: Any) -> None:
        """The choices for the chosen model (None: float32 alone); the choice is kept while still offered."""
        keep = self.precision if self.count() else EXACT
        self._offers = {}
        if pipeline is not None:
            from medseg.workflows.precision import offered_tiers

            self._offers = offered_tiers(pipeline)
        self.blockSignals(True)
        self.clear()
        self.addItem("Precision: float32 (exact)", EXACT)
        for precision, why in self._offers.items():
            self.addItem(f"Precision: {precision} (verified)", precision)
            self.set_item_tip(self.count() - 1, f"{precision}, verified on this computer: {why}")
        self.setCurrentIndex(max(self.findData(keep), 0))
        self.blockSignals(False)
        self.setVisible(bool(self._offers))  # nothing to choose: the plan's precision line says why

    def plan_html(self) -> str:
        """The plan's sentence on the precision this Segment runs in, and why."""
        precision = self.precision
        if precision == EXACT:
            offered = ", ".join(self._offers)
            why = (f" ({offered} verified here: choose it above to run faster)" if offered else "")
            return f"<p><b>Precision:</b> float32, the exact path{html.escape(why)}.</p>"
        return (f"<p><b>Precision: {precision}</b>, chosen by you, not the exact float32 path: "
                f"{html.escape(self._offers[precision])}. The labels' algorithm version and the sidecar say "
                f"{precision}.</p>")
