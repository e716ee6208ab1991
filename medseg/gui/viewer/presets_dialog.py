"""Edit the window/level presets (name, level, width); saved in the settings."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.gui.common.view_state import DEFAULT_PRESETS, ViewState
from medseg.gui.viewer.window_panel import WindowPanel


class PresetsDialog(QDialog):
    def __init__(self, presets: dict[str, tuple[float, float]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Window/level presets")
        self.table = QTableWidget(0, 3, self)
        self.table.setHorizontalHeaderLabels(("Name", "Level (HU)", "Width (HU)"))
        self.table.horizontalHeader().setStretchLastSection(True)
        self._fill(presets)
        add, remove, defaults = QPushButton("Add", self), QPushButton("Remove", self), QPushButton("Defaults", self)
        add.clicked.connect(lambda: self._append("New preset", 40.0, 400.0))
        remove.clicked.connect(lambda: self.table.removeRow(self.table.currentRow()))
        defaults.clicked.connect(lambda: self._fill(DEFAULT_PRESETS))
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        for button in (add, remove, defaults):
            buttons.addButton(button, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.accepted.connect(self.accept)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.table)
        layout.addWidget(buttons)
        self.resize(420, 320)

    def _fill(self, presets: dict[str, tuple[float, float]]) -> None:
        self.table.setRowCount(0)
        for name, (center, width) in presets.items():
            self._append(name, center, width)

    def _append(self, name: str, center: float, width: float) -> None:
        row = self.table.rowCount()
        self.table.insertRow(row)
        for column, text in enumerate((name, f"{center:g}", f"{width:g}")):
            self.table.setItem(row, column, QTableWidgetItem(text))

    def presets(self) -> dict[str, tuple[float, float]]:
        """The edited presets; rows with a bad number or an empty name are left out."""
        result = {}
        for row in range(self.table.rowCount()):
            try:
                name = self._text(row, 0).strip()
                center, width = float(self._text(row, 1)), float(self._text(row, 2))
            except ValueError:
                continue
            if name and width > 0:
                result[name] = (center, width)
        return result

    def _text(self, row: int, column: int) -> str:
        item = self.table.item(row, column)
        return "" if item is None else item.text()  # a cell never typed in has no item


class PresetsEditor(QObject):
    """Edit presets… (the View menu's and the Window panel's): the dialog, then the view's presets, the settings
    (``store``) and the Window panel's list follow what the user accepted."""

    def __init__(self, view: ViewState, store: Callable[[dict[str, tuple[float, float]]], None], panel: WindowPanel,
                 parent: QWidget) -> None:
        super().__init__(parent)
        self.view, self.store, self.panel, self.parent_widget = view, store, panel, parent
        self.dialog: PresetsDialog | None = None
        panel.edit_presets_requested.connect(self.edit)

    def edit(self) -> None:
        self.dialog = PresetsDialog(self.view.presets, self.parent_widget)
        self.dialog.accepted.connect(self._on_accepted)
        self.dialog.open()

    def _on_accepted(self) -> None:
        assert self.dialog is not None, "the signal of the dialog edit() made"
        self.view.set_presets(self.dialog.presets())
        self.store(self.view.presets)
        self.panel.refresh_presets()
