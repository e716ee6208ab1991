"""What a prompt will cost on this computer, said before it runs.

A prompt's time is almost all network passes over the model's patch (192^3 for nnInteractive), and a pass
takes about the same time whatever the prompt: what differs is how many passes a prompt needs
(:mod:`.session`'s order of operations). Before it runs that can only be estimated:

* a prompt whose extent, with a third of the patch around it, fits the patch runs one pass (more when
  its answer reaches the patch's faces and the session zooms out);
* a larger one runs one zoomed-out pass, then full-resolution patches over where the object changed:
  about as many as cover the prompt's own extent (each patch counts its core, the patch less its 24-voxel
  margins); fewer when the prompt changes only part of an object, more when the object is deeper than the
  slice the prompt was drawn on.

A pass's seconds come from a measurement on this computer: the session's own last full-patch pass when it
has run one, else the measured runtime choice that calibration wrote into the model's folder
(``runtime.json``, :mod:`.calibration`). Without either the cost is unknown, and is said so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence

ZOOM_CONTEXT = 3  # nnInteractive's first zoom: the prompt's extent with a third of the patch around it
REACHES_PAST = "if the object reaches past the patch"
LARGER = "if the object is deeper than the prompt's slice"


@dataclass(frozen=True)
class PromptCost:
    """The passes a prompt is expected to need (``more``: when it needs more) and what a pass costs here."""

    passes: int
    more: str  # when more passes follow ("if the object reaches past the patch"); "" when none can
    seconds_per_pass: float | None
    source: str  # where the seconds were measured, in words ("" when not measured)
    patch: tuple[int, ...] = ()
    small_first: bool = False  # the first pass runs on a smaller patch (a fraction of a full pass's cost)

    @property
    def seconds(self) -> float | None:
        if self.seconds_per_pass is None:
            return None
        return self.passes * self.seconds_per_pass

    def text(self) -> str:
        """"about 40 s on this computer (2 network passes of about 20 s, measured …; more if …)"."""
        passes = f"{'' if self.passes == 1 else 'about '}{self.passes} network pass{'es' if self.passes != 1 else ''}"
        tail = f"; more {self.more}" if self.more else ""
        if self.seconds_per_pass is None:
            return (f"{passes}{tail}; the time of a pass is not measured on this computer yet (the first prompt "
                    "measures it)")
        head = f"about {duration_text(self.seconds)} on this computer"
        if self.small_first:
            head += ", less when the object stays small"
        return f"{head} ({passes} of about {duration_text(self.seconds_per_pass)}, {self.source}{tail})"


def short_text(cost: "PromptCost") -> str:
    """"about 40 s on this computer (about 2 passes)": for a status line (:meth:`PromptCost.text` says more)."""
    passes = f"{'' if cost.passes == 1 else 'about '}{cost.passes} pass{'es' if cost.passes != 1 else ''}"
    if cost.seconds_per_pass is None:
        return f"{passes}, time not measured yet"
    return f"about {duration_text(cost.seconds)} on this computer ({passes})"


def duration_text(seconds: float | None) -> str:
    """A time as a clinician reads it: "0.4 s", "20 s", "3 min 20 s"."""
    if seconds is None:
        return "an unknown time"
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 100:
        return f"{round(seconds)} s"
    minutes, rest = divmod(int(round(seconds / 10) * 10), 60)
    return f"{minutes} min" + (f" {rest} s" if rest else "")


def first_zoom(extent: Sequence[int], patch: Sequence[int]) -> float:
    """nnInteractive's first zoom for a prompt of ``extent`` voxels (1: the patch itself)."""
    return max(1.0, max((e + p // ZOOM_CONTEXT) / p for e, p in zip(extent, patch)))


def largest_single_pass_extent(patch: Sequence[int]) -> int:
    """The widest prompt (voxels, along every axis) that still runs on the patch itself."""
    return min(p - p // ZOOM_CONTEXT for p in patch)


def expected_passes(extent: Sequence[int], patch: Sequence[int], autozoom: bool = True) -> tuple[int, str]:
    """(passes a prompt of ``extent`` voxels is expected to need, when it needs more: "" when it cannot)."""
    if first_zoom(extent, patch) == 1:
        return 1, REACHES_PAST if autozoom else ""
    from medseg.model.interactive.refine_boxes import MARGIN  # imports PyTorch: not when the Edit panel is built

    cores = [max(1, p - 2 * MARGIN) for p in patch]
    refinement = math.prod(max(1, math.ceil(e / c)) for e, c in zip(extent, cores))
    return 1 + refinement, LARGER


def prompt_cost(extent: Sequence[int], patch: Sequence[int], seconds_per_pass: float | None, source: str,
                autozoom: bool = True, small_first: bool = False) -> PromptCost:
    passes, more = expected_passes(extent, patch, autozoom)
    return PromptCost(passes, more, seconds_per_pass, source if seconds_per_pass is not None else "",
                      tuple(int(p) for p in patch), small_first and first_zoom(extent, patch) == 1)


__all__ = ["PromptCost", "duration_text", "short_text", "first_zoom", "largest_single_pass_extent", "expected_passes",
           "prompt_cost"]
