"""Application shell pieces: the versions About shows, the README, and the shortcut list (F1)."""

from __future__ import annotations

import platform
import sys
from pathlib import Path

from PySide6.QtCore import qVersion
from PySide6.QtWidgets import QDialog, QWidget

from medseg import __version__

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


def readme_path() -> Path | None:
    """The README next to the package (source checkout or bundle), if there is one."""
    for folder in Path(__file__).resolve().parents:
        candidate = folder / "README.md"
        if candidate.is_file():
            return candidate
    return None


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


def shortcuts_box(parent: QWidget) -> QDialog:
    """The F1 sheet: two columns, never taller than the screen (medseg.gui.shell.shortcuts_dialog)."""
    from medseg.gui.shell.shortcuts_dialog import ShortcutsDialog

    return ShortcutsDialog(shortcut_rows(parent), parent)
