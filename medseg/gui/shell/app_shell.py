"""Application shell pieces: settings, the log file, About and the shortcut list."""

from __future__ import annotations

import logging
import platform
import sys
from logging.handlers import RotatingFileHandler
from pathlib import Path

from PySide6.QtCore import QSettings, qVersion
from PySide6.QtWidgets import QMessageBox, QWidget

from medseg import __version__, app_dirs
from medseg.gui.viewer.view_state import DEFAULT_PRESETS

ORGANIZATION, APPLICATION = "medseg", "medseg"
MAX_RECENT = 10

# The mouse and the keys no menu item carries; every menu item's and tool's shortcut is read from the
# window itself (shortcut_rows), so the F1 list cannot drift from what the keys do.
MOUSE_AND_KEYS = (
    ("Scroll slices", "Mouse wheel, Up/Down, Left/Right; Page Up/Down = 10 slices"),
    ("Set crosshair (all views follow)", "Left click / drag"),
    ("Window/level", "Right-drag (or Shift + left-drag): → wider, ↓ higher level"),
    ("Pan", "Middle-drag"),
    ("Zoom", "Ctrl + wheel"),
    ("Maximise a view / back", "Double-click the view, or F7"),
    ("Layouts 1×3 / 2×2 / single", "F5 / F6 / F7"),
    ("Pick the label under the mouse (it becomes the active label)", "Ctrl + left click"),
    ("Change a value in a box or slider with the wheel", "Click into it first (the wheel scrolls the panel)"),
    ("3D view: turn / pan / zoom", "Left-drag / middle-drag (or Ctrl + left-drag) / wheel"),
    ("3D view: move the crosshair to a surface", "Left click on it"),
    ("3D view: look from a side, reset, screenshot", "A P L R S I buttons, ☰ menu"),
)


def settings() -> QSettings:
    return QSettings(ORGANIZATION, APPLICATION)


def recent_studies() -> list[str]:
    value = settings().value("recent", [])
    if isinstance(value, str):
        value = [value]
    return [str(v) for v in (value or [])]


def add_recent_study(path: str) -> list[str]:
    recent = [path] + [p for p in recent_studies() if p != path]
    recent = recent[:MAX_RECENT]
    settings().setValue("recent", recent)
    return recent


def load_presets() -> dict[str, tuple[float, float]]:
    store = settings()
    presets = dict(DEFAULT_PRESETS)
    size = store.beginReadArray("presets")
    for index in range(size):
        store.setArrayIndex(index)
        try:
            presets[str(store.value("name"))] = (float(store.value("center")), float(store.value("width")))
        except (TypeError, ValueError):
            continue  # a hand-edited settings file must not stop the app
    store.endArray()
    return presets


def save_presets(presets: dict[str, tuple[float, float]]) -> None:
    store = settings()
    store.remove("presets")
    store.beginWriteArray("presets", len(presets))
    for index, (name, (center, width)) in enumerate(presets.items()):
        store.setArrayIndex(index)
        store.setValue("name", name)
        store.setValue("center", center)
        store.setValue("width", width)
    store.endArray()


def readme_path() -> Path | None:
    """The README next to the package (source checkout or bundle), if there is one."""
    for folder in Path(__file__).resolve().parents:
        candidate = folder / "README.md"
        if candidate.is_file():
            return candidate
    return None


def log_directory() -> Path:
    """``logs`` in medseg's data folder ($MEDSEG_DATA_DIR or the platform's: medseg.app_dirs)."""
    return app_dirs.data_dir() / "logs"


def setup_logging() -> Path:
    """Log to a rotating file. Log calls never pass patient names or IDs (by convention,
    checked in the tests), so the file can be attached to a bug report."""
    folder = log_directory()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "medseg.log"
    root = logging.getLogger("medseg")
    for old in [h for h in root.handlers if isinstance(h, RotatingFileHandler)]:
        if Path(old.baseFilename) != path:  # the log folder moved (settings, tests)
            root.removeHandler(old)
            old.close()
    if not any(isinstance(h, RotatingFileHandler) for h in root.handlers):
        handler = RotatingFileHandler(path, maxBytes=2_000_000, backupCount=3, encoding="utf-8")
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root.addHandler(handler)
        root.setLevel(logging.INFO)
    return path


def versions_text() -> str:
    """Versions of the stack, read from package metadata (importing torch would take seconds)."""
    from importlib.metadata import PackageNotFoundError, version

    parts = [f"medseg {__version__}", f"Python {platform.python_version()} ({sys.platform})", f"Qt {qVersion()}"]
    for package in ("PySide6-Essentials", "numpy", "pydicom", "SimpleITK", "torch", "onnxruntime"):
        try:
            parts.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            parts.append(f"{package} not installed")
    return "\n".join(parts)


def about_box(parent: QWidget) -> QMessageBox:
    box = QMessageBox(QMessageBox.Icon.Information, "About medseg",
                      "medseg — desktop CT segmentation.\n\nNot a medical device: for research use.\n\n" + versions_text(),
                      QMessageBox.StandardButton.Ok, parent)
    return box


def shortcut_rows(window: QWidget) -> list[tuple[str, str]]:
    """(what, keys) for every action and tool button of ``window`` that has a shortcut, then the mouse."""
    from PySide6.QtGui import QAction, QKeySequence
    from PySide6.QtWidgets import QAbstractButton

    rows: dict[str, str] = {}
    for action in window.findChildren(QAction):
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        what = action.text().replace("&&", "\0").replace("&", "").replace("\0", "&").rstrip("…")
        if keys and what:
            rows.setdefault(what, keys)
    for button in window.findChildren(QAbstractButton):
        keys = button.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys and button.text():
            rows.setdefault(f"{button.text()} tool", keys)
    return [*rows.items(), *MOUSE_AND_KEYS]


def shortcuts_box(parent: QWidget) -> QWidget:
    """The F1 sheet: two columns, never taller than the screen (medseg.gui.shell.shortcuts_dialog)."""
    from medseg.gui.shell.shortcuts_dialog import ShortcutsDialog

    return ShortcutsDialog(shortcut_rows(parent), parent)
