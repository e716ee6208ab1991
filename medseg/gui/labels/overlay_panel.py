"""The Segment tab's label overlay panel: show/hide, opacity, outline, name set, and the label table.

It writes to the document or the view state and redraws from their events, with Qt signals blocked while it
updates itself so that the two never chase each other (ITK-SNAP's coupling).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QRadioButton,
    QSlider,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import NAME_SETS
from medseg.gui.common.view_state import ViewState
from medseg.gui.labels.label_list import LabelList


class OverlayPanel(QGroupBox):
    name_set_changed = Signal(str)

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__("Label overlay", parent)
        self.document = document
        self.view = view
        self.show_box = QCheckBox("Show labels", self)
        self.show_box.setChecked(True)
        self.opacity_slider = QSlider(Qt.Orientation.Horizontal, self)
        self.opacity_slider.setRange(0, 100)
        self.opacity_label = QLabel(self)
        self.fill_button = QRadioButton("Fill", self)
        self.outline_button = QRadioButton("Outline", self)
        self.fill_button.setChecked(True)
        self.names_box = QComboBox(self)
        self.names_box.addItems(NAME_SETS)
        self.source_label = QLabel("No segmentation. File ▸ Open segmentation… (Ctrl+L), Segment, or draw.", self)
        self.source_label.setWordWrap(True)
        # two lines always fit: a long model name must not be clipped by the table below
        self.source_label.setMinimumHeight(2 * self.source_label.fontMetrics().lineSpacing() + 4)
        self.labels = LabelList(document, view, self)
        self.table = self.labels.tree  # the grouped, searchable label table

        # two compact rows above the table: the table gets the height (117 rows)
        mode_row = QHBoxLayout()
        mode_row.addWidget(self.show_box)
        mode_row.addStretch(1)
        mode_row.addWidget(self.fill_button)
        mode_row.addWidget(self.outline_button)
        opacity_row = QHBoxLayout()
        opacity_row.addWidget(QLabel("Opacity", self))
        opacity_row.addWidget(self.opacity_slider, 1)
        opacity_row.addWidget(self.opacity_label)
        opacity_row.addSpacing(6)
        opacity_row.addWidget(QLabel("Names", self))
        opacity_row.addWidget(self.names_box, 1)
        layout = QVBoxLayout(self)
        layout.setSpacing(3)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.source_label)
        layout.addLayout(mode_row)
        layout.addLayout(opacity_row)
        layout.addWidget(self.labels, 1)

        self.show_box.toggled.connect(view.set_overlay_visible)
        self.opacity_slider.valueChanged.connect(lambda v: view.set_overlay_opacity(v / 100.0))
        self.outline_button.toggled.connect(view.set_overlay_outline)
        self.names_box.currentTextChanged.connect(self.name_set_changed)
        view.overlay_changed.connect(self._sync_overlay)
        self._sync_overlay()

    def _sync_overlay(self) -> None:
        view = self.view
        for widget, setter in ((self.opacity_slider, lambda: self.opacity_slider.setValue(round(view.overlay_opacity * 100))),
                               (self.outline_button, lambda: self.outline_button.setChecked(view.overlay_outline)),
                               (self.fill_button, lambda: self.fill_button.setChecked(not view.overlay_outline)),
                               (self.show_box, lambda: self.show_box.setChecked(view.overlay_visible))):
            widget.blockSignals(True)
            setter()
            widget.blockSignals(False)
        self.opacity_label.setText(f"{round(view.overlay_opacity * 100)} %")

    def set_source(self, text: str, details: str = "") -> None:
        self.source_label.setText(text)
        self.source_label.setToolTip(details)
