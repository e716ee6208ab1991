"""The Edit panel: tools, the active tool's options (:mod:`medseg.gui.editing.tool_options`), the active label and
its table actions, the paint rules, the operations on the active label, undo/redo.

Every widget is bound to a Property of the document's tool controller or calls one
document method: the panel holds no editing state of its own.
"""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtGui import QAction, QActionGroup, QColor, QIcon, QKeySequence, QPixmap
from PySide6.QtWidgets import (
    QAbstractButton,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QGroupBox,
    QHBoxLayout,
    QInputDialog,
    QLabel,
    QPushButton,
    QSizePolicy,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.edit.operations import CATALOGUE, tools
from medseg.gui.common.bind import bind
from medseg.gui.common.colors import label_rgb
from medseg.gui.common.view_state import ViewState
from medseg.gui.editing.grow_runner import GrowRunner
from medseg.gui.editing.option_form import OptionForms
from medseg.gui.editing.prompt_options import PromptOptions
from medseg.gui.editing.prompt_runner import PromptRunner
from medseg.gui.editing.tool_options import ToolOptions


def button_operations() -> tuple[str, ...]:
    """The catalogue's operations the panel offers as buttons on the active label: those that take nothing
    but labels and settings (the others are mouse tools, the Locked box, or run by Segment). Generated, so
    their names are the command line's and the recipe's."""
    return tuple(name for name, op in CATALOGUE.items() if op.gesture is None and not op.inputs and not op.locks)


OPERATIONS_PER_ROW = 4
TOOLS_PER_ROW = 3  # eleven tools; four to a row made the panel wider than an 800 px screen allows


def _swatch(color: tuple[int, int, int]) -> QIcon:
    pixmap = QPixmap(14, 14)
    pixmap.fill(QColor(*color))
    return QIcon(pixmap)


class EditToolsPanel(QGroupBox):
    error = Signal(object)  # a MedsegError from an operation, for the window's error dialog
    done = Signal()  # a step finished from the panel (Apply, Cancel, an operation): the keys belong to the view again

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__("Edit", parent)
        self.document = document
        self.view = view
        controller = view.tools
        tool_row = self._tool_row(controller)
        label_grid = self._label_grid()
        form = self._rules(controller)
        params, ops = self._operations(controller)
        undo_row = self._undo_row(document)
        self._tool_options(controller)
        layout = QVBoxLayout(self)
        layout.addLayout(tool_row)
        layout.addLayout(label_grid)
        layout.addWidget(self.tool_options)
        layout.addLayout(form)
        layout.addLayout(params)
        layout.addLayout(ops)
        layout.addLayout(undo_row)

        # never squeezed below its size: the label table below takes what height is left
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self._listed: tuple | None = None  # what the label lists show (refilled only when it changes)
        document.labels_changed.connect(self._fill_labels)
        document.label_map_changed.connect(self._fill_labels)
        view.active_label_changed.connect(self._fill_labels)
        document.history_changed.connect(self._sync_history)
        self._fill_labels()
        self._sync_history()

    def _tool_row(self, controller) -> QGridLayout:
        """The tool buttons."""
        # One checkable action per tool of the catalogue, with its key; the window adds them too, so the key
        # works wherever the focus is (see medseg.gui.editing.tool_keys). The buttons show the actions.
        self.tool_actions: dict[str, QAction] = {}
        self.tool_buttons: dict[str, QToolButton] = {}
        group = QActionGroup(self)
        group.setExclusive(True)
        tool_row = QGridLayout()
        for index, (name, tool) in enumerate(tools().items()):
            action = QAction(f"{tool.title} tool", self)
            action.setIconText(tool.title)
            action.setObjectName(name)
            action.setCheckable(True)
            action.setShortcut(QKeySequence(tool.shortcut))
            action.setToolTip(f"{tool.title} ({tool.shortcut}): {tool.help}")
            action.triggered.connect(lambda _=False, n=name: controller.tool.set(n))
            group.addAction(action)
            button = QToolButton(self)
            button.setDefaultAction(action)
            button.setObjectName(name)
            tool_row.addWidget(button, index // TOOLS_PER_ROW, index % TOOLS_PER_ROW)
            self.tool_actions[name] = action
            self.tool_buttons[name] = button
        controller.tool.changed.connect(self._sync_tool)
        self._sync_tool(controller.tool.value)
        return tool_row

    def _label_grid(self) -> QGridLayout:
        """The active label, its lock, Add, Delete, and the second label (merge into, combine with)."""
        self.label_box = QComboBox(self)
        self.label_box.setToolTip("The active label: what the brush and fill paint (ctrl-click a voxel to pick)")
        self.label_box.currentIndexChanged.connect(self._on_label_chosen)
        add = QPushButton("Add", self)
        add.clicked.connect(self.add_label)
        self.lock_box = QCheckBox("Locked", self)
        self.lock_box.setObjectName("lock")  # the catalogue's "lock" operation
        self.lock_box.setToolTip("A locked label is never overwritten or changed by any tool")
        self.lock_box.toggled.connect(self._on_lock)
        delete = QPushButton("Delete", self)
        delete.clicked.connect(self.delete_label)
        self.merge_box = QComboBox(self)  # the second label: merge into it; union, intersect, subtract with it
        self.merge_box.setObjectName("b")
        self.merge_box.setToolTip("The second label: merge the active label into it, or combine the two")
        self.merge_box.currentIndexChanged.connect(self._on_other_chosen)
        merge = self.merge_button = QPushButton("Merge into", self)
        merge.clicked.connect(self.merge_label)
        label_grid = QGridLayout()
        label_grid.addWidget(QLabel("Label", self), 0, 0)
        label_grid.addWidget(self.label_box, 0, 1, 1, 2)
        label_grid.addWidget(add, 0, 3)
        label_grid.addWidget(self.lock_box, 1, 0, 1, 2)
        label_grid.addWidget(delete, 1, 3)
        label_grid.addWidget(merge, 2, 0)
        label_grid.addWidget(self.merge_box, 2, 1, 1, 3)
        return label_grid

    def _rules(self, controller) -> QGridLayout:
        """The paint rules: every tool and operation that paints keeps to them, so they are always shown."""
        self.hu_masked = bind(QCheckBox("HU from", self), controller.hu_masked)
        self.hu_masked.setToolTip("Paint only where the HU lies in this range (the range is also Threshold's)")
        self.hu_low = bind(QDoubleSpinBox(self), controller.hu_low)
        self.hu_high = bind(QDoubleSpinBox(self), controller.hu_high)
        self.only_background = bind(QCheckBox("Only over background", self), controller.only_background)
        form = QGridLayout()
        form.addWidget(self.hu_masked, 0, 0)
        form.addWidget(self.hu_low, 0, 1)
        form.addWidget(QLabel("to", self), 0, 2)
        form.addWidget(self.hu_high, 0, 3)
        form.addWidget(self.only_background, 1, 0, 1, 4)
        form.setColumnStretch(1, 1)
        form.setColumnStretch(3, 1)
        for widget, name in ((self.hu_low, "hu_low"), (self.hu_high, "hu_high")):
            widget.setObjectName(name)  # the catalogue's setting
        return form

    def _operations(self, controller) -> tuple[QGridLayout, QGridLayout]:
        """The operations on the active label (a button each) and their settings (a spin box each)."""
        # a spin box per setting of the button operations, in catalogue order (the HU range is the brush's)
        self.setting_boxes: dict[str, QDoubleSpinBox] = {}
        for name in button_operations():
            for parameter in CATALOGUE[name].settings:
                if parameter.name not in self.setting_boxes and parameter.name not in ("hu_low", "hu_high"):
                    box = bind(QDoubleSpinBox(self), controller.setting(parameter))
                    box.setObjectName(parameter.name)
                    self.setting_boxes[parameter.name] = box
        self.operation_buttons: dict[str, QAbstractButton] = {"lock": self.lock_box}
        # The operations act on the active label, whose box may be scrolled out of sight: say which here.
        self.operations_target = QLabel(self)
        self.operations_target.setObjectName("operations-target")
        ops = QGridLayout()
        ops.addWidget(self.operations_target, 0, 0, 1, 3)
        for i, name in enumerate(button_operations()):
            op = CATALOGUE[name]
            button = QPushButton(op.title, self)
            button.setObjectName(name)
            button.setToolTip(op.help)
            button.clicked.connect(lambda _=False, n=name: self.run_operation(n))
            ops.addWidget(button, 1 + i // OPERATIONS_PER_ROW, i % OPERATIONS_PER_ROW)
            self.operation_buttons[name] = button
        params = QGridLayout()  # two settings a row: the side panel is about 440 px wide
        for i, (name, box) in enumerate(self.setting_boxes.items()):
            params.addWidget(QLabel(controller.settings[name].label, self), i // 2, 2 * (i % 2))
            params.addWidget(box, i // 2, 2 * (i % 2) + 1)
        params.setColumnStretch(1, 1)
        params.setColumnStretch(3, 1)
        return params, ops

    def _undo_row(self, document: SegmentationDocument) -> QHBoxLayout:
        """Undo, Redo and what the history holds."""
        self.undo_button = QPushButton("Undo", self)
        self.redo_button = QPushButton("Redo", self)
        self.undo_button.clicked.connect(document.undo)
        self.redo_button.clicked.connect(document.redo)
        self.history_label = QLabel(self)
        self.history_label.setToolTip("Undo steps kept and the memory they use (oldest are forgotten past the budget)")
        undo_row = QHBoxLayout()
        undo_row.addWidget(self.undo_button)
        undo_row.addWidget(self.redo_button)
        undo_row.addWidget(self.history_label, 1)
        return undo_row

    def _tool_options(self, controller) -> None:
        """The tools' options, built from what each tool declares (medseg.edit.effects); the active tool's shown."""
        self.grow_runner = GrowRunner(controller, self)
        self.grow_runner.failed.connect(self.error)
        self.prompt_runner = PromptRunner(controller, self)
        self.prompt_runner.failed.connect(self.error)
        self.prompt_options = PromptOptions(controller, self.prompt_runner, self)
        self.prompt_options.done.connect(self.done)
        self.options = OptionForms(controller, self, custom={"prompt": self.prompt_options},
                                   before={("seeds", "apply"): self.grow_runner.wait})
        self.options.done.connect(self.done)
        self.radius, self.sphere = self.options.widgets["radius_mm"], self.options.widgets["sphere"]
        self.fill_3d, self.fill_by_hu = self.options.widgets["fill_3d"], self.options.widgets["fill_by_hu"]
        self.tool_options = ToolOptions(controller, self.options.groups, self)
        # Tab goes through them where they are shown, between the label rows and the paint rules; and a focused
        # option hidden by another tool hands the focus to the paint rules below, not to a panel further off
        previous: QWidget = self.merge_button
        for widget in self.options.focus_order:
            QWidget.setTabOrder(previous, widget)
            previous = widget

    # --- sync from the document ------------------------------------------------------------
    def _sync_tool(self, name: str) -> None:
        self.tool_actions[name].setChecked(True)  # not triggered: the tool is set already; the group unchecks the rest

    def _fill_labels(self) -> None:
        doc = self.document
        # The two lists show values, names and colours: a change of visibility or lock (a group of 26 hidden)
        # leaves them as they are, which with 117 structures is most of the work saved.
        listed = (self.view.active_label, doc.volume is not None,
                  tuple((v, e.name, e.color) for v, e in doc.labels.items()))
        if listed != self._listed:
            self._listed = listed
            self._fill_lists()
        self._on_other_chosen(self.merge_box.currentIndex())
        self._show_target()

    def _fill_lists(self) -> None:
        doc = self.document
        for box in (self.label_box, self.merge_box):
            box.blockSignals(True)
            box.clear()
        for value, entry in doc.labels.items():
            self.label_box.addItem(_swatch(label_rgb(entry)), f"{value}  {entry.name}", value)
            if value != self.view.active_label:
                self.merge_box.addItem(_swatch(label_rgb(entry)), f"{value}  {entry.name}", value)
        index = self.label_box.findData(self.view.active_label)
        if index < 0 and doc.volume is not None:
            self.label_box.addItem(f"{self.view.active_label}  (new)", self.view.active_label)
            index = self.label_box.count() - 1
        self.label_box.setCurrentIndex(index)
        for box in (self.label_box, self.merge_box):
            box.blockSignals(False)

    def _show_target(self) -> None:
        entry = self.document.labels.get(self.view.active_label)
        if entry is not None:
            r, g, b = label_rgb(entry)
            self.operations_target.setText(f"Operations on <span style='color: rgb({r},{g},{b})'>■</span> "
                                           f"<b>{self.view.active_label} {entry.name}</b>"
                                           + (" (locked)" if entry.locked else ""))
        else:
            self.operations_target.setText("Operations on the active label (none yet)")
        self.lock_box.blockSignals(True)
        self.lock_box.setChecked(bool(entry and entry.locked))
        self.lock_box.setEnabled(entry is not None)
        self.lock_box.blockSignals(False)

    def _sync_history(self) -> None:
        history = self.document.history
        self.undo_button.setEnabled(history.can_undo())
        self.redo_button.setEnabled(history.can_redo())
        self.undo_button.setToolTip(f"Undo {history.next_undo()} (Ctrl+Z)" if history.can_undo() else "Nothing to undo")
        self.redo_button.setToolTip(f"Redo {history.next_redo()} (Ctrl+Shift+Z)" if history.can_redo() else "Nothing to redo")
        text = history.summary()
        if history.evicted:
            text += f" ({history.evicted} oldest forgotten)"
        self.history_label.setText(text)

    # --- user actions -----------------------------------------------------------------------
    def _on_label_chosen(self, index: int) -> None:
        value = self.label_box.itemData(index)
        if value is not None:
            self.view.set_active_label(int(value))

    def _on_other_chosen(self, index: int) -> None:
        value = self.merge_box.itemData(index)
        self.view.tools.other_label.set(int(value) if value is not None else 0)

    def _on_lock(self, locked: bool) -> None:
        if self.view.active_label in self.document.labels:
            self.document.set_label_locked(self.view.active_label, locked)

    def add_label(self, name: str | None = None) -> None:
        if self.document.volume is None:
            return
        if not name:
            name, ok = QInputDialog.getText(self, "New label", "Name of the new label:")
            if not ok or not name.strip():
                return
        self._guard(lambda: self.view.set_active_label(self.document.add_label(name.strip()).value))

    def delete_label(self) -> None:
        value = self.view.active_label
        if value in self.document.labels:
            self._guard(lambda: self.document.delete_label(value))

    def merge_label(self) -> None:
        target = self.merge_box.currentData()
        if target is not None and self.view.active_label in self.document.labels:
            source = self.view.active_label

            def merge() -> None:
                self.document.merge_labels(source, int(target))
                self.view.set_active_label(int(target))

            self._guard(merge)

    def run_operation(self, name: str) -> None:
        self._guard(lambda: self.view.tools.run_operation(name))
        self.done.emit()

    def _guard(self, action) -> None:
        from medseg.errors import MedsegError

        try:
            action()
        except MedsegError as error:
            self.error.emit(error)
