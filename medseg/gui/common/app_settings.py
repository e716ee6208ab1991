"""Where the app's settings are kept between sessions: the one module that knows QSettings.

The settings themselves are the Qt-free model :data:`medseg.settings.SETTINGS` (threads, the model Segment
runs, recent studies, the dialogs' folders, ...): panels bind to it, never to QSettings. :func:`bind` fills it
from the store when a window opens and saves each change of a kept field as it happens; a field the command
line set for this session (``medseg gui --threads N``) is neither replaced nor saved. The window's own
state (its geometry and layout, the window/level presets) and the log file are kept here too.
"""

from __future__ import annotations

import logging
from logging.handlers import RotatingFileHandler
from pathlib import Path
from typing import Any

from PySide6.QtCore import QByteArray, QSettings

from medseg import app_dirs
from medseg import threads as thread_budget
from medseg.settings import SETTINGS, Settings, apply_threads

ORGANIZATION, APPLICATION = "medseg", "medseg"

# The fields kept between sessions and their keys (those of earlier releases: a user's choices survive an update).
KEPT = {"threads": "compute/threads", "segment_model": "model/path", "recent_studies": "recent",
        "last_folder": "last_folder", "results_folder": "results_folder"}
THREADS_SETTING = KEPT["threads"]  # 0: every usable core (the default)


def settings() -> QSettings:
    return QSettings(ORGANIZATION, APPLICATION)


def _stored(name: str, value: Any) -> Any:
    """A stored value as the field holds it; a hand-edited or foreign value gives the default."""
    if name == "threads":
        try:
            threads = int(value or 0)
        except (TypeError, ValueError):
            return 0
        # more than the box offers (a machine with fewer cores than where it was chosen): automatic
        return threads if 0 <= threads <= max(thread_budget.affinity_cores(), thread_budget.budget()) else 0
    if name == "recent_studies":
        value = [value] if isinstance(value, str) else (value or [])
        return tuple(str(item) for item in value)
    return str(value or "")


def load(model: Settings = SETTINGS) -> None:
    """Every kept field from the store (its default when nothing is stored), except the session's own; then the
    thread budget follows the threads setting (as each start of the app did)."""
    store = settings()
    values = {name: _stored(name, store.value(key)) for name, key in KEPT.items() if name not in model.session_only}
    _loading.add(id(model))
    try:
        model.update(**values)
    finally:
        _loading.discard(id(model))
    apply_threads(model)


_loading: set[int] = set()  # the models being filled from the store: what they hear is not saved back


def save(model: Settings, name: str, value: Any) -> None:
    """Keep a change of a kept field (not one the command line set for this session)."""
    if name not in KEPT or name in model.session_only or id(model) in _loading:
        return
    store = settings()
    if value is None:  # no model chosen: the built-in starter
        store.remove(KEPT[name])
    else:
        store.setValue(KEPT[name], list(value) if isinstance(value, tuple) else value)


def bind(model: Settings = SETTINGS) -> None:
    """A window opens: ``model`` as the last session left it (the command line's fields kept). Its changes are
    saved as they happen (:func:`save` observes :data:`~medseg.settings.SETTINGS` from the moment the app's GUI
    is imported)."""
    load(model)


SETTINGS.changed.connect(lambda name, value: save(SETTINGS, name, value))


def load_placement() -> tuple[QByteArray | None, str, float]:
    """The window's geometry, its view layout and the overlay's opacity as the last session left them."""
    store = settings()
    stored = store.value("view/overlay_opacity", 0.5)  # a string from the ini file, a float until it is written
    try:
        opacity = float(stored) if isinstance(stored, (str, int, float)) else 0.5
    except ValueError:
        opacity = 0.5
    return store.value("window/geometry"), str(store.value("view/layout", "2x2")), opacity


def save_placement(geometry: QByteArray, layout: str, opacity: float) -> None:
    store = settings()
    store.setValue("window/geometry", geometry)
    store.setValue("view/layout", layout)
    store.setValue("view/overlay_opacity", opacity)


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
