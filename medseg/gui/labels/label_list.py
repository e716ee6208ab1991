"""The label table at TotalSegmentator's scale: 117 structures under their groups, searchable and sortable.

- **Groups** (the model's own: organs, vertebrae, cardiac, muscles, ribs…) collapse and expand;
  a group's check boxes show, hide, lock or unlock all its structures at once.
- **Search as you type** (Ctrl+F): part of a name (``l3``, ``rib left``), a value, or a group's name.
- **Solo** shows only the selected structures (or group); **All** shows every one again.
- **Jump** (Enter or double-click) makes a structure the active label and centres the views on it.
- **Sort** by name, value or volume (click a column's header); groups keep their order.
- **Keyboard**: arrows move, ← → collapse and expand, Space shows or hides, Shift+Space locks, Enter jumps,
  F2 renames, Esc in the search box clears it and returns to the list.

Every change goes through the document (:class:`~medseg.gui.labels.label_tree.LabelTreeModel` only reads).
"""

from __future__ import annotations

from PySide6.QtCore import QItemSelectionModel, QModelIndex, Qt, Signal
from PySide6.QtGui import QAction, QColor, QKeySequence
from PySide6.QtWidgets import (
    QAbstractItemView,
    QColorDialog,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QMenu,
    QPushButton,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.colors import label_rgb
from medseg.gui.common.view_state import ViewState
from medseg.gui.labels.label_tree import LOCK, NAME, VALUE, VOLUME, LabelFilter, LabelTreeModel


class LabelTreeView(QTreeView):
    """The tree with the panel's keys: Space shows/hides, Shift+Space locks/unlocks, Enter jumps."""

    jump_requested = Signal(QModelIndex)
    toggle_requested = Signal(QModelIndex, int)  # index, column (NAME: visible, LOCK: locked)

    def keyPressEvent(self, event) -> None:  # noqa: N802
        index = self.currentIndex()
        if self.state() != QAbstractItemView.State.EditingState and index.isValid():
            if event.key() == Qt.Key.Key_Space and not event.modifiers() & ~Qt.KeyboardModifier.ShiftModifier:
                # letters are the window's tool keys (L is level trace): Shift+Space locks
                self.toggle_requested.emit(index, LOCK if event.modifiers() else NAME)
                return
            if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter):
                self.jump_requested.emit(index)
                return
        super().keyPressEvent(event)

    def mouseDoubleClickEvent(self, event) -> None:  # noqa: N802
        """A double-click on a structure's name renames it, and the slices stay where they are (a double-click
        that opened the editor also jumped: issue 52); on its value or volume it jumps (``doubleClicked``)."""
        index = self.indexAt(event.position().toPoint())
        if (event.button() == Qt.MouseButton.LeftButton and index.isValid() and index.column() == NAME
                and index.flags() & Qt.ItemFlag.ItemIsEditable):
            if self.state() != QAbstractItemView.State.EditingState:
                self.setCurrentIndex(index)
                self.edit(index)
            event.accept()
            return
        super().mouseDoubleClickEvent(event)

    def keyboardSearch(self, search: str) -> None:  # noqa: N802
        """Letters are the window's tool keys; the search box is where names are typed."""


