"""medseg's own per-user folders, one rule for the app, the CLI and every layer.

- data (``$MEDSEG_DATA_DIR``): autosave sessions, logs, the training workspace — what medseg
  keeps for the user and must not lose;
- config (``$MEDSEG_CONFIG_DIR``): settings files such as the PACS servers;
- cache (``$MEDSEG_CACHE_DIR``): what can be made again — the demo study, retrieved PACS series.

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
