"""Peak resident memory per phase of a process, exactly, on Linux.

Writing "5" to /proc/self/clear_refs resets the kernel's peak-RSS counter (VmHWM) to the
current RSS (Linux >= 4.0, proc(5)). So each phase starts with a reset and ends by
reading VmHWM: that is the true peak inside the phase, whatever the allocator does and
however short the spike (a sampling thread misses spikes, and holds the GIL). Phases
nest as a stack; time spent in a phase outside its sub-phases counts for the phase.
The process's overall peak is the largest phase peak (every moment is in some phase). Each
phase's exclusive wall time is kept too (``seconds``: time in it outside its sub-phases).

Used by bench_infer.py's child processes: ``wrap`` an attribute (a module's function, a
class's method) to make every call of it a phase.
"""

from __future__ import annotations

import functools
import time
from typing import Any

CLEAR_REFS = "/proc/self/clear_refs"
STATUS = "/proc/self/status"


def _status_kb(field: str) -> int:
    with open(STATUS) as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} missing from {STATUS}")


class PhasePeaks:
    def __init__(self, first: str = "start-up (imports)"):
        self.stack = [first]
        self.rows: dict[str, dict[str, float]] = {}
        self.resettable = True
        self._start_kb = _status_kb("VmRSS")  # start-up: what the interpreter holds when this was made
        self._segment_started = time.perf_counter()
        self._close_open_segment(reset=True, initial=True)

    def _reset(self) -> None:
        if not self.resettable:
            return
        try:
            with open(CLEAR_REFS, "w") as clear:
                clear.write("5")
        except OSError:
            self.resettable = False  # then each phase's peak is the process peak so far (an upper bound)

    def _close_open_segment(self, reset: bool, initial: bool = False) -> None:
        now = time.perf_counter()
        if not initial:
            name = self.stack[-1]
            peak = _status_kb("VmHWM") / 1024
            row = self.rows.setdefault(name, {"start_mb": self._start_kb / 1024, "peak_mb": 0.0, "calls": 0,
                                              "seconds": 0.0})
            row["peak_mb"] = max(row["peak_mb"], peak)
            row["seconds"] += now - self._segment_started
        self._segment_started = now
        if reset:
            self._reset()
        self._start_kb = _status_kb("VmRSS")

    def push(self, name: str) -> None:
        self._close_open_segment(reset=True)
        self.stack.append(name)
        row = self.rows.setdefault(name, {"start_mb": self._start_kb / 1024, "peak_mb": 0.0, "calls": 0, "seconds": 0.0})
        row["calls"] += 1

    def pop(self) -> None:
        self._close_open_segment(reset=True)
        self.stack.pop()

    def finish(self) -> list[dict[str, Any]]:
        """Close the open phase; rows in first-entered order: name, RSS at its first entry, peak, calls."""
        self._close_open_segment(reset=False)
        return [{"phase": name, **row} for name, row in self.rows.items()]

    def wrap(self, owner: Any, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)

        @functools.wraps(original)
        def phase(*args: Any, **kwargs: Any) -> Any:
            self.push(name)
            try:
                return original(*args, **kwargs)
            finally:
                self.pop()

        setattr(owner, attribute, phase)

