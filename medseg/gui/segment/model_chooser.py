"""The Segment panel's model chooser: the built-in starter, the installed models and the installable
ones (size, licence, structures), a model folder, and the Models dialog — one list instead of a bare
folder picker. The choice is a *reference* (a catalogue id, or a folder) kept in the settings model
(``medseg.settings.SETTINGS.segment_model``)."""

from __future__ import annotations

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QComboBox, QWidget

from medseg.errors import MedsegError
from medseg.gui.segment.elided import ElidedComboBox

# item data: what choosing the item does (strings: Qt keeps them as they are)
BUILTIN, FOLDER, MANAGE = "builtin:", "folder:", "manage:"


def use_item(reference: str) -> str:
    return f"use:{reference}"


def install_item(model_id: str) -> str:
    return f"install:{model_id}"


def chosen_reference() -> str | None:
    """The stored choice: a catalogue id, a folder, or None (the built-in starter)."""
    from medseg.settings import SETTINGS

    return SETTINGS.segment_model


def store_reference(reference: str | None) -> None:
    from medseg.settings import SETTINGS

    SETTINGS.segment_model = reference or None


class ModelChooser(ElidedComboBox):  # a long folder's name is elided, never widening the panel
    """Choosing an item emits what the user wants; the window carries it out."""

    use = Signal(object)  # a reference to segment with (None: the built-in starter)
    install = Signal(str)  # an installable catalogue id
    pick_folder = Signal()
    manage = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setToolTip("The model Segment runs: the built-in starter, an installed model, or one to install")
        self.setSizeAdjustPolicy(QComboBox.SizeAdjustPolicy.AdjustToMinimumContentsLengthWithIcon)
        self.setMinimumContentsLength(24)
        self.activated.connect(self._activated)
        self.fill()

    def fill(self) -> None:
        """Rebuild the list from the catalogue and the installed models; select the stored choice."""
        from medseg.catalogue import load_catalogue
        from medseg.catalogue.folders import installed_models

        current = chosen_reference()
        self.blockSignals(True)
        self.clear()
        self.addItem("Built-in starter: body, lungs, bones", BUILTIN)
        try:
            catalogue = list(load_catalogue())
            installed = {record.id: record for record in installed_models()}
        except MedsegError as error:
            catalogue, installed = [], {}
            self.setToolTip(f"The model catalogue cannot be read: {error}")
        for model_id, record in installed.items():
            if record.entry.get("kind") == "interactive":
                continue  # it segments from prompts: the Edit panel's Interactive AI tool runs it, not Segment
            title = record.entry.get("title", model_id)
            self.addItem(f"{title} — installed", use_item(model_id))
            self.setItemData(self.count() - 1, f"{model_id} {record.version}: "
                             f"{len(record.entry.get('structures', []))} structures", 3)  # ToolTipRole
        # only what medseg can run on its own; the rest is in the Models dialog, with the reason
        installable = [e for e in catalogue if not e.builtin and e.id not in installed and e.downloadable
                       and e.support in ("exact", "pipeline", "networks") and not e.interactive]
        if installable:
            self.insertSeparator(self.count())
            for entry in installable:
                size = f"{entry.size / 2**20:.0f} MB" if entry.size is not None else "size told on download"
                licence = entry.licence.spdx + (", licence to accept" if entry.licence.acceptance_required else "")
                self.addItem(f"Install {entry.title} ({len(entry.structures)} structures; {size}; {licence})…",
                             install_item(entry.id))
        self.insertSeparator(self.count())
        if current and self.findData(use_item(current)) < 0:
            self.addItem(f"Folder: {current}", use_item(current))
        self.addItem("Model folder…", FOLDER)
        self.addItem("Manage models…", MANAGE)
        self._select(current)
        self.blockSignals(False)

    def showPopup(self) -> None:  # noqa: N802
        # what is installed is read again as the list opens: a model installed from the command line
        # (`medseg models install`) while the window was open was still offered as "Install …"
        self.fill()
        super().showPopup()

    def _select(self, reference: str | None) -> None:
        index = self.findData(BUILTIN if reference is None else use_item(reference))
        self.setCurrentIndex(max(index, 0))

    def choose_item(self, data) -> bool:
        """Activate the item holding ``data`` as a click would (False when there is none)."""
        index = self.findData(data)
        if index < 0:
            return False
        self.setCurrentIndex(index)
        self._activated(index)
        return True

    def _activated(self, index: int) -> None:
        kind, _, value = str(self.itemData(index) or BUILTIN).partition(":")
        if kind in ("install", "folder", "manage"):
            self._select(chosen_reference())  # the list shows what Segment runs until that changes
        if kind == "builtin":
            self.use.emit(None)
        elif kind == "use":
            self.use.emit(value)
        elif kind == "install":
            self.install.emit(value)
        elif kind == "folder":
            self.pick_folder.emit()
        elif kind == "manage":
            self.manage.emit()
