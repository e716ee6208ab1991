"""Undo/redo of sparse deltas under a memory budget (not a fixed step count).

Each step is one :class:`~medseg.edit.delta.Delta` (a stroke, a fill, a Segment result)
with a description. When the steps held exceed the budget, the oldest are forgotten
first; the newest step is always kept, even alone over the budget, so the last action
can always be undone. A new step clears the redo list.

Every step gets a serial number, and :attr:`History.position` is the serial of the newest
step in effect (or of the newest one forgotten, when all held steps were undone). The
document compares it with the position it was saved at: undoing back to the saved state
is "saved" again, without comparing voxels.

A step may also change the label table (a Segment adds labels, an edit makes a model's
label SEMIAUTOMATIC): ``labels`` holds, per label value, the entry before and after the
step (None: no entry), so undo and redo put the table back with the voxels.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from itertools import count
from typing import Any

from medseg.edit.delta import Delta

DEFAULT_BUDGET_BYTES = 1 << 30  # 1 GiB


_serials = count(1)


@dataclass
class Step:
    description: str
    delta: Delta
    labels: dict[int, tuple[Any, Any]] = field(default_factory=dict)  # value -> (entry before, entry after)
    serial: int = field(default_factory=lambda: next(_serials))

    @property
    def nbytes(self) -> int:
        return self.delta.nbytes


class History:
    def __init__(self, budget_bytes: int = DEFAULT_BUDGET_BYTES) -> None:
        self.budget_bytes = int(budget_bytes)
        self._undo: deque[Step] = deque()
        self._redo: list[Step] = []
        self._bytes = 0
        self.evicted = 0  # steps forgotten to stay within the budget, since the last clear
        self._base = self._floor = next(_serials)  # the position before every held step; at the last clear

    # --- state --------------------------------------------------------------------------
    @property
    def depth(self) -> int:
        return len(self._undo)

    @property
    def redo_depth(self) -> int:
        return len(self._redo)

    @property
    def nbytes(self) -> int:
        return self._bytes

    @property
    def position(self) -> int:
        """The serial of the newest step in effect; equal positions mean the same label map."""
        return self._undo[-1].serial if self._undo else self._base

    def is_applied(self, serial: int) -> bool:
        """True while the step with this serial is in effect (not undone, not cleared)."""
        return self._floor < serial <= self._base or any(step.serial == serial for step in self._undo)

    def can_undo(self) -> bool:
        return bool(self._undo)

    def can_redo(self) -> bool:
        return bool(self._redo)

    def summary(self) -> str:
        """e.g. "Undo: 37 steps, 212 MB"."""
        mb = self._bytes / 1e6
        size = f"{mb:.0f} MB" if mb >= 10 else f"{mb:.1f} MB" if mb >= 0.1 else f"{self._bytes / 1e3:.0f} kB"
        steps = "step" if self.depth == 1 else "steps"
        return f"Undo: {self.depth} {steps}, {size}"

    def offset_from(self, position: int) -> int | None:
        """How many steps lie between ``position`` and now: positive when they are in effect (done since),
        negative when undone since; None when ``position`` is no longer held (forgotten, or never one)."""
        timeline = [self._base, *(step.serial for step in self._undo), *(step.serial for step in reversed(self._redo))]
        return len(self._undo) - timeline.index(position) if position in timeline else None

    def position_back(self, offset: int) -> int | None:
        """The position ``offset`` steps before now (negative: after, in the redo list); None when not held."""
        timeline = [self._base, *(step.serial for step in self._undo), *(step.serial for step in reversed(self._redo))]
        index = len(self._undo) - int(offset)
        return timeline[index] if 0 <= index < len(timeline) else None

    def last_step(self) -> Step | None:
        """The step the next undo reverts (None: none)."""
        return self._undo[-1] if self._undo else None

    def next_undo(self) -> str | None:
        return self._undo[-1].description if self._undo else None

    def next_redo(self) -> str | None:
        return self._redo[-1].description if self._redo else None

    # --- changes ------------------------------------------------------------------------
    def clear(self) -> None:
        self._undo.clear()
        self._redo.clear()
        self._bytes = 0
        self.evicted = 0
        self._base = self._floor = next(_serials)

    def set_budget(self, budget_bytes: int) -> None:
        self.budget_bytes = int(budget_bytes)
        self._evict()

    def push(self, description: str, delta: Delta, labels: dict[int, tuple[Any, Any]] | None = None) -> Step:
        self._bytes -= sum(step.nbytes for step in self._redo)
        self._redo.clear()
        step = Step(description, delta, dict(labels or {}))
        self._undo.append(step)
        self._bytes += step.nbytes
        self._evict()
        return step

    def _evict(self) -> None:
        while self._bytes > self.budget_bytes and len(self._undo) > 1:
            forgotten = self._undo.popleft()
            self._bytes -= forgotten.nbytes
            self._base = forgotten.serial
            self.evicted += 1
        while self._bytes > self.budget_bytes and self._redo:
            self._bytes -= self._redo.pop(0).nbytes  # the farthest redo goes first

    def pop_undo(self) -> Step | None:
        """The step to revert; it moves to the redo list."""
        if not self._undo:
            return None
        step = self._undo.pop()
        self._redo.append(step)
        return step

    def pop_redo(self) -> Step | None:
        if not self._redo:
            return None
        step = self._redo.pop()
        self._undo.append(step)
        return step
