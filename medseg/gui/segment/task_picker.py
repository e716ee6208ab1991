"""Choose several TotalSegmentator tasks for one Segment: grouped by subject (organs, vessels, heart, head and
neck, muscles, bones, lesions, other: medseg.catalogue.task_groups), the installed ones to tick.

Segment then runs every ticked task on the open series into one segmentation
(medseg.workflows.segment_many): the first task keeps its values, a later task's colliding values move, each
structure keeps its task as its source, and a crop model several tasks need runs once. A task that is not
installed is listed greyed, with an Install button (the Models dialog installs it, its licence first), so
the user sees what exists without leaving the panel.
"""

from __future__ import annotations

from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QBrush, QPalette
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

ID_ROLE = int(Qt.ItemDataRole.UserRole)


@dataclass(frozen=True)
class TaskChoice:
    """One task the picker lists (from the catalogue and what is installed)."""

    model_id: str  # the catalogue id, e.g. totalsegmentator/liver_segments
    task: str  # TotalSegmentator's name of it
    structures: int
    installed: bool


def task_choices() -> list[TaskChoice]:
    """Every task the catalogue lists (an entry that names a TotalSegmentator task), installed or not."""
    from medseg.catalogue import load_catalogue
    from medseg.catalogue.folders import installed_models
    from medseg.errors import MedsegError

    try:
        catalogue = load_catalogue()
        installed = {record.id for record in installed_models()}
    except MedsegError:
        return []
    # as the model list: what is installed, and what medseg can install and run on its own
    return [TaskChoice(entry.id, entry.task, len(entry.structures), entry.id in installed)
            for entry in catalogue if entry.task is not None and (entry.id in installed or (
                entry.downloadable and entry.support in ("exact", "pipeline", "networks")))]


@dataclass(frozen=True)
class TaskMaker:
    """Who makes a task's labels, as their provenance names it (a TotalSegmentator task's model is named by
    its catalogue id): what the window asks before a Segment could replace labels someone else made."""

    name: str
    version: str


def makers(model_ids: tuple[str, ...]) -> list[TaskMaker]:
    from medseg.catalogue import load_catalogue

    catalogue = load_catalogue()
    return [TaskMaker(model_id, catalogue.get(model_id).version) for model_id in model_ids]


def any_installed() -> bool:
    return any(choice.installed for choice in task_choices())


class TaskPicker(QDialog):
    """``chosen``: the catalogue ids ticked before (the model Segment runs, when it is a task)."""

    install = Signal(str)  # a task that is not installed: the window installs it (Models dialog)

    def __init__(self, choices: list[TaskChoice], chosen: tuple[str, ...], parent: QWidget | None = None) -> None:
        from medseg.catalogue.task_groups import grouped

        super().__init__(parent)
        self.setWindowTitle("TotalSegmentator tasks to run together")
        self.tree = QTreeWidget(self)
        self.tree.setHeaderHidden(True)
        self.tree.itemChanged.connect(lambda _item, _column: self._count())
        self.tree.currentItemChanged.connect(lambda _now, _before: self._selected())
        self.count_label = QLabel(self)
        self.install_button = QPushButton("Install…", self)
        self.install_button.setToolTip("Install the selected task (its licence first); it can be ticked then")
        self.install_button.clicked.connect(self._install)
        buttons = QDialogButtonBox.StandardButton.Ok | QDialogButtonBox.StandardButton.Cancel
        self.buttons = QDialogButtonBox(buttons, self)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        intro = QLabel("Tick the tasks Segment runs on this series, into one segmentation: each structure keeps "
                       "its task as its source; a value two tasks share moves (the notes say which); a crop "
                       "model several tasks need runs once. Tick none to run the model chosen above alone.", self)
        intro.setWordWrap(True)
        row = QHBoxLayout()
        row.addWidget(self.count_label, 1)
        row.addWidget(self.install_button)
        layout = QVBoxLayout(self)
        layout.addWidget(intro)
        layout.addWidget(self.tree, 1)
        layout.addLayout(row)
        layout.addWidget(self.buttons)
        by_task = {choice.task: choice for choice in choices}
        greyed = QBrush(self.palette().color(QPalette.ColorGroup.Disabled, QPalette.ColorRole.Text))
        self.groups: dict[str, QTreeWidgetItem] = {}
        self.items: dict[str, QTreeWidgetItem] = {}
        self.tree.blockSignals(True)
        for group, tasks in grouped(by_task).items():
            parent_item = QTreeWidgetItem(self.tree, [group])
            parent_item.setFlags(parent_item.flags() | Qt.ItemFlag.ItemIsUserCheckable | Qt.ItemFlag.ItemIsAutoTristate)
            self.groups[group] = parent_item
            for task in tasks:
                choice = by_task[task]
                text = f"{task} ({choice.structures} structure{'s' if choice.structures != 1 else ''})"
                item = QTreeWidgetItem(parent_item, [text if choice.installed else f"{text} — not installed"])
                item.setData(0, ID_ROLE, choice.model_id)
                if choice.installed:
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    ticked = choice.model_id in chosen
                    item.setCheckState(0, Qt.CheckState.Checked if ticked else Qt.CheckState.Unchecked)
                else:  # selectable (for Install), not tickable
                    item.setFlags(item.flags() & ~Qt.ItemFlag.ItemIsUserCheckable)
                    item.setForeground(0, greyed)
                    item.setToolTip(0, f"{choice.model_id} is not installed: Install… installs it")
                self.items[choice.model_id] = item
            parent_item.setExpanded(any(by_task[t].installed for t in tasks))  # the tickable ones in sight
        self.tree.blockSignals(False)
        self.resize(440, 560)
        self._count()
        self._selected()

    def chosen(self) -> tuple[str, ...]:
        """The catalogue ids ticked, in the picker's order (the first keeps its values)."""
        return tuple(model_id for model_id, item in self.items.items() if item.checkState(0) == Qt.CheckState.Checked
                     and item.flags() & Qt.ItemFlag.ItemIsUserCheckable)

    def _count(self) -> None:
        count = len(self.chosen())
        self.count_label.setText(f"{count} task{'s' if count != 1 else ''} ticked"
                                 + (" (Segment runs the model chosen above)" if count == 0 else ""))

    def _selected(self) -> None:
        item = self.tree.currentItem()
        self.install_button.setEnabled(item is not None and item.data(0, ID_ROLE) is not None
                                       and not item.flags() & Qt.ItemFlag.ItemIsUserCheckable)

    def _install(self) -> None:
        item = self.tree.currentItem()
        if item is not None and item.data(0, ID_ROLE) is not None:
            self.install.emit(item.data(0, ID_ROLE))
            self.reject()  # the Models dialog takes over; the picker reopens with the task installed


def describe(chosen: tuple[str, ...]) -> str:
    """The panel button's text."""
    if not chosen:
        return "Several tasks: none (the model above alone)…"
    names = [model_id.rsplit("/", 1)[-1] for model_id in chosen]
    return f"Tasks: {len(chosen)} ({' + '.join(names)})…"
