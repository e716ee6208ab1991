"""The Segment tab's window/level panel: CT presets (keys 1-6, 0 automatic) and centre/width.

It writes to the view state and redraws from its events, with Qt signals blocked while it updates itself so
that the two never chase each other (ITK-SNAP's coupling).
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import (
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QPushButton,
    QWidget,
)

from medseg.gui.common.view_state import AUTO_PRESET, ViewState

PRESET_KEYS = {"Soft tissue": "1", "Lung": "2", "Bone": "3", "Brain": "4", "Liver": "5", "Mediastinum": "6", AUTO_PRESET: "0"}


class WindowPanel(QGroupBox):
    edit_presets_requested = Signal()

    def __init__(self, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__("Window / level", parent)
        self.view = view
        self.preset_box = QComboBox(self)
        self.center_box = QDoubleSpinBox(self)
        self.width_box = QDoubleSpinBox(self)
        for box in (self.center_box, self.width_box):
            box.setRange(-5000, 10000)
            box.setDecimals(0)
            box.setSuffix(" HU")
        self.width_box.setMinimum(1)
        edit_button = QPushButton("Edit presets…", self)
        edit_button.clicked.connect(self.edit_presets_requested)
        form = QFormLayout(self)
        form.addRow("Preset", self.preset_box)
        form.addRow("Level (centre)", self.center_box)
        form.addRow("Width", self.width_box)
        form.addRow(edit_button)
        self.refresh_presets()
        self.preset_box.activated.connect(self._on_preset_chosen)
        self.center_box.valueChanged.connect(self._on_spin)
        self.width_box.valueChanged.connect(self._on_spin)
        view.window_changed.connect(self._sync)
        view.document.volume_changed.connect(self._sync)
        self._sync()

    def refresh_presets(self) -> None:
        self.preset_box.blockSignals(True)
        self.preset_box.clear()
        self.preset_box.addItem("(custom)")
        for name in [AUTO_PRESET, *self.view.presets]:
            key = PRESET_KEYS.get(name)
            self.preset_box.addItem(f"{name}  [{key}]" if key else name, name)
        self.preset_box.blockSignals(False)
        self._sync()

    def _on_preset_chosen(self, index: int) -> None:
        name = self.preset_box.itemData(index)
        if name:
            self.view.apply_preset(name)

    def _on_spin(self) -> None:
        self.view.set_window(self.center_box.value(), self.width_box.value())

    def _preset_window(self, name: str) -> tuple[float, float] | None:
        window = self.view.auto_window() if name == AUTO_PRESET else self.view.presets.get(name)
        return tuple(map(float, window)) if window is not None else None  # type: ignore[return-value]

    def _sync(self) -> None:
        view = self.view
        for box, value in ((self.center_box, view.window_center), (self.width_box, view.window_width)):
            box.blockSignals(True)
            box.setValue(value)
            box.blockSignals(False)
        # The preset the user chose, even when another has the same values (Brain = the header's window);
        # else the first preset with these values; else "(custom)".
        match = self.preset_box.findData(view.window_preset) if view.window_preset else -1
        if match < 0:
            current = (view.window_center, view.window_width)
            match = next((index for index in range(1, self.preset_box.count())
                          if self._preset_window(self.preset_box.itemData(index)) == current), 0)
        self.preset_box.blockSignals(True)
        self.preset_box.setCurrentIndex(match)
        self.preset_box.blockSignals(False)
