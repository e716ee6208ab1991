"""Two models' outputs on one case in the Segment tab: the legend bar and the opening of the case.

Model A's output becomes the document's editable label map (filled overlay); model B's is the
view state's read-only comparison layer, drawn as outlines in all three views. The bar says which
is which, lists B's labels in their colours (the one colour table), and toggles B.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Slot
from PySide6.QtWidgets import QCheckBox, QHBoxLayout, QLabel, QPushButton, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import build_label_table
from medseg.gui.common.colors import label_rgb
from medseg.gui.common.view_state import ViewState


class ComparisonLegend(QWidget):
    """Shown while the view has a comparison layer."""

    def __init__(self, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.view = view
        self.text = QLabel(self)
        self.text.setWordWrap(True)
        self.show_b = QCheckBox("Show B outlines", self)
        self.show_b.setChecked(True)
        self.show_b.toggled.connect(view.set_comparison_visible)
        close = QPushButton("Close comparison", self)
        close.clicked.connect(view.clear_comparison)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(4, 2, 4, 2)
        layout.addWidget(self.text, 1)
        layout.addWidget(self.show_b)
        layout.addWidget(close)
        view.comparison_changed.connect(self._refresh)
        self._refresh()

    @Slot()
    def _refresh(self) -> None:
        comparison = self.view.comparison
        self.setVisible(comparison is not None)
        if comparison is None:
            return
        if self.show_b.isChecked() != self.view.comparison_visible:
            self.show_b.setChecked(self.view.comparison_visible)
        swatches = " ".join(f'<span style="color: rgb{label_rgb(entry)}">&#9633;&nbsp;{entry.name}</span>'
                            for entry in comparison.labels.values())
        self.text.setText(f"<b>A</b> (filled, editable): {comparison.primary_name} &nbsp;&nbsp; "
                          f"<b>B</b> (outlines, read-only): {comparison.name} &nbsp; {swatches}")


def open_comparison_case(window: Any, comparison: Any) -> bool:
    """Open a :class:`~medseg.gui.train.export_panel.ComparisonCase` in the window's Segment tab."""
    if not window.editing.may_discard_edits("Opening the comparison"):
        return False
    document: SegmentationDocument = window.document
    document.set_volume(comparison.image, source=f"validation case {comparison.case}")
    output_a = comparison.output_a.with_array(comparison.output_a.array.copy())  # A is edited; the kept output is not
    table = build_label_table(np.unique(output_a.array).tolist(), comparison.labels_a)
    document.set_label_map(output_a, table, f"model {comparison.model_a}")
    # the window says where the shown segmentation came from by following the view state's comparison
    window.view.set_comparison(comparison.output_b, comparison.labels_b, comparison.model_b, comparison.model_a)
    window.tabs.setCurrentIndex(0)
    return True
