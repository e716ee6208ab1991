"""Choose which of a model's structures Segment keeps: search by name, tick by group.

For a TotalSegmentator model the subset is its ``--roi_subset``: the run is cropped around the
chosen structures and only the networks that hold them run, so a few structures come much faster.
Every structure chosen is the same as none chosen (the whole model, no crop).
"""

from __future__ import annotations

from typing import Mapping

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.core.labels import Label

NAME_ROLE = int(Qt.ItemDataRole.UserRole)


class StructurePicker(QDialog):
    """``structures``: the model's labels, by value, under their groups (ungrouped ones go under "other")."""

    def __init__(self, structures: Mapping[int, Label], chosen: tuple[str, ...] | None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Structures to segment")
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search structures or groups (e.g. rib, vertebrae_L, liver)")
        self.search.setClearButtonEnabled(True)
        self.search.textChanged.connect(self._filter)
        self.tree = QTreeWidget(self)
        self.tree.setHeaderHidden(True)
        self.tree.itemChanged.connect(lambda _item, _column: self._count())
        self.count_label = QLabel(self)
        self.all_button = QPushButton("All", self)
        self.all_button.clicked.connect(lambda: self._set_all(True))
        self.none_button = QPushButton("None", self)
        self.none_button.clicked.connect(lambda: self._set_all(False))
        self.buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel, self)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        row = QHBoxLayout()
        row.addWidget(self.count_label, 1)
        row.addWidget(self.all_button)
        row.addWidget(self.none_button)
        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Fewer structures run faster: the image is cropped around them and only the "
                                "networks that segment them run.", self))
        layout.addWidget(self.search)
        layout.addWidget(self.tree, 1)
        layout.addLayout(row)
        layout.addWidget(self.buttons)
        self._total = len(structures)
        wanted = set(chosen) if chosen is not None else {label.name for label in structures.values()}
        self.tree.blockSignals(True)
        by_group: dict[str, QTreeWidgetItem] = {}
        for _value, label in sorted(structures.items()):
            name, group = label.name, label.group or "other"
            if group not in by_group:
                parent_item = QTreeWidgetItem(self.tree, [group])
                parent_item.setFlags(parent_item.flags() | Qt.ItemFlag.ItemIsUserCheckable
                                     | Qt.ItemFlag.ItemIsAutoTristate)
                by_group[group] = parent_item
            item = QTreeWidgetItem(by_group[group], [name])
            item.setData(0, NAME_ROLE, name)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(0, Qt.CheckState.Checked if name in wanted else Qt.CheckState.Unchecked)
        self.tree.blockSignals(False)
        self.groups = by_group
        for group_item in by_group.values():  # a subset chosen before: show where its structures are
            group_item.setExpanded(group_item.checkState(0) == Qt.CheckState.PartiallyChecked)
        self.resize(420, 560)
        self._count()

    def _leaves(self) -> list[QTreeWidgetItem]:
        return [item for group in self.groups.values() for item in _children(group)]

    def chosen(self) -> tuple[str, ...] | None:
        """The structures ticked; None when all are (the whole model, no crop)."""
        names = tuple(item.data(0, NAME_ROLE) for item in self._leaves()
                      if item.checkState(0) == Qt.CheckState.Checked)
        return None if len(names) == self._total else names

    def _count(self) -> None:
        chosen = self.chosen()
        count = self._total if chosen is None else len(chosen)
        self.count_label.setText(f"{count} of {self._total} chosen" + (" (the whole model)" if chosen is None else ""))
        self.buttons.button(QDialogButtonBox.StandardButton.Ok).setEnabled(count > 0)

    def _set_all(self, on: bool) -> None:
        """Tick or clear every structure the search shows (all of them without a search)."""
        state = Qt.CheckState.Checked if on else Qt.CheckState.Unchecked
        for item in self._leaves():
            if not item.isHidden():
                item.setCheckState(0, state)

    def _filter(self, text: str) -> None:
        needle = text.strip().lower()
        for group_name, group in self.groups.items():
            group_matches = bool(needle) and needle in group_name.lower()
            shown = 0
            for item in _children(group):
                visible = not needle or group_matches or needle in item.text(0).lower()
                item.setHidden(not visible)
                shown += visible
            group.setHidden(shown == 0)
            group.setExpanded(bool(needle) and shown > 0)


def describe(chosen: tuple[str, ...] | None, total: int) -> str:
    """The button's text: "Structures: all 117" or "Structures: 3 of 117 (liver, spleen, aorta)"."""
    if chosen is None:
        return f"Structures: all {total}…"
    shown = ", ".join(chosen[:3]) + (", …" if len(chosen) > 3 else "")
    return f"Structures: {len(chosen)} of {total} ({shown})…"


def _children(group: QTreeWidgetItem) -> list[QTreeWidgetItem]:
    """A group's structure items (child(i) is None only past childCount)."""
    return [child for i in range(group.childCount()) if (child := group.child(i)) is not None]
