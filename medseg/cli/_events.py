"""The ``--json`` event stream of ``train``, ``segment``, ``evaluate`` and ``export``.

One JSON object per line on stdout, each with an ``"event"`` key; the last one is
``done`` (with the command's result) or ``failed`` (with the error). The GUI follows a
``torchrun`` training through exactly this stream, and scripts can too. The schema is in
the README ("Machine-readable progress").
"""

from __future__ import annotations

import json
import math
import sys
from contextlib import contextmanager
from typing import Any, Iterator, TextIO

from medseg.errors import Cancelled, MedsegError
from medseg.progress import Progress, ProgressCallback

PROGRESS_STEP = 0.01  # a progress event per 1 % (or change of stage), not per tile


def _plain(value: Any) -> Any:
    if isinstance(value, float) and (math.isnan(value) or math.isinf(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class EventStream:
    """Writes events as JSON lines; silent when ``enabled`` is False (so callers need no ifs)."""

    def __init__(self, enabled: bool, out: TextIO | None = None) -> None:
        self.enabled = enabled
        self.out = out or sys.stdout

    def emit(self, event: str, **fields: Any) -> None:
        if self.enabled:
            self.out.write(json.dumps({"event": event, **_plain(fields)}) + "\n")
            self.out.flush()

    def emit_record(self, record: dict[str, Any]) -> None:
        """An event that already has its ``"event"`` key (e.g. medseg.model.training.event_to_json)."""
        if self.enabled:
            self.out.write(json.dumps(_plain(record)) + "\n")
            self.out.flush()

    def progress(self) -> ProgressCallback:
        last_fraction: float = -1.0
        last_stage: str | None = None  # none shown yet

        def show(progress: Progress) -> None:
            nonlocal last_fraction, last_stage
            if progress.stage != last_stage or progress.fraction - last_fraction >= PROGRESS_STEP \
                    or progress.fraction >= 1.0 > last_fraction:
                last_fraction, last_stage = progress.fraction, progress.stage
                self.emit("progress", fraction=round(progress.fraction, 4), text=progress.text, stage=progress.stage)

        return show

    @contextmanager
    def failures(self) -> Iterator[None]:
        """Turn an error into a last ``failed`` event, then let it propagate (the exit code says it too)."""
        try:
            yield
        except Cancelled:
            self.emit("failed", error="cancelled", cancelled=True)
            raise
        except MedsegError as error:
            self.emit("failed", error=error.message, path=str(error.path) if error.path else None,
                      hint=error.hint or None, cancelled=False)
            raise
        except KeyboardInterrupt:
            self.emit("failed", error="interrupted", cancelled=True)
            raise
        except Exception as error:  # reported, then re-raised with its traceback
            self.emit("failed", error=f"{type(error).__name__}: {error}", cancelled=False)
            raise
