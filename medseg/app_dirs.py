"""medseg's own per-user folders, one rule for the app, the CLI and every layer.

- data (``$MEDSEG_DATA_DIR``): autosave sessions, logs, the training workspace — what medseg
  keeps for the user and must not lose;
- config (``$MEDSEG_CONFIG_DIR``): settings files such as the PACS servers;
- cache (``$MEDSEG_CACHE_DIR``): what can be made again — the demo study, retrieved PACS series;
- models (``$MEDSEG_MODELS``, else ``<data>/models``): the models the user installed, and beside it
  a read-only system-wide folder that IT fills (``$MEDSEG_SYSTEM_MODELS``, else the platform's shared
  data folder), consulted after the user's own.

Each is the platform's usual place for one folder named ``medseg`` (Qt's AppDataLocation doubled
the name on Linux: ``~/.local/share/medseg/medseg``). The user's results (segmentations, CSVs,
exports) never go here by default: they go next to the study or where the user saved last.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

APP = "medseg"


def _override(variable: str) -> Path | None:
    value = os.environ.get(variable, "").strip()
    return Path(value).expanduser() if value else None


def data_dir() -> Path:
    """``$MEDSEG_DATA_DIR``, else e.g. ``~/.local/share/medseg`` / ``%LOCALAPPDATA%\\medseg``."""
    override = _override("MEDSEG_DATA_DIR")
    if override is not None:
        return override
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / APP
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP
    return Path(os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share") / APP


def config_dir() -> Path:
    """``$MEDSEG_CONFIG_DIR``, else e.g. ``~/.config/medseg`` / ``%APPDATA%\\medseg``."""
    override = _override("MEDSEG_CONFIG_DIR")
    if override is not None:
        return override
    if sys.platform == "win32":
        return Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming") / APP
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Application Support" / APP
    return Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config") / APP


def cache_dir() -> Path:
    """``$MEDSEG_CACHE_DIR``, else e.g. ``~/.cache/medseg`` / ``%LOCALAPPDATA%\\medseg\\cache``."""
    override = _override("MEDSEG_CACHE_DIR")
    if override is not None:
        return override
    if sys.platform == "win32":
        return Path(os.environ.get("LOCALAPPDATA") or Path.home() / "AppData" / "Local") / APP / "cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / APP
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / APP


def models_dir() -> Path:
    """Where this user's models are installed: ``$MEDSEG_MODELS``, else ``<data_dir>/models``."""
    override = _override("MEDSEG_MODELS")
    return override if override is not None else data_dir() / "models"


def system_models_dirs() -> list[Path]:
    """Read-only folders of models installed for every user (by IT, e.g. from a pack):
    ``$MEDSEG_SYSTEM_MODELS`` (``os.pathsep``-separated; empty: none), else the platform's place."""
    value = os.environ.get("MEDSEG_SYSTEM_MODELS")
    if value is not None:
        return [Path(part).expanduser() for part in value.split(os.pathsep) if part.strip()]
    if sys.platform == "win32":
        return [Path(os.environ.get("PROGRAMDATA") or "C:\\ProgramData") / APP / "models"]
    if sys.platform == "darwin":
        return [Path("/Library/Application Support") / APP / "models"]
    shared = os.environ.get("XDG_DATA_DIRS") or "/usr/local/share:/usr/share"
    return [Path(part) / APP / "models" for part in shared.split(":") if part.strip()]


def is_app_folder(path: str | os.PathLike) -> bool:
    """True when ``path`` lies in one of medseg's own folders (a PACS cache series, the demo study)."""
    try:
        resolved = Path(path).resolve()
    except OSError:
        return False
    for root in (data_dir(), cache_dir(), config_dir()):
        try:
            resolved.relative_to(root.resolve())
            return True
        except (ValueError, OSError):
            continue
    return False