class LabelList(QWidget):
    """Search box, the grouped table and its buttons."""

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.view = view
        self.model = LabelTreeModel(document, self)
        self.proxy = LabelFilter(self)
        self.proxy.setSourceModel(self.model)

        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search structures  (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setToolTip("Part of a name (e.g. 'L3', 'rib left'), a label value, or a group's name")
        self.tree = LabelTreeView(self)
        self.tree.setModel(self.proxy)
        self.tree.setUniformRowHeights(True)  # 117 rows lay out in one pass
        self.tree.setAlternatingRowColors(True)
        self.tree.setIndentation(14)
        self.tree.setRootIsDecorated(True)
        self.tree.setSortingEnabled(True)
        self.tree.sortByColumn(VALUE, Qt.SortOrder.AscendingOrder)
        self.tree.setSelectionMode(QAbstractItemView.SelectionMode.ExtendedSelection)
        self.tree.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.tree.setEditTriggers(QAbstractItemView.EditTrigger.EditKeyPressed
                                  | QAbstractItemView.EditTrigger.SelectedClicked)
        self.tree.setContextMenuPolicy(Qt.ContextMenuPolicy.CustomContextMenu)
        self.tree.setStyleSheet("QTreeView::item { padding: 0px 1px; }")
        # never squeezed to a few rows by the panels above: the side panel scrolls instead
        self.tree.setMinimumHeight(14 * (self.tree.fontMetrics().height() + 2))
        header = self.tree.header()
        header.setStretchLastSection(False)
        header.setSectionResizeMode(NAME, QHeaderView.ResizeMode.Stretch)
        # Sized to their contents once per new table, not on every change: ResizeToContents re-measures all
        # 117 rows whenever one cell changes (a hidden group of 26 was 6 000 reads of the model).
        for column in (VALUE, VOLUME, LOCK):
            header.setSectionResizeMode(column, QHeaderView.ResizeMode.Interactive)
        header.setSortIndicatorShown(True)
        self.tree.setToolTip("Tick: shown · Lock: no tool changes it · Enter or double-click its value: jump to it · "
                             "Space: show/hide · Shift+Space: lock · F2 or double-click its name: rename · "
                             "right-click: more")

        self.all_button = QPushButton("All", self)
        self.all_button.setToolTip("Show every structure")
        self.none_button = QPushButton("None", self)
        self.none_button.setToolTip("Hide every structure")
        self.solo_button = QPushButton("Solo", self)
        self.solo_button.setToolTip("Show only the selected structures (or group)")
        self.colour_button = QPushButton("Colour…", self)
        self.colour_button.setToolTip("Change the colour of the selected structure")
        for button in (self.all_button, self.none_button, self.solo_button, self.colour_button):
            button.setAutoDefault(False)
        buttons = QHBoxLayout()
        buttons.setSpacing(2)
        for button in (self.all_button, self.none_button, self.solo_button, self.colour_button):
            buttons.addWidget(button)
        buttons.addStretch(1)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.search)
        layout.addWidget(self.tree, 1)
        layout.addLayout(buttons)

        find = QAction("Find structure", self)
        find.setShortcut(QKeySequence.StandardKey.Find)
        find.setShortcutContext(Qt.ShortcutContext.WindowShortcut)
        find.triggered.connect(self.focus_search)
        self.addAction(find)
        self.find_action = find

        self.search.textChanged.connect(self.set_search)
        self.search.returnPressed.connect(self._jump_from_search)
        self.search.installEventFilter(self)
        self.all_button.clicked.connect(lambda: document.set_all_labels_visible(True))
        self.none_button.clicked.connect(lambda: document.set_all_labels_visible(False))
        self.solo_button.clicked.connect(self.solo_selection)
        self.colour_button.clicked.connect(lambda: self.choose_colour(self.tree.currentIndex()))
        self.tree.setExpandsOnDoubleClick(False)  # a double-click jumps (on a group: expands or collapses it; on a name: renames)
        self.tree.doubleClicked.connect(self.jump)
        self.tree.jump_requested.connect(self.jump)
        self.tree.toggle_requested.connect(self.toggle)
        self.tree.customContextMenuRequested.connect(self._context_menu)
        self.model.modelReset.connect(self._after_reset)
        self._after_reset()

    # --- what the user asks ------------------------------------------------------------------
    def set_search(self, text: str) -> None:
        self.proxy.set_search(text)
        if self.proxy.search:
            self.tree.expandAll()
            first = self._first_label(QModelIndex())
            if first is not None:
                self.tree.setCurrentIndex(first)

    def focus_search(self) -> None:
        self.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.search.selectAll()

    def jump(self, index: QModelIndex) -> bool:
        """Centre the views on the structure of ``index`` (a group: expand or collapse it)."""
        source = self.proxy.mapToSource(index)
        value = self.model.value_at(source)
        if value is None:
            if index.isValid():
                self.tree.setExpanded(index, not self.tree.isExpanded(index))
            return False
        return self.view.centre_on_label(value)

    def select(self, value: int) -> None:
        """Make a structure's row current and visible (the 3D view's pick, the status), without moving the views."""
        index = self.proxy.mapFromSource(self.model.index_of(value))
        if not index.isValid() and self.proxy.search:
            self.search.clear()  # the row was filtered out: show everything again
            index = self.proxy.mapFromSource(self.model.index_of(value))
        if index.isValid():
            self.tree.scrollTo(index)
            self.tree.setCurrentIndex(index)

    def jump_to(self, value: int) -> bool:
        """Select a structure's row (made visible) and centre the views on it."""
        index = self.proxy.mapFromSource(self.model.index_of(value))
        if index.isValid():
            self.tree.scrollTo(index)
            self.tree.setCurrentIndex(index)
        return self.view.centre_on_label(value)

    def toggle(self, index: QModelIndex, column: int) -> None:
        """Space / L: flip the row's (or the group's) visibility or lock through its check box."""
        source = self.proxy.mapToSource(index).siblingAtColumn(column)
        if not source.isValid():
            return
        state = self.model.data(source, Qt.ItemDataRole.CheckStateRole)
        flipped = Qt.CheckState.Unchecked if state == Qt.CheckState.Checked else Qt.CheckState.Checked
        self.model.setData(source, flipped, Qt.ItemDataRole.CheckStateRole)

    def selected_values(self) -> list[int]:
        values: list[int] = []
        for index in self.tree.selectionModel().selectedRows(NAME):
            values += self.model.values_at(self.proxy.mapToSource(index))
        if not values and self.tree.currentIndex().isValid():
            values = self.model.values_at(self.proxy.mapToSource(self.tree.currentIndex()))
        return sorted(set(values))

    def solo_selection(self) -> None:
        values = self.selected_values()
        if values:
            self.document.show_only(values)

    def set_group_visible(self, group: str, visible: bool) -> None:
        self.document.set_labels_visible(self._group_values(group), visible)

    def set_group_locked(self, group: str, locked: bool) -> None:
        self.document.set_labels_locked(self._group_values(group), locked)

    def _group_values(self, group: str) -> list[int]:
        return next((values for name, values in self.model.groups if name == group), [])

    def choose_colour(self, index: QModelIndex) -> None:
        value = self.model.value_at(self.proxy.mapToSource(index))
        if value is None:
            return
        color = QColorDialog.getColor(QColor(*label_rgb(self.document.labels[value])), self,
                                      f"Colour of {self.document.labels[value].name}")
        if color.isValid():
            self.document.set_label_color(value, (color.red(), color.green(), color.blue()))

    def visible_rows(self) -> int:
        """Structure rows the search leaves (tests and the status)."""
        return sum(self.proxy.rowCount(self.proxy.index(r, 0)) or (0 if self._is_group(r) else 1)
                   for r in range(self.proxy.rowCount()))

    # --- internals -------------------------------------------------------------------------
    def _is_group(self, row: int) -> bool:
        return self.model.value_at(self.proxy.mapToSource(self.proxy.index(row, 0))) is None

    def _first_label(self, parent: QModelIndex) -> QModelIndex | None:
        for row in range(self.proxy.rowCount(parent)):
            index = self.proxy.index(row, NAME, parent)
            if self.model.value_at(self.proxy.mapToSource(index)) is not None:
                return index
            found = self._first_label(index)
            if found is not None:
                return found
        return None

    def _jump_from_search(self) -> None:
        index = self.tree.currentIndex()
        if index.isValid():
            self.jump(index)
            self.tree.setFocus(Qt.FocusReason.OtherFocusReason)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        from PySide6.QtCore import QEvent

        if watched is self.search and event.type() == QEvent.Type.KeyPress:
            if event.key() == Qt.Key.Key_Escape:
                self.search.clear()
                self.tree.setFocus(Qt.FocusReason.OtherFocusReason)
                return True
            if event.key() == Qt.Key.Key_Down:
                self.tree.setFocus(Qt.FocusReason.OtherFocusReason)
                if not self.tree.currentIndex().isValid() and self.proxy.rowCount():
                    self.tree.selectionModel().setCurrentIndex(
                        self.proxy.index(0, NAME), QItemSelectionModel.SelectionFlag.ClearAndSelect
                        | QItemSelectionModel.SelectionFlag.Rows)
                return True
        return False

    def _after_reset(self) -> None:
        self.proxy.sort(self.tree.header().sortIndicatorSection(), self.tree.header().sortIndicatorOrder())
        for column in (VALUE, VOLUME, LOCK):
            self.tree.resizeColumnToContents(column)
        if self.proxy.search:
            self.tree.expandAll()
        else:
            for row in range(self.proxy.rowCount()):
                self.tree.setExpanded(self.proxy.index(row, 0), True)

    def _context_menu(self, position) -> None:
        index = self.tree.indexAt(position)
        if not index.isValid():
            return
        source = self.proxy.mapToSource(index)
        value = self.model.value_at(source)
        menu = QMenu(self)
        if value is not None:
            label = self.document.labels[value]
            menu.addAction(f"Jump to {label.name}", lambda: self.jump(index))
            menu.addAction("Show only this (solo)", lambda: self.document.show_only([value]))
            menu.addAction("Colour…", lambda: self.choose_colour(index))
            menu.addAction("Rename", lambda: self.tree.edit(index.siblingAtColumn(NAME)))
            group = label.group
        else:
            group = (self.model.group_at(source) or ("", []))[0]
        if group:
            menu.addSeparator()
            values = self._group_values(group)
            menu.addAction(f"Show only {group}", lambda: self.document.show_only(values))
            menu.addAction(f"Show {group}", lambda: self.set_group_visible(group, True))
            menu.addAction(f"Hide {group}", lambda: self.set_group_visible(group, False))
            menu.addAction(f"Lock {group}", lambda: self.set_group_locked(group, True))
            menu.addAction(f"Unlock {group}", lambda: self.set_group_locked(group, False))
        menu.popup(self.tree.viewport().mapToGlobal(position))
        self._menu = menu  # kept for tests
