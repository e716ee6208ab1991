"""Help > About shows the device check (the same report as `medseg devices`)."""

from __future__ import annotations

import os

import pytest
from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QPushButton

from medseg.gui.shell.about_dialog import AboutDialog
from medseg.model.backends import resolve_device


def _menu_action(window, menu_title: str, text: str):
    menu = next(a.menu() for a in window.menuBar().actions() if a.text().replace("&", "") == menu_title)
    return next(a for a in menu.actions() if a.text() == text)


def test_help_about_shows_devices(window, qtbot, artifacts_dir):
    _menu_action(window, "Help", "About medseg").trigger()
    dialog = window.help.dialog
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


def _licences_dialog(window, qtbot):
    from medseg.gui.shell.licences_dialog import LicencesDialog

    _menu_action(window, "Help", "About medseg").trigger()
    about = window.help.dialog
    qtbot.waitExposed(about)
    button = next(b for b in about.findChildren(QPushButton) if b.text() == "Third-party licences…")
    button.click()
    dialog = about.licences
    assert isinstance(dialog, LicencesDialog)
    qtbot.waitExposed(dialog)
    return about, dialog


def test_help_about_shows_the_third_party_licences(window, qtbot, artifacts_dir):
    """From a checkout: the list the installed packages declare, with their licence texts."""
    from importlib.metadata import version

    about, dialog = _licences_dialog(window, qtbot)
    shown = dialog.text.toPlainText()
    assert f"  pydicom {version('pydicom')}: MIT" in shown
    assert f"  PySide6_Essentials {version('PySide6-Essentials')}: LGPL-3.0-only OR GPL-2.0-only OR GPL-3.0-only" in shown
    assert "GNU LESSER GENERAL PUBLIC LICENSE" in shown and "Permission is hereby granted, free of charge" in shown
    assert "pylibjpeg-libjpeg" not in shown
    dialog.grab().save(str(artifacts_dir / "about_licences.png"))
    dialog.reject()
    about.accept()


def test_help_about_in_a_bundle_shows_the_list_its_build_made(window, qtbot, tmp_path, monkeypatch):
    """A frozen app reads THIRD_PARTY_LICENSES.txt beside its README (sys._MEIPASS)."""
    import sys

    (tmp_path / "THIRD_PARTY_LICENSES.txt").write_text("Third-party software in medseg\n  example-package 1.0: MIT\n")
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    about, dialog = _licences_dialog(window, qtbot)
    assert dialog.text.toPlainText() == "Third-party software in medseg\n  example-package 1.0: MIT\n"
    dialog.reject()
    about.accept()


@pytest.fixture
def mac(fake_machine):
    fake_machine(cuda=0, mps=True)  # before the window: the panels list their devices once


def test_segment_and_training_menus_offer_what_the_machine_has(mac, window, driver, ct_dir, qtbot):
    """The Segment panel offers Apple MPS on a Mac; training (CUDA or CPU only) does not."""
    driver.open_image_file(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    segment_box = window.segment_panel.device_box
    assert [segment_box.itemData(i) for i in range(segment_box.count())] == ["auto", "mps", "cpu", "onnx-cpu"]
    # on the CPU "auto" lets a measurement choose the engine per model (medseg.model.cpu_runtime)
    assert segment_box.itemText(0) == "Automatic (CPU, fastest engine per model)"
    assert [segment_box.itemText(i) for i in (2, 3)] == ["CPU (PyTorch)", "CPU (ONNX Runtime)"]
    window.train_tab.training_panel.form.list_devices()  # what showing its page does: a job lists them
    qtbot.waitUntil(lambda: window.train_tab.training_panel.form.devices_ready, timeout=30_000)
    training_box = window.train_tab.training_panel.form.device
    assert [training_box.itemData(i) for i in range(training_box.count())] == ["auto", "cpu"]
    training_box.setCurrentIndex(training_box.findData("cpu"))
    assert window.train_tab.training_panel.form.settings().device == "cpu"
