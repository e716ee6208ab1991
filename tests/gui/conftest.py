"""Fixtures for GUI tests: a real MainWindow with settings isolated from the user's."""

from __future__ import annotations

from pathlib import Path

import pytest
from PySide6.QtCore import QSettings, QStandardPaths
from PySide6.QtWidgets import QFileDialog

from medseg.gui.shell.main_window import MainWindow


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    QStandardPaths.setTestModeEnabled(True)  # QSettings go to a test location; the log to $MEDSEG_DATA_DIR
    # ... and that location is one file per user: test runs side by side (several checkouts on one machine)
    # cleared each other's settings mid-test (the model chosen for Segment vanished). One file per test.
    QSettings.setPath(QSettings.Format.NativeFormat, QSettings.Scope.UserScope, str(tmp_path / "settings"))
    from medseg.gui.common import app_settings

    app_settings.settings().clear()
    app_settings.setup_logging()
    main = MainWindow()
    qtbot.addWidget(main)
    main.resize(1400, 820)
    main.show()
    qtbot.waitExposed(main)
    # the Segment panel imports PyTorch in a job as the window opens; the tests read its plan
    qtbot.waitUntil(lambda: main.segment_panel.runtime_ready, timeout=60_000)
    yield main
    main.document.mark_saved()  # a test's edits must not make closing ask
    main.close()


class Driver:
    """Drives the window through the same actions a click uses (file dialogs answered)."""

    def __init__(self, qtbot, window: MainWindow, monkeypatch) -> None:
        self.qtbot, self.window, self.monkeypatch = qtbot, window, monkeypatch

    def open_folder(self, folder: Path):
        return open_folder(self.qtbot, self.window, self.monkeypatch, folder)

    def load_row(self, browser, row: int):
        return load_row(self.qtbot, self.window, browser, row)

    def open_series(self, folder: Path, description: str | None = None):
        """Open a folder and load its (described) loadable series; returns the Volume."""
        browser = self.open_folder(folder)
        rows = [i for i, s in enumerate(browser.result.series)
                if s.loadable and (description is None or description in s.series_description)]
        assert rows, f"no loadable series in {folder}"
        return self.load_row(browser, rows[0])

    def open_image_file(self, path: Path):
        return open_image_file(self.qtbot, self.window, self.monkeypatch, path)

    def open_segmentation(self, path: Path):
        """File ▸ Open segmentation (Ctrl+L) answered by ``path``; returns what was opened (LabelFileResult)."""
        return open_segmentation(self.qtbot, self.window, self.monkeypatch, path)


@pytest.fixture
def driver(qtbot, window, monkeypatch) -> Driver:
    return Driver(qtbot, window, monkeypatch)


def open_folder(qtbot, window: MainWindow, monkeypatch, folder: Path):
    """File ▸ Open DICOM folder… with the dialog answered; returns the scanned browser."""
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(folder))
    window.open_folder_action.trigger()
    browser = window.opener.browser
    assert browser is not None
    if browser.result is None:
        with qtbot.waitSignal(browser.scan_finished, timeout=60_000):
            pass
    return browser


def load_row(qtbot, window: MainWindow, browser, row: int):
    """Double-click a row of the series browser and wait for the study to be shown."""
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as blocker:
        browser.table.cellDoubleClicked.emit(row, 0)
    return blocker.args[0]


def open_image_file(qtbot, window: MainWindow, monkeypatch, path: Path):
    """File ▸ Open files… with the dialog answered by one NIfTI/NRRD file."""
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(path)], ""))
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as blocker:
        window.open_files_action.trigger()
    return blocker.args[0]


def open_segmentation(qtbot, window: MainWindow, monkeypatch, path: Path):
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    with qtbot.waitSignal(window.segmentation_files.opened, timeout=120_000) as blocker:
        window.open_segmentation_action.trigger()
    return blocker.args[0]
