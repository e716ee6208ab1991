"""Prompts as a user writes them (patient coordinates in mm, LPS) turned into voxel prompts.

The command line's ``--prompt`` values:

    point:X,Y,Z[:neg]             a click (positive unless ``:neg``)
    box:X0,Y0,Z0,X1,Y1,Z1[:neg]   two opposite corners; drawn on one slice, so one axis is flat
    scribble:FILE[:neg]           a painted stroke: a mask on the image's grid (nonzero = painted)
    lasso:FILE[:neg]              a filled outline on one slice, as a mask on the image's grid

:func:`parse_prompt` checks the syntax (nothing is read); :func:`resolve_prompt` places a parsed
prompt on an image (a mask file must already be read, on the image's own grid) and refuses one
that falls outside it. Both raise :class:`~medseg.model.interactive.prompt_outcome.PromptError` naming
the prompt, so a command can check all of them before anything runs.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

from medseg.core.volume import Volume
from medseg.model.interactive.prompt_outcome import PromptError, PromptResult
from medseg.model.interactive.session import InteractiveSession

KINDS = ("point", "box", "scribble", "lasso")


@dataclass(frozen=True)
class PromptSpec:
    """A prompt as written: coordinates in patient mm (LPS), or the path of a mask file."""

    kind: str
    positive: bool
    coordinates: tuple[float, ...] = ()
    path: str = ""
    text: str = ""


@dataclass
class VoxelPrompt:
    """A prompt on an image's voxels, (z, y, x) as the image array."""

    kind: str
    positive: bool
    point: tuple[float, float, float] | None = None
    box: list[list[int]] | None = None
    mask: np.ndarray | None = None
    origin: tuple[int, int, int] = (0, 0, 0)

    def apply(self, session: InteractiveSession) -> PromptResult:
        if self.kind == "point":
            return session.add_point(self.point, self.positive)  # type: ignore[arg-type]
        if self.kind == "box":
            return session.add_box(self.box, self.positive)  # type: ignore[arg-type]
        method = session.add_scribble if self.kind == "scribble" else session.add_lasso
        return method(self.mask, self.origin, self.positive)  # type: ignore[arg-type]


def parse_prompt(text: str) -> PromptSpec:
    kind, _, rest = text.partition(":")
    kind = kind.strip().lower()
    if kind not in KINDS or not rest:
        raise PromptError(f"prompt {text!r}: expected one of " + ", ".join(f"{k}:..." for k in KINDS),
                          hint="e.g. point:-12.5,40,-100 or box:-30,20,-100,10,60,-100:neg (patient mm, LPS)")
    positive = True
    if rest.lower().endswith(":neg"):
        rest, positive = rest[:-4], False
    elif rest.lower().endswith(":pos"):
        rest = rest[:-4]
    if kind in ("scribble", "lasso"):
        if not rest.strip():
            raise PromptError(f"prompt {text!r}: {kind} needs a mask file")
        return PromptSpec(kind, positive, path=rest.strip(), text=text)
    try:
        numbers = tuple(float(v) for v in rest.split(","))
    except ValueError:
        raise PromptError(f"prompt {text!r}: coordinates must be numbers separated by commas") from None
    wanted = 3 if kind == "point" else 6
    if len(numbers) != wanted or not all(math.isfinite(v) for v in numbers):
        raise PromptError(f"prompt {text!r}: a {kind} takes {wanted} finite numbers (mm), got {len(numbers)}")
    return PromptSpec(kind, positive, coordinates=numbers, text=text)


def resolve_prompt(spec: PromptSpec, image: Volume, mask: Volume | None = None) -> VoxelPrompt:
    """Place a parsed prompt on ``image``; ``mask`` is the read mask file of a scribble or lasso."""
    shape = image.shape_zyx
    if spec.kind == "point":
        zyx = _to_zyx(image, spec.coordinates)
        if not all(-0.5 <= c < s - 0.5 for c, s in zip(zyx, shape)):
            raise PromptError(f"prompt {spec.text!r}: the point is outside the image "
                              f"({_extent_text(image)})")
        return VoxelPrompt("point", spec.positive, point=tuple(zyx))  # type: ignore[arg-type]
    if spec.kind == "box":
        first, second = _to_zyx(image, spec.coordinates[:3]), _to_zyx(image, spec.coordinates[3:])
        box = []
        for a, b, size in zip(first, second, shape):
            lo, hi = sorted((round(a), round(b)))
            lo, hi = max(0, lo), min(size, hi + 1)  # corners are voxels: both belong to the box
            if hi <= lo:
                raise PromptError(f"prompt {spec.text!r}: the box lies outside the image ({_extent_text(image)})")
            box.append([lo, hi])
        if all(hi - lo > 1 for lo, hi in box):
            raise PromptError(f"prompt {spec.text!r}: a box is drawn on one slice, so two of its corners' "
                              "coordinates along one axis must be on the same slice")
        flat = sum(1 for lo, hi in box if hi - lo == 1)
        if flat == 3:  # nnInteractive would take it as a 1 x 1 x 1 box: never what was meant
            raise PromptError(f"prompt {spec.text!r}: the box's two corners fall in the same voxel; a box needs two "
                              "opposite corners on its slice", hint="for a click, write point:X,Y,Z")
        if flat == 2:
            raise PromptError(f"prompt {spec.text!r}: the box is one voxel wide along two of the image's axes (a "
                              "line, not a box): a box on one slice spans at least 2 voxels along both axes of it")
        return VoxelPrompt("box", spec.positive, box=box)
    if mask is None:
        raise PromptError(f"prompt {spec.text!r}: the {spec.kind}'s mask file was not read")
    if not image.same_grid(mask):
        raise PromptError(f"the {spec.kind} mask is not on the image's grid (size, spacing, origin and "
                          "direction must match)", path=spec.path)
    painted = np.asarray(mask.array) != 0
    hits = [np.flatnonzero(painted.any(axis=tuple(a for a in range(3) if a != axis))) for axis in range(3)]
    if any(h.size == 0 for h in hits):
        raise PromptError(f"the {spec.kind} mask is empty", path=spec.path)
    lo = [int(h[0]) for h in hits]
    hi = [int(h[-1]) + 1 for h in hits]
    crop = painted[tuple(slice(a, b) for a, b in zip(lo, hi))].astype(np.uint8)
    return VoxelPrompt(spec.kind, spec.positive, mask=crop, origin=tuple(lo))  # type: ignore[arg-type]


def _to_zyx(image: Volume, point_lps: Sequence[float]) -> list[float]:
    x, y, z = image.physical_to_index(np.asarray(point_lps, dtype=np.float64))
    return [float(z), float(y), float(x)]


def _extent_text(image: Volume) -> str:
    corners = [image.index_to_physical(np.array(c, dtype=np.float64))
               for c in ((0, 0, 0), tuple(n - 1 for n in image.size_xyz))]
    low = np.minimum(*corners)
    high = np.maximum(*corners)
    return "image spans " + ", ".join(f"{a} {lo:.1f}..{hi:.1f} mm" for a, lo, hi in zip("xyz", low, high))
