"""How far a process's memory rises while a block runs: what a CPU runtime's pass costs in memory.

Interactive AI's calibration (:mod:`medseg.model.interactive.calibration`) and the segmentation's CPU
engine measurement (:mod:`medseg.model.cpu_runtime`) both read it: OpenVINO holds whole activations,
PyTorch's slabbed forward far less, and a choice that ignored memory could send a machine into swap.
"""

from __future__ import annotations

import threading

import psutil


def _return_free_heap() -> None:
    """Give the C heap's free pages back to the system (glibc's malloc_trim) so that what a pass allocates
    shows as growth: a process that computed before reuses its freed heap, and a pass there looked smaller."""
    import ctypes
    import sys

    if sys.platform.startswith("linux"):
        try:
            ctypes.CDLL("libc.so.6").malloc_trim(0)
        except (OSError, AttributeError):  # not glibc (musl): the estimate may then read low
            pass


def _status_mb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith(field + ":"):
                    return int(line.split()[1]) / 1024  # kB
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    """Linux: set the kernel's peak-RSS counter (VmHWM) to the current RSS; False where that cannot be done."""
    try:
        with open("/proc/self/clear_refs", "w") as clear:
            clear.write("5")
    except OSError:
        return False
    return _status_mb("VmHWM") is not None


class PeakMemory:
    """How far the process's resident memory rose above where it started while the block ran, in MB. On Linux
    the kernel's own peak counter (VmHWM, reset at the start: exact); elsewhere the resident memory sampled
    every 5 ms in a thread (a short peak between two samples, or while the sampler waits for a busy CPU, can
    be missed: "about")."""

    def __init__(self) -> None:
        self._process = psutil.Process()
        self._done = threading.Event()
        self._thread: threading.Thread | None = None
        self.peak_mb = 0.0

    def _sample(self) -> None:
        while not self._done.wait(0.005):
            self.peak_mb = max(self.peak_mb, (self._process.memory_info().rss - self._start) / 2**20)

    def __enter__(self) -> "PeakMemory":
        _return_free_heap()
        self._start = self._process.memory_info().rss
        if not _reset_peak():
            self._thread = threading.Thread(target=self._sample, name="medseg-peak-memory", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._thread is None:
            self.peak_mb = max(0.0, (_status_mb("VmHWM") or 0.0) - self._start / 2**20)
            return
        self._done.set()
        self._thread.join()
        self.peak_mb = max(self.peak_mb, (self._process.memory_info().rss - self._start) / 2**20)


__all__ = ["PeakMemory"]
