"""Where a job's time goes: named phases, a one-screen table, and a torch.profiler trace.

Code marks its phases with ``with phase("network"):``; that costs nothing unless a
:func:`profiling` block is active in the same thread (a context variable). Inside one,
each phase's time is summed, exclusive of the phases nested in it (the network's time
inside the sliding window is "network", the rest of the window "stitching"), the device
is synchronised at phase edges so GPU work is charged to the phase that queued it, and,
when a folder is given, a torch.profiler trace is written there with every phase as a
named range (open the ``*.pt.trace.json`` in Perfetto or chrome://tracing, or point
TensorBoard's profiler plugin at the folder).

``medseg segment --profile DIR``, ``medseg train --profile DIR`` and the Train tab's
"Profile" box use it; the table is what issue #27's work was measured with.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import torch

from medseg.model.backends import cuda_available

# The phases of a segmentation, in the order they happen (the table lists them so).
SEGMENT_PHASES = ("load", "preprocess", "network", "stitching", "export", "write")
TRAIN_PHASES = ("load", "preprocess", "batches", "network", "validation", "write")
# Training traces only this many iterations (after one to warm up): a whole run's trace is gigabytes.
TRACE_ITERATIONS = 5

_active: ContextVar["PhaseProfile | None"] = ContextVar("medseg_phase_profile", default=None)


@dataclass
class PhaseProfile:
    """Exclusive wall time per phase of one job."""

    device: torch.device | None = None  # synchronised at phase edges (CUDA / MPS)
    seconds: dict[str, float] = field(default_factory=dict)
    calls: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)
    ended: float | None = None
    _stack: list[list[Any]] = field(default_factory=list)  # [name, start, time spent in children]

    def synchronize(self) -> None:
        if self.device is not None and self.device.type == "cuda" and cuda_available():
            torch.cuda.synchronize(self.device)
        elif self.device is not None and self.device.type == "mps":
            torch.mps.synchronize()

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        self.synchronize()
        frame = [name, time.perf_counter(), 0.0]
        self._stack.append(frame)
        try:
            with torch.profiler.record_function(name):
                yield
        finally:
            self.synchronize()
            elapsed = time.perf_counter() - frame[1]
            self._stack.pop()
            self.seconds[name] = self.seconds.get(name, 0.0) + elapsed - frame[2]
            self.calls[name] = self.calls.get(name, 0) + 1
            if self._stack:
                self._stack[-1][2] += elapsed

    @property
    def total(self) -> float:
        return (self.ended or time.perf_counter()) - self.started

    def rows(self, order: tuple[str, ...] = ()) -> list[tuple[str, float, int]]:
        names = [n for n in order if n in self.seconds] + [n for n in self.seconds if n not in order]
        rows = [(name, self.seconds[name], self.calls[name]) for name in names]
        other = self.total - sum(self.seconds.values())
        if other > 0.0005:
            rows.append(("(not in a phase)", other, 0))
        return rows

    def table(self, order: tuple[str, ...] = (), title: str = "where the time went") -> str:
        total = max(self.total, 1e-9)
        lines = [f"{title} ({total:.2f} s in all)", f"  {'phase':<18}{'seconds':>9}{'share':>8}{'calls':>8}"]
        for name, seconds, calls in self.rows(order):
            lines.append(f"  {name:<18}{seconds:9.2f}{100 * seconds / total:7.1f}%{calls if calls else '':>8}")
        return "\n".join(lines)

    def to_dict(self, order: tuple[str, ...] = ()) -> dict[str, Any]:
        return {"total_seconds": round(self.total, 4),
                "phases": [{"phase": n, "seconds": round(s, 4), "calls": c} for n, s, c in self.rows(order)]}


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Mark a phase of the current job (free when nothing is profiling this thread)."""
    profile = _active.get()
    if profile is None:
        yield
        return
    with profile.phase(name):
        yield


def active() -> PhaseProfile | None:
    return _active.get()


class Profiling:
    """A profiled job: phase times, and a torch.profiler trace in ``folder`` when one is given.

    ``step()`` marks one training iteration (the trace then covers iterations 2 to
    1 + TRACE_ITERATIONS only); a segmentation traces all of it.
    """

    def __init__(self, folder: str | os.PathLike[str] | None, device: str | torch.device | None = None, stepped: bool = False,
                 order: tuple[str, ...] = SEGMENT_PHASES, title: str = "where the time went") -> None:
        self.folder = Path(folder) if folder is not None else None
        self.profile = PhaseProfile(torch.device(device) if device is not None else None)
        self.order = order
        self.title = title
        self.stepped = stepped
        self._torch: torch.profiler.profile | None = None
        self._token = None

    def set_device(self, device: str | torch.device) -> None:
        self.profile.device = torch.device(device)

    def __enter__(self) -> "Profiling":
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            activities = [torch.profiler.ProfilerActivity.CPU]
            if cuda_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            schedule = torch.profiler.schedule(wait=0, warmup=1, active=TRACE_ITERATIONS, repeat=1) if self.stepped else None
            self._torch = torch.profiler.profile(
                activities=activities, schedule=schedule,
                on_trace_ready=torch.profiler.tensorboard_trace_handler(str(self.folder), worker_name="medseg"))
            self._torch.__enter__()
        self._token = _active.set(self.profile)
        self.profile.started = time.perf_counter()
        return self

    def step(self) -> None:
        if self._torch is not None and self.stepped:
            self._torch.step()

    def __exit__(self, *exc: Any) -> None:
        self.profile.ended = time.perf_counter()
        if self._token is not None:
            _active.reset(self._token)
            self._token = None
        if self._torch is not None:
            self._torch.__exit__(*exc)
            self._torch = None
        if self.folder is not None:
            (self.folder / "phases.txt").write_text(self.table() + "\n")
            (self.folder / "phases.json").write_text(json.dumps(self.profile.to_dict(self.order), indent=1))

    def table(self) -> str:
        return self.profile.table(self.order, self.title)

    def trace_files(self) -> list[Path]:
        return sorted(self.folder.glob("*.pt.trace.json")) if self.folder is not None else []
