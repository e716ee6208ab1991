"""The app's settings (QSettings: recent studies, window/level presets, folders, choices) and its log file.

Every room reads and writes its settings here; the window frame (gui/shell) only composes.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path

from PySide6.QtCore import QSettings

from medseg import app_dirs

ORGANIZATION, APPLICATION = "medseg", "medseg"
MAX_RECENT = 10


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


def load_presets(defaults: dict[str, tuple[float, float]]) -> dict[str, tuple[float, float]]:
    """``defaults`` (the view state's built-in presets) with the user's saved ones over them."""
    store = settings()
    presets = dict(defaults)
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
