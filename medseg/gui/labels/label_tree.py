"""The label table as a Qt item model: structures under their groups, bound to the document.

The document stays the only writer of the table: this model reads every cell from
``document.labels`` when the view asks, and a check box, a rename or a group's check box
calls the document's methods. It holds no copy of a label, only the last table it showed,
to tell which rows a ``labels_changed`` touched (labels are frozen records, so an unchanged
row is the same object) and to redraw just those — a hidden group of 26 ribs is 27 rows
repainted, not 117 rebuilt. Groups come from each label's ``group`` (the model's own
grouping); a table without groups is a flat list.

:class:`LabelFilter` sits between the model and the view: search as you type (a name, part
of a name with spaces or underscores, a value, or a group's name, which shows the whole
group) and sorting by name, value or volume inside each group, the groups keeping the
model's order.
"""

from __future__ import annotations

import re
from typing import Any

from PySide6.QtCore import QAbstractItemModel, QModelIndex, QPersistentModelIndex, QSortFilterProxyModel, Qt
from PySide6.QtGui import QColor, QIcon, QPixmap

from medseg.core.labels import Label
from medseg.edit.document import SegmentationDocument

NAME, VALUE, VOLUME, LOCK = range(4)
HEADERS = ("Structure", "Value", "ml", "Lock")
SORT_ROLE = Qt.ItemDataRole.UserRole + 1  # what a column sorts by (name folded, value, volume)
VALUE_ROLE = Qt.ItemDataRole.UserRole + 2  # a label row's value; None on a group row
GROUP_ROLE = Qt.ItemDataRole.UserRole + 3  # a group row's name; None on a label row
SEARCH_ROLE = Qt.ItemDataRole.UserRole + 4  # what the search matches
UNGROUPED = "other"  # where a label without a group goes when the others have one
_NO_PARENT = 0xFFFFFFFF


def _swatch(color: tuple[int, int, int], cache: dict) -> QIcon:
    icon = cache.get(color)
    if icon is None:
        pixmap = QPixmap(12, 12)
        pixmap.fill(QColor(*color))
        icon = cache[color] = QIcon(pixmap)
    return icon


def describe_codes(label: Label) -> str:
    """The label's coded concept in words (its tooltip)."""
    lines = []
    if label.type is not None:
        side = f", {label.modifier.meaning.lower()}" if label.modifier is not None else ""
        lines.append(f"{label.type.meaning}{side} ({label.type.scheme} {label.type.value})")
    if label.region is not None:
        side = f", {label.region_modifier.meaning.lower()}" if label.region_modifier is not None else ""
        lines.append(f"in {label.region.meaning}{side}")
    if label.category is not None:
        lines.append(f"category: {label.category.meaning}")
    if not lines:
        lines.append("no coded concept (a DICOM SEG states a generic one with this name)")
    lines.append(label.provenance.describe())
    return "\n".join(lines)


def _fold(text: str) -> str:
    return re.sub(r"[\s_\-]+", " ", text.strip().lower())


