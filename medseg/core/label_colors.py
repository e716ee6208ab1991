"""The one colour table: every label value and every known organ name gets one colour.

Model packages, training datasets, the editor's label table and the overlay all ask
here, so a label is drawn in the same colour wherever it comes from. It lives in ``core``
because ``io``, ``model`` and ``edit`` all use it (and ``model``/``edit`` may not import each other).

- :func:`color_for` — a name known to TotalSegmentator v2 (3D Slicer's anatomical
  colours) gets its standard colour; otherwise the value's row of the table; values past
  the table get golden-ratio hues, so neighbours stay distinct.
- :func:`distinct_color` — the colour of a label the user adds: as :func:`color_for` when that
  stands clearly apart from every colour already in the table, else the vivid hue farthest from them
  (label 2's row is a brown close to the starter's body: a grow preview in it was invisible over body).
- :func:`totalsegmentator_name` — the TotalSegmentator v2 'total' class name of a value.
"""

from __future__ import annotations

import colorsys
import json
from functools import lru_cache
from importlib import resources
from typing import Any, Iterable

BACKGROUND = (0, 0, 0)


@lru_cache(maxsize=1)
def _table() -> dict[str, Any]:
    try:
        table: dict[str, Any] = json.loads((resources.files("medseg.resources") / "label_colors.json").read_text())
        return table
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


# CIEDE2000 distance at which two overlay colours are told apart at a glance over a grey CT (about 2 is
# the least one can see side by side; the starter's body and label 2's row are 7 apart).
DISTINCT_DELTA_E = 25.0
_CANDIDATE_HUES = 36


def prepare_distinct_colors() -> None:
    """Import what :func:`distinct_color` needs (scikit-image's colour science) now. A worker thread calls
    it before its result is merged on the GUI thread, where the first import froze the window 0.2-1 s.
    By name: skimage.color is a lazy module, and importing it alone loads neither function."""
    from skimage.color import deltaE_ciede2000, rgb2lab  # noqa: F401


def distinct_color(value: int, name: str | None = None,
                   taken: Iterable[tuple[int, int, int]] = ()) -> tuple[int, int, int]:
    """The colour a new label gets in a table whose labels have the colours ``taken``: its own
    (:func:`color_for`) when it is at least DISTINCT_DELTA_E (CIEDE2000) from each of them, else the
    vivid hue farthest from all of them (and from black, the background). The same table gives the
    same colour, so a preview drawn before the label exists is in the colour it will get."""
    own = color_for(value, name)
    taken = [(int(color[0]), int(color[1]), int(color[2])) for color in taken]
    if value == 0 or not taken:
        return own
    import numpy as np
    from skimage.color import deltaE_ciede2000, rgb2lab

    def lab(colors: Any) -> "np.ndarray":
        return np.asarray(rgb2lab(np.asarray(colors, dtype=np.float64).reshape(-1, 1, 3) / 255.0)[:, 0, :])

    taken_lab = lab([*taken, BACKGROUND])
    if deltaE_ciede2000(lab([own]), taken_lab).min() >= DISTINCT_DELTA_E:
        return own
    candidates = [tuple(round(c * 255) for c in colorsys.hsv_to_rgb(index / _CANDIDATE_HUES, 0.8, 1.0))
                  for index in range(_CANDIDATE_HUES)]
    distance = deltaE_ciede2000(lab(candidates)[:, None, :], taken_lab[None, :, :]).min(axis=1)
    return candidates[int(distance.argmax())]  # type: ignore[return-value]


def totalsegmentator_name(value: int) -> str | None:
    name = _table().get("totalsegmentator_v2_total_names", {}).get(str(value))
    return None if name is None else str(name)


__all__ = ["color_for", "distinct_color", "DISTINCT_DELTA_E", "value_color", "name_color", "totalsegmentator_name", "BACKGROUND"]
