"""What a prompt did (PromptResult), what cannot be prompted (PromptError), and what undoes a prompt (Undo)."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from medseg.errors import MedsegError
from medseg.model.interactive.prompts import Box, Stamp

EXACT, SMALL, SMALL_THEN_EXACT = "exact", "small patch", "small patch, then exact"  # PromptResult.mode


class PromptError(MedsegError):
    """A prompt that cannot be used (outside the image, empty, a kind the model does not take)."""


@dataclass
class PromptResult:
    """What one prompt did: the box of the object it rewrote, and where its time went."""

    changed: Box | None
    zoom: float
    passes: int  # forward passes: (the small first patch +) 1 + zoom steps + refinement patches
    seconds: dict[str, float] = field(default_factory=dict)
    mode: str = EXACT  # EXACT; SMALL (the small first patch's answer kept); SMALL_THEN_EXACT (it fell back)
    first_patch: tuple[int, ...] = ()  # the edges of the prompt's first forward pass


@dataclass
class Undo:
    """What a prompt changed, to take it back: the prompt store's length and intensity before it, the rescaled
    stamps, and the mask's region as it was."""

    stamps: int
    intensity: float
    rescaled: list[Stamp] | None
    region: Box | None = None
    before: np.ndarray | None = None