class LabelTreeModel(QAbstractItemModel):
    """Groups (top level) and their labels, or a flat list of labels when no label has a group."""

    def __init__(self, document: SegmentationDocument, parent=None) -> None:
        super().__init__(parent)
        self.document = document
        self._groups: list[tuple[str, list[int]]] = []  # (name, values) in the order shown
        self._flat = True
        self._where: dict[int, tuple[int, int]] = {}  # value -> (group index or -1, row)
        self._shown: dict[int, Label] = {}  # the table as last shown (to find the rows a change touched)
        self._volumes: dict[int, float] = {}
        self._icons: dict[tuple[int, int, int], QIcon] = {}
        document.labels_changed.connect(self._on_labels_changed)
        document.label_map_changed.connect(self.rebuild)
        document.label_map_edited.connect(self._on_edited)
        self.rebuild()

    # --- structure ------------------------------------------------------------------------
    @staticmethod
    def _grouping(labels: dict[int, Label]) -> tuple[bool, list[tuple[str, list[int]]]]:
        if not any(label.group for label in labels.values()):
            return True, [("", list(labels))]
        groups: dict[str, list[int]] = {}
        for value, label in labels.items():  # the table is sorted by value: groups in order of their first
            groups.setdefault(label.group or UNGROUPED, []).append(value)
        if UNGROUPED in groups:
            groups[UNGROUPED] = groups.pop(UNGROUPED)  # last
        return False, list(groups.items())

    def rebuild(self) -> None:
        self.beginResetModel()
        labels = self.document.labels
        self._flat, self._groups = self._grouping(labels)
        self._where = {v: (-1 if self._flat else g, row) for g, (_, values) in enumerate(self._groups)
                       for row, v in enumerate(values)}
        self._shown = dict(labels)
        self._volumes = self.document.label_volumes_ml()
        self.endResetModel()

    def _on_labels_changed(self) -> None:
        labels = self.document.labels
        flat, groups = self._grouping(labels)
        if (flat, groups) != (self._flat, self._groups):
            self.rebuild()  # labels added, removed or regrouped
            return
        changed = [v for v, label in labels.items() if self._shown.get(v) is not label]
        renamed = any(self._shown[v].name != labels[v].name for v in changed)
        self._shown = dict(labels)
        roles: list[int] = [Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.DecorationRole, Qt.ItemDataRole.CheckStateRole,
                 Qt.ItemDataRole.ToolTipRole]
        if renamed:
            roles += [Qt.ItemDataRole.EditRole, SEARCH_ROLE, SORT_ROLE]  # the search and the sort look again
        self._announce(changed, (NAME, LOCK), roles)

    def _on_edited(self, edit) -> None:
        self._volumes = self.document.label_volumes_ml()
        self._announce([v for v in edit.values if v in self._where], (VOLUME, VOLUME),
                       [Qt.ItemDataRole.DisplayRole, SORT_ROLE])

    def _announce(self, values: list[int], columns: tuple[int, int], roles: list[int]) -> None:
        """dataChanged for the rows of ``values``, one signal per run of neighbouring rows (a hidden group of
        26 ribs is one signal, not 26), with the roles that changed: the filter re-reads only what it reads."""
        rows: dict[int, list[int]] = {}
        for value in values:
            group, row = self._where[value]
            rows.setdefault(group, []).append(row)
        for group, found in rows.items():
            found.sort()
            start = previous = found[0]
            for following in [*found[1:], None]:  # None: the last run ends
                if following is not None and following == previous + 1:
                    previous = following
                    continue
                parent = _NO_PARENT if group < 0 else group
                self.dataChanged.emit(self.createIndex(start, columns[0], parent),
                                      self.createIndex(previous, columns[1], parent), roles)
                if following is not None:
                    start = previous = following
        for group in set(rows) - {-1}:
            index = self.createIndex(group, NAME, _NO_PARENT)
            self.dataChanged.emit(index, index.siblingAtColumn(LOCK), roles)

    # --- what the view asks -----------------------------------------------------------------
    def index(self, row: int, column: int, parent=QModelIndex()) -> QModelIndex:
        if not self.hasIndex(row, column, parent):
            return QModelIndex()
        if not parent.isValid():
            return self.createIndex(row, column, _NO_PARENT)
        return self.createIndex(row, column, parent.row())

    def parent(self, index=QModelIndex()) -> QModelIndex:  # type: ignore[override]
        if not index.isValid() or index.internalId() == _NO_PARENT:
            return QModelIndex()
        return self.createIndex(int(index.internalId()), NAME, _NO_PARENT)

    def rowCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        if parent.column() > 0:
            return 0
        if not parent.isValid():
            return len(self._groups[0][1]) if self._flat else len(self._groups)
        if self._flat or parent.internalId() != _NO_PARENT:
            return 0
        return len(self._groups[parent.row()][1])

    def columnCount(self, parent=QModelIndex()) -> int:  # noqa: N802
        return len(HEADERS)

    def headerData(self, section: int, orientation, role=Qt.ItemDataRole.DisplayRole) -> Any:  # noqa: N802
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.DisplayRole:
            return HEADERS[section]
        if orientation == Qt.Orientation.Horizontal and role == Qt.ItemDataRole.ToolTipRole:
            return ("Name (tick: shown; F2: rename)", "Label value", "Volume in millilitres",
                    "Locked: no tool changes it")[section]
        return None

    def value_at(self, index: QModelIndex | QPersistentModelIndex) -> int | None:
        """The label value of a label row (None for a group row)."""
        if not index.isValid():
            return None
        if self._flat:
            return self._groups[0][1][index.row()]
        if index.internalId() == _NO_PARENT:
            return None
        return self._groups[int(index.internalId())][1][index.row()]

    def group_at(self, index: QModelIndex | QPersistentModelIndex) -> tuple[str, list[int]] | None:
        if not index.isValid() or self._flat or index.internalId() != _NO_PARENT:
            return None
        return self._groups[index.row()]

    def values_at(self, index: QModelIndex | QPersistentModelIndex) -> list[int]:
        """A label row's value, or every value of a group row."""
        value = self.value_at(index)
        if value is not None:
            return [value]
        group = self.group_at(index)
        return list(group[1]) if group else []

    def index_of(self, value: int, column: int = NAME) -> QModelIndex:
        where = self._where.get(value)
        if where is None:
            return QModelIndex()
        group, row = where
        return self.createIndex(row, column, _NO_PARENT if group < 0 else group)

    def group_index(self, name: str) -> QModelIndex:
        for row, (group, _) in enumerate(self._groups):
            if group == name and not self._flat:
                return self.createIndex(row, NAME, _NO_PARENT)
        return QModelIndex()

    @property
    def groups(self) -> list[tuple[str, list[int]]]:
        return [] if self._flat else [(name, list(values)) for name, values in self._groups]

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        if not index.isValid():
            return Qt.ItemFlag.NoItemFlags
        flags = Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable
        if index.column() in (NAME, LOCK):
            flags |= Qt.ItemFlag.ItemIsUserCheckable
        if index.column() == NAME and self.value_at(index) is not None:
            flags |= Qt.ItemFlag.ItemIsEditable
        return flags

    def data(self, index: QModelIndex | QPersistentModelIndex, role=Qt.ItemDataRole.DisplayRole) -> Any:
        if not index.isValid():
            return None
        value = self.value_at(index)
        if value is None:
            return self._group_data(index, role)
        label = self.document.labels.get(value)
        if label is None:
            return None
        column = index.column()
        if role == VALUE_ROLE:
            return value
        if role == GROUP_ROLE:
            return None
        if role == SEARCH_ROLE:
            return f"{_fold(label.name)}\n{value}"
        if role in (Qt.ItemDataRole.DisplayRole, Qt.ItemDataRole.EditRole):
            if column == NAME:
                return label.name
            if column == VALUE:
                return str(value)
            if column == VOLUME:
                return f"{self._volumes.get(value, 0.0):.1f}"
            return None
        if role == SORT_ROLE:
            return (_fold(label.name), value, self._volumes.get(value, 0.0), label.locked)[column]
        if role == Qt.ItemDataRole.CheckStateRole:
            if column == NAME:
                return Qt.CheckState.Checked if label.visible else Qt.CheckState.Unchecked
            if column == LOCK:
                return Qt.CheckState.Checked if label.locked else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.DecorationRole and column == NAME:
            return _swatch(label.color, self._icons)  # type: ignore[arg-type]
        if role == Qt.ItemDataRole.TextAlignmentRole and column in (VALUE, VOLUME):
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole:
            return f"{label.name} (label {value})\n{describe_codes(label)}"
        return None

    def _group_data(self, index: QModelIndex | QPersistentModelIndex, role) -> Any:
        name, values = self._groups[index.row()]
        labels = [self.document.labels[v] for v in values if v in self.document.labels]
        column = index.column()
        if role == GROUP_ROLE:
            return name
        if role == SEARCH_ROLE:
            return _fold(name)
        if role in (Qt.ItemDataRole.DisplayRole, SORT_ROLE):
            if column == NAME:
                return f"{name} ({len(labels)})" if role == Qt.ItemDataRole.DisplayRole else _fold(name)
            if column == VOLUME:
                total = sum(self._volumes.get(v, 0.0) for v in values)
                return f"{total:.0f}" if role == Qt.ItemDataRole.DisplayRole else total
            if column == VALUE and role == SORT_ROLE:
                return min(values) if values else 0
            return None
        if role == Qt.ItemDataRole.CheckStateRole and column in (NAME, LOCK):
            states = [label.visible if column == NAME else label.locked for label in labels]
            if all(states):
                return Qt.CheckState.Checked
            return Qt.CheckState.PartiallyChecked if any(states) else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.FontRole:
            from PySide6.QtGui import QFont

            font = QFont()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ToolTipRole:
            shown = sum(label.visible for label in labels)
            return f"{name}: {len(labels)} structures, {shown} shown (the model's grouping)"
        return None

    def setData(self, index: QModelIndex | QPersistentModelIndex, value: Any, role=Qt.ItemDataRole.EditRole) -> bool:  # noqa: N802
        """Every change goes to the document; the view redraws from its event."""
        if not index.isValid():
            return False
        values = self.values_at(index)
        if role == Qt.ItemDataRole.CheckStateRole and index.column() in (NAME, LOCK):
            state = Qt.CheckState(value) if not isinstance(value, Qt.CheckState) else value
            on = state == Qt.CheckState.Checked
            if self.value_at(index) is None:  # a group: a partial group becomes wholly on
                current = self.data(index, Qt.ItemDataRole.CheckStateRole)
                on = current != Qt.CheckState.Checked
            if index.column() == NAME:
                self.document.set_labels_visible(values, on)
            else:
                self.document.set_labels_locked(values, on)
            return True
        if role == Qt.ItemDataRole.EditRole and index.column() == NAME and self.value_at(index) is not None:
            text = str(value).strip()
            if not text or text == self.document.labels[values[0]].name:
                return False
            self.document.rename_label(values[0], text)
            return True
        return False


