"""The one colour table: every label value and every known organ name gets one colour.

Model packages, training datasets, the editor's label table and the overlay all ask
here, so a label is drawn in the same colour wherever it comes from. It lives in ``core``
because ``io``, ``model`` and ``edit`` all use it (and ``model``/``edit`` may not import each other).

- :func:`color_for` — a name known to TotalSegmentator v2 (3D Slicer's anatomical
  colours) gets its standard colour; otherwise the value's row of the table; values past
  the table get golden-ratio hues, so neighbours stay distinct.
- :func:`totalsegmentator_name` — the TotalSegmentator v2 'total' class name of a value.
"""

from __future__ import annotations

import colorsys
import json
from functools import lru_cache
from importlib import resources
from typing import Any

BACKGROUND = (0, 0, 0)


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        return json.loads((resources.files("medseg.resources") / "label_colors.json").read_text())
    except (OSError, ValueError, ModuleNotFoundError):
        return {"colors": {}, "totalsegmentator_v2_total_names": {}}


@lru_cache(maxsize=1)
def _name_colors() -> dict[str, tuple[int, int, int]]:
    table = _table()
    colors = table.get("colors", {})
    return {
        _normal(name): tuple(int(c) for c in colors[value])  # type: ignore[misc]
        for value, name in table.get("totalsegmentator_v2_total_names", {}).items() if value in colors
    }


def _normal(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def value_color(value: int) -> tuple[int, int, int]:
    """The colour of a label value (0 is background, never drawn)."""
    if value == 0:
        return BACKGROUND
    row = _table().get("colors", {}).get(str(value))
    if row is not None:
        return (int(row[0]), int(row[1]), int(row[2]))
    hue = (value * 0.618033988749895) % 1.0  # golden-ratio steps keep neighbours distinct
    r, g, b = colorsys.hsv_to_rgb(hue, 0.65, 0.95)
    return (round(r * 255), round(g * 255), round(b * 255))


def name_color(name: str | None) -> tuple[int, int, int] | None:
    """The standard colour of an organ name TotalSegmentator / 3D Slicer know, else None."""
    if not name:
        return None
    return _name_colors().get(_normal(name))


def color_for(value: int, name: str | None = None) -> tuple[int, int, int]:
    """The colour a label gets when nobody chose one: by its name if known, else by its value."""
    if value == 0:
        return BACKGROUND
    return name_color(name) or value_color(value)


def totalsegmentator_name(value: int) -> str | None:
    return _table().get("totalsegmentator_v2_total_names", {}).get(str(value))


__all__ = ["color_for", "value_color", "name_color", "totalsegmentator_name", "BACKGROUND"]
