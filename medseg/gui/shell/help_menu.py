"""The Help menu: the README, the keyboard and mouse sheet (F1), the log folder, About."""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, QUrl
from PySide6.QtGui import QAction, QDesktopServices
from PySide6.QtWidgets import QDialog, QMenu, QWidget

from medseg.gui.common import app_settings
from medseg.gui.shell import app_shell


class HelpMenu(QObject):
    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window  # the dialogs' parent; the F1 sheet lists its actions' shortcuts
        self.dialog: QDialog | None = None  # the one shown last

    def fill(self, menu: QMenu, action: Callable[..., QAction]) -> None:
        """``action(text, slot, shortcut)``: the window's way to make an action (its shortcut works anywhere)."""
        menu.addAction(action("README", self.open_readme))
        menu.addAction(action("Keyboard and mouse…", self.show_shortcuts, "F1"))
        menu.addAction(action("Log folder", self.open_log_folder))
        menu.addAction(action("About medseg", self.show_about))

    def show_about(self) -> None:
        from medseg.gui.shell.about_dialog import AboutDialog

        self.dialog = AboutDialog(self.window)
        self.dialog.open()

    def show_shortcuts(self) -> None:
        self.dialog = app_shell.shortcuts_box(self.window)
        self.dialog.open()

    def open_readme(self) -> None:
        readme = app_shell.readme_path()
        if readme is None or not QDesktopServices.openUrl(QUrl.fromLocalFile(str(readme))):
            self.show_shortcuts()

    def open_log_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(app_settings.log_directory())))