class LabelFilter(QSortFilterProxyModel):
    """Search as you type and sort inside groups (the groups stay in the model's order)."""

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self._needle = ""
        self.setRecursiveFilteringEnabled(True)  # a group shows while one of its structures matches
        self.setAutoAcceptChildRows(True)  # a group whose name matches shows all its structures
        self.setSortRole(SORT_ROLE)
        self.setFilterRole(SEARCH_ROLE)  # a change of colour or visibility does not make it filter again
        self.setDynamicSortFilter(False)  # a rename or a volume change does not move rows under the mouse

    def set_search(self, text: str) -> None:
        folded = _fold(text)
        if folded != self._needle:
            self.beginFilterChange()  # Qt 6.10's replacement for invalidateRowsFilter
            self._needle = folded
            self.endFilterChange(QSortFilterProxyModel.Direction.Rows)

    @property
    def search(self) -> str:
        return self._needle

    def filterAcceptsRow(self, row: int, parent: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        if not self._needle:
            return True
        index = self.sourceModel().index(row, NAME, parent)
        text = self.sourceModel().data(index, SEARCH_ROLE) or ""
        name, _, value = text.partition("\n")
        return self._needle in name or self._needle == value

    def lessThan(self, left: QModelIndex | QPersistentModelIndex, right: QModelIndex | QPersistentModelIndex) -> bool:  # noqa: N802
        model = self.sourceModel()
        if model.data(left, GROUP_ROLE) is not None:  # groups keep their order whichever way the rows sort
            earlier = left.row() < right.row()
            return earlier if self.sortOrder() == Qt.SortOrder.AscendingOrder else not earlier
        a, b = model.data(left, SORT_ROLE), model.data(right, SORT_ROLE)
        if a == b:
            return model.data(left, VALUE_ROLE) < model.data(right, VALUE_ROLE)
        return a < b
