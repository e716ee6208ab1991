"""Help > About shows the device check (the same report as `medseg devices`)."""

from __future__ import annotations

import os

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QPushButton

from medseg.gui.about_dialog import AboutDialog
from medseg.model.backends import resolve_device


def _menu_action(window, menu_title: str, text: str):
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == menu_title)
    return next(a for a in menu.actions() if a.text() == text)


def test_help_about_shows_devices(window, qtbot, artifacts_dir):
    _menu_action(window, "Help", "About medseg").trigger()
    dialog = window.dialog
    assert isinstance(dialog, AboutDialog)
    qtbot.waitExposed(dialog)
    shown = dialog.devices_text.toPlainText()
    assert f"Device used by 'auto': {resolve_device('auto')}" in shown
    assert f"{os.cpu_count()} logical cores" in shown
    assert "Training: available" in shown
    dialog.grab().save(str(artifacts_dir / "about_devices.png"))
    copy = next(b for b in dialog.findChildren(QPushButton) if b.text() == "Copy")
    copy.click()
    assert QGuiApplication.clipboard().text() == dialog.text()
    assert "PySide6-Essentials" in dialog.text() and shown in dialog.text()
    dialog.accept()
