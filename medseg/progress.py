"""Progress reporting and cancellation shared by every long-running job.

Long jobs (loading, segmenting, training) take ``progress`` (a callable receiving a
:class:`Progress`) and ``cancel`` (a :class:`CancelToken`). The CLI prints progress,
the GUI worker re-emits it as a Qt signal. Cancellation is cooperative: the job calls
``cancel.raise_if_cancelled()`` between units of work, so a cancelled job stops at a
clean boundary and leaves nothing half-written.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Optional

from medseg.errors import Cancelled


@dataclass(frozen=True)
class Progress:
    fraction: float  # 0..1 of the whole job
    text: str  # short human-readable stage, e.g. "decoding slice 12 of 300"
    stage: str = ""  # machine-readable stage name ("scan", "decode", "tile", ...)


ProgressCallback = Callable[[Progress], None]


def no_progress(_: Progress) -> None:
    """Default callback: ignore progress."""


class CancelToken:
    """Thread-safe flag that a worker polls between units of work."""

    def __init__(self) -> None:
        self._event = threading.Event()

    def cancel(self) -> None:
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def raise_if_cancelled(self) -> None:
        if self._event.is_set():
            raise Cancelled()


def report(progress: Optional[ProgressCallback], fraction: float, text: str, stage: str = "") -> None:
    """Call ``progress`` if given, clamping the fraction into [0, 1]."""
    if progress is not None:
        progress(Progress(min(1.0, max(0.0, float(fraction))), text, stage))
