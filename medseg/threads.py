"""How many CPU threads this process computes with: ``--threads`` where given, else the cores
no other process is using right now.

Six concurrent ``medseg segment`` runs on two cores each started one PyTorch thread per core
(and as many decoder threads): each run's CPU time rose from 16.6 s to 83 s, spent fighting
over the cores. :func:`configure` sets the budget once per process, before the heavy
libraries start their pools: PyTorch (and ONNX Runtime, whose sessions take PyTorch's
count), OpenMP/BLAS, ITK, and medseg's own decoder pool. A user's OMP_NUM_THREADS is left
alone when ``--threads`` is not given.
"""

from __future__ import annotations

import os
import sys

_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS")
_budget: int | None = None


def usable_cores() -> int:
    """Cores this process may run on (its affinity mask, e.g. a container's CPU set)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def free_cores(cores: int | None = None, loadavg: str | None = None) -> int:
    """Cores left after the other runnable processes (at least 1).

    Linux's /proc/loadavg gives the 1-minute load and the tasks runnable right now (this one
    included); the larger of the two counts as busy, so runs started together see each other.
    """
    cores = cores or usable_cores()
    if loadavg is None:
        try:
            with open("/proc/loadavg", encoding="ascii") as handle:
                loadavg = handle.read()
        except OSError:
            try:
                return max(1, cores - round(os.getloadavg()[0]))
            except (AttributeError, OSError):
                return cores
    fields = loadavg.split()
    try:
        one_minute = float(fields[0])
        runnable = int(fields[3].split("/")[0]) - 1  # not counting this process
    except (IndexError, ValueError):
        return cores
    return max(1, min(cores, cores - round(max(one_minute - 1, runnable, 0))))


def configure(threads: int | None = None) -> int:
    """Set the process's thread budget (``threads``, else the free cores); returns it."""
    global _budget
    if threads is not None and threads < 1:
        from medseg.errors import MedsegError

        raise MedsegError(f"--threads must be at least 1, got {threads}")
    given = threads is not None
    budget = threads if given else free_cores()
    for name in _ENVIRONMENT:
        if given or name not in os.environ:
            os.environ[name] = str(budget)
    if not given and "OMP_NUM_THREADS" in os.environ:
        try:
            budget = max(1, int(os.environ["OMP_NUM_THREADS"]))
        except ValueError:
            pass
    if "torch" in sys.modules:  # already imported: it read OMP_NUM_THREADS before this was called
        sys.modules["torch"].set_num_threads(budget)
    if "SimpleITK" in sys.modules:
        sys.modules["SimpleITK"].ProcessObject.SetGlobalDefaultNumberOfThreads(budget)
    _budget = budget
    return budget


def budget() -> int:
    """The budget :func:`configure` set, else the usable cores (a library caller that set nothing)."""
    return _budget if _budget is not None else usable_cores()
