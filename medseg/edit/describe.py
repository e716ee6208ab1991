"""What an edit changed, in a sentence a clinician reads: "Grow 2 mm: bones +23.0 ml (from body 20.1 ml,
background 2.9 ml)".

Every operation changes voxels from some labels to others; the Delta knows exactly which (its old and
new values). Saying it after each one-shot operation (fill, grow, shrink, islands, interpolate,
smooth, merge) answers the questions users asked: did it do anything, how much, and whose voxels
did it take — e.g. Shrink gives voxels to background, not back to the label they came from.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np

from medseg.core.labels import Label
from medseg.edit.delta import Delta


def transfers(delta: Delta) -> dict[tuple[int, int], int]:
    """{(old value, new value): voxels} for the voxels ``delta`` changes."""
    old = delta.old.astype(np.int64)
    new = delta.new.astype(np.int64)
    width = int(max(old.max(initial=0), new.max(initial=0))) + 1
    pairs = np.bincount(old * width + new, minlength=width * width)
    return {(int(i) // width, int(i) % width): int(pairs[i]) for i in np.flatnonzero(pairs)}


def _ml(voxels: int, voxel_ml: float) -> str:
    ml = voxels * voxel_ml
    return f"{ml:.1f} ml" if ml >= 0.05 else f"{ml:.2f} ml" if ml >= 0.005 else f"{voxels} voxel{'s' * (voxels != 1)}"


def describe_change(delta: Delta, labels: Mapping[int, Label], voxel_ml: float, what: str) -> str:
    """``what``: the operation as the user named it ("Grow 2 mm"). Gains first, each with where its voxels
    came from; then what each label gave back to background."""
    def name(value: int) -> str:
        return "background" if value == 0 else labels[value].name if value in labels else f"label {value}"

    moved = transfers(delta)
    parts = []
    gained = sorted({new for _old, new in moved if new != 0})
    for value in gained:
        sources = sorted(((n, old) for (old, new), n in moved.items() if new == value), reverse=True)
        total = sum(n for n, _ in sources)
        origin = ", ".join(f"{name(old)} {_ml(n, voxel_ml)}" for n, old in sources)
        parts.append(f"{name(value)} +{_ml(total, voxel_ml)}" + (f" (from {origin})" if len(sources) > 1 else
                                                                 f" (from {name(sources[0][1])})"))
    # Voxels handed to another label are already said above ("bones … from body"); what remains is
    # what went back to background (shrink, erase, delete).
    for value in sorted({old for old, new in moved if old != 0 and new == 0}):
        parts.append(f"{name(value)} −{_ml(moved[(value, 0)], voxel_ml)} (to background)")
    return f"{what}: " + ("; ".join(parts) if parts else "nothing changed")
