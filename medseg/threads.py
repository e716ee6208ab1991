"""How many CPU threads medseg computes with, and how its own concurrent jobs share them.

The budget is the cores this process may use: its affinity mask (a container's CPU set,
``taskset``) capped by a cgroup CPU quota (``docker --cpus``), counted in physical cores
where the machine has simultaneous multithreading, as PyTorch does. ``--threads N``, the
GUI's setting or a user's ``OMP_NUM_THREADS`` replace it. What other programs are doing is
not guessed at: a load-average snapshot taken when a run started made every run on a
workstation with one busy program compute with one core of two for its whole length
(issue #40), while nnU-Net, MONAI and PyTorch itself use every core.

What medseg coordinates is its *own* concurrent work: a segmentation, a grow-from-seeds
preview, the 3D mesher, a batch's read-ahead. Each takes a :class:`Lease` from the one
:data:`BUDGET` while it computes; the leases split the cores between them (never below one
thread each), and a lease's share grows back as soon as another ends. A job applies its
share to the thread it runs on (:meth:`Lease.apply`; PyTorch's OpenMP thread count is
per calling thread) and code between the steps of a long computation calls
:func:`refresh`, so a running segmentation gives cores up when a second job starts and
takes them back when it ends. Processes on one machine (``torchrun`` workers) split the
cores with :func:`process_share`.
"""

from __future__ import annotations

import contextlib
import math
import os
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

_ENVIRONMENT = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "ITK_GLOBAL_DEFAULT_NUMBER_OF_THREADS")
# The user's own settings, read before configure() writes the budget there for the libraries.
_USERS_ENVIRONMENT = {name: os.environ[name] for name in _ENVIRONMENT if name in os.environ}

# Where the number came from (``medseg devices``, the GUI's setting).
FROM_AFFINITY = "the cores this process may run on (its affinity mask)"
FROM_QUOTA = "the cgroup CPU quota of this container"
FROM_OPTION = "--threads"
FROM_SETTING = "the app's CPU threads setting"
FROM_ENVIRONMENT = "OMP_NUM_THREADS"


@dataclass(frozen=True)
class CoreCount:
    """A thread count and where it came from, in words."""

    threads: int
    source: str
    detail: str = ""

    def explain(self) -> str:
        """Where the number came from: "the cgroup CPU quota of this container: 1.5 CPUs; 2 of 8 logical CPUs"."""
        return f"{self.source}: {self.detail}" if self.detail else self.source


# --- what the operating system lets this process use ------------------------------------------------


def affinity_cores() -> int:
    """Logical CPUs in this process's affinity mask (all of them where the OS has no masks)."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _cgroup_quota_v2(root: Path, path: str) -> float | None:
    """The tightest ``cpu.max`` from this cgroup up to the root, in CPUs (None: no quota)."""
    quota = None
    folder = root / path.lstrip("/")
    while True:
        try:
            limit, period = (folder / "cpu.max").read_text().split()[:2]
        except (OSError, ValueError):
            limit = period = ""
        if limit and limit != "max":
            try:
                cpus = int(limit) / int(period)
            except (ValueError, ZeroDivisionError):
                cpus = None
            if cpus and cpus > 0:
                quota = cpus if quota is None else min(quota, cpus)
        if folder == root or root not in folder.parents:
            return quota
        folder = folder.parent


def _cgroup_quota_v1(root: Path, path: str) -> float | None:
    for name in ("cpu,cpuacct", "cpu", "cpuacct,cpu"):
        folder = root / name / path.lstrip("/")
        for candidate in (folder, root / name):  # the cgroup's own folder; in a container the mount is the cgroup
            try:
                quota = int((candidate / "cpu.cfs_quota_us").read_text())
                period = int((candidate / "cpu.cfs_period_us").read_text())
            except (OSError, ValueError):
                continue
            return quota / period if quota > 0 and period > 0 else None
    return None


def cgroup_cpu_quota(root: str | os.PathLike = "/sys/fs/cgroup", proc_cgroup: str | os.PathLike = "/proc/self/cgroup") -> float | None:
    """The CPU quota of this process's cgroup in CPUs (1.5 = one and a half), None when there is none."""
    try:
        lines = Path(proc_cgroup).read_text().splitlines()
    except OSError:
        return None
    root = Path(root)
    for line in lines:  # "0::/path" (v2) or "4:cpu,cpuacct:/path" (v1)
        hierarchy, _, rest = line.partition(":")
        controllers, _, path = rest.partition(":")
        if hierarchy == "0" and controllers == "" and (root / "cgroup.controllers").exists():
            return _cgroup_quota_v2(root, path)
        if "cpu" in controllers.split(","):
            return _cgroup_quota_v1(root, path)
    return None


def _physical_fraction() -> float:
    """Physical cores per logical CPU of the machine (1.0 without SMT, or when unknown)."""
    try:
        import psutil
    except ImportError:
        return 1.0
    logical, physical = psutil.cpu_count(logical=True), psutil.cpu_count(logical=False)
    if not logical or not physical or physical >= logical:
        return 1.0
    return physical / logical


def usable_cores() -> CoreCount:
    """The cores this process may compute with: its affinity mask, capped by a cgroup CPU quota.

    On a machine with simultaneous multithreading the count is in physical cores (PyTorch's
    own default: two threads on one core's two hyper-threads run a convolution no faster).
    """
    logical = affinity_cores()
    total = os.cpu_count() or logical
    fraction = _physical_fraction()
    cores = max(1, round(logical * fraction))
    detail = f"{logical} of {total} logical CPUs"
    if fraction < 1.0:
        detail += f", {cores} physical cores"
    quota = cgroup_cpu_quota()
    if quota is not None and math.ceil(quota) < cores:
        return CoreCount(max(1, math.ceil(quota)), FROM_QUOTA, f"{quota:g} CPUs; {detail}")
    return CoreCount(cores, FROM_AFFINITY, detail)


# --- the budget and its leases --------------------------------------------------------------------------


class Lease:
    """One job's part of the budget while it computes. Use it as a context manager, or release it."""

    def __init__(self, budget: "ThreadBudget", name: str, most: int | None) -> None:
        self.budget = budget
        self.name = name
        self.most = most  # a job that cannot use more (one single-threaded kernel) leaves the rest to others
        self._applied: dict[int, int] = {}  # thread id -> the count last applied there
        self._previous: list[Lease | None] = []
        self._paused = self._released = False
        self._threads: set[int] = set()  # the threads this lease computes in (as their job)

    @property
    def threads(self) -> int:
        """This job's share now (it changes as other jobs start and end)."""
        return self.budget.share(self)

    def apply(self) -> int:
        """Set the share as the calling thread's compute threads (PyTorch's OpenMP count); returns it.

        Cheap when nothing changed: long computations call it (through :func:`refresh`) between steps.
        """
        threads = self.threads
        ident = threading.get_ident()
        if self._applied.get(ident) != threads:
            self._applied[ident] = threads
            _set_torch_threads(threads)
        return threads

    def release(self) -> None:
        self._released = True
        self.budget._release(self)

    @property
    def paused(self) -> bool:
        return self._paused

    def pause(self) -> None:
        """Give the share back while the job waits (a paused GUI job): the others split the cores without it."""
        if not self._paused:
            self._paused = True
            self.budget._release(self)

    def resume(self) -> None:
        """Take a share again after :meth:`pause` (the others' shares shrink at their next step)."""
        if self._paused:
            self._paused = False
            if self._released:  # ended while paused: nothing to take back
                return
            self.budget._hold(self)
            self._applied.pop(threading.get_ident(), None)
            if threading.get_ident() in self._threads:
                self.apply()

    def __enter__(self) -> "Lease":
        self._previous.append(getattr(_current, "lease", None))
        _current.lease = self
        self._threads.add(threading.get_ident())
        self.apply()
        return self

    def __exit__(self, *_exc) -> None:
        _current.lease = self._previous.pop() if self._previous else None
        self._threads.discard(threading.get_ident())
        self.release()
        outer = _current.lease
        if outer is not None:
            outer._applied.pop(threading.get_ident(), None)
            outer.apply()
        else:
            _set_torch_threads(self.budget.total)  # the thread's next work (outside any job): the whole budget

    def __repr__(self) -> str:
        return f"Lease({self.name!r}, {self.threads} of {self.budget.total})"


class ThreadBudget:
    """The process's compute threads, split between the leases held now."""

    def __init__(self, count: CoreCount | None = None) -> None:
        self._count = count
        self._leases: list[Lease] = []
        self._lock = threading.Lock()

    @property
    def count(self) -> CoreCount:
        if self._count is None:  # nothing configured (a library caller, `medseg devices`): what configure() would set
            self._count = _from_environment() or usable_cores()
        return self._count

    @property
    def total(self) -> int:
        return self.count.threads

    def set_count(self, count: CoreCount) -> None:
        self._count = count

    def lease(self, name: str, most: int | None = None) -> Lease:
        """A share of the budget for one job, held until released (``with budget.lease("segment") as l:``)."""
        lease = Lease(self, name, most)
        self._hold(lease)
        return lease

    def _hold(self, lease: Lease) -> None:
        with self._lock:
            if lease not in self._leases:
                self._leases.append(lease)

    def _release(self, lease: Lease) -> None:
        with self._lock:
            if lease in self._leases:
                self._leases.remove(lease)

    def leases(self) -> list[Lease]:
        with self._lock:
            return list(self._leases)

    def shares(self) -> dict[Lease, int]:
        """Every lease's share: the cores split evenly (earlier jobs get the odd one), capped by each
        job's ``most`` with what it leaves going to the others; never below one thread."""
        with self._lock:
            leases = list(self._leases)
        return _split(self.total, leases)

    def share(self, lease: Lease) -> int:
        shares = self.shares()
        if lease in shares:
            return shares[lease]
        return max(1, min(self.total, lease.most or self.total))  # not (or no longer) held: as if alone


def _split(total: int, leases: list[Lease]) -> dict[Lease, int]:
    shares: dict[Lease, int] = {}
    open_ = list(leases)
    left = total
    while open_:
        fair = left // len(open_)
        capped = [lease for lease in open_ if lease.most is not None and lease.most <= fair]
        if not capped:
            extra = left - fair * len(open_)
            for index, lease in enumerate(open_):
                shares[lease] = max(1, fair + (1 if index < extra else 0))
            break
        for lease in capped:
            shares[lease] = max(1, lease.most)  # type: ignore[arg-type]
            left -= shares[lease]
            open_.remove(lease)
        left = max(0, left)
    return shares


BUDGET = ThreadBudget()
_current = threading.local()


def lease(name: str, most: int | None = None) -> Lease:
    """A new lease on the process's budget (see :meth:`ThreadBudget.lease`): one more concurrent job."""
    return BUDGET.lease(name, most)


@contextlib.contextmanager
def job(name: str, most: int | None = None) -> Iterator[Lease]:
    """Compute as one job in this thread: a lease for the ``with`` block, applied here.

    Re-entrant: inside a job already running in this thread (a segmentation's preprocessing,
    a GUI job calling a library function that takes its own) it is that job's lease.
    """
    held = getattr(_current, "lease", None)
    if held is not None:
        yield held
        return
    with BUDGET.lease(name, most) as taken:
        yield taken


def current() -> int:
    """The threads the calling thread computes with: its job's share, else the whole budget."""
    held = getattr(_current, "lease", None)
    return held.threads if held is not None else BUDGET.total


def refresh() -> int:
    """Re-apply the calling thread's share (it changes when another job starts or ends); returns it."""
    held = getattr(_current, "lease", None)
    return held.apply() if held is not None else BUDGET.total


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """While the calling thread's job waits (paused by the user), its share goes to medseg's other jobs;
    it takes a share again when the block ends. Outside a job: nothing to give back."""
    held = getattr(_current, "lease", None)
    if held is None or held.paused:
        yield
        return
    held.pause()
    try:
        yield
    finally:
        held.resume()


def process_share(rank: int, processes: int, cores: CoreCount | None = None) -> CoreCount:
    """The threads of local process ``rank`` of ``processes`` on one machine (``torchrun`` workers):
    the usable cores split between them, the odd ones to the first ranks."""
    cores = cores or usable_cores()
    processes = max(1, processes)
    share = max(1, cores.threads // processes + (1 if rank < cores.threads % processes else 0))
    if processes == 1:
        return cores
    return CoreCount(share, cores.source, f"{cores.detail}; {cores.threads} shared by {processes} processes")


# More compute threads than CPUs only slow a run down; a few times more is still a choice someone may
# make (sharing a machine by time slices), thousands are a typo: 100 000 OpenMP threads crashed the process
# and took the thread limit of every other program of the user's.
OVERSUBSCRIPTION = 4


def most_threads() -> int:
    """The largest thread count medseg accepts: :data:`OVERSUBSCRIPTION` times the machine's logical CPUs."""
    return OVERSUBSCRIPTION * (os.cpu_count() or affinity_cores())


def too_many(threads: int, option: str = "--threads") -> str:
    """Why ``threads`` is refused, in words ("" when it is not too many)."""
    if threads <= most_threads():
        return ""
    usable = usable_cores()
    return (f"{threads} is far more threads than this machine can run: it has {os.cpu_count() or '?'} logical CPUs "
            f"({usable.threads} usable by medseg); give at most {most_threads()}, or leave {option} out to use "
            f"{usable.threads}")


def configure(threads: int | None = None, source: str = FROM_OPTION, count: CoreCount | None = None) -> int:
    """Set the process's budget: ``threads`` (from ``source``) or ``count``, else OMP_NUM_THREADS, else the
    usable cores.

    Call it before PyTorch, ONNX Runtime, OpenMP/BLAS and ITK start their pools (the command line does);
    called later it still sets PyTorch's and SimpleITK's counts. Returns the budget.
    """
    if threads is not None and threads < 1:
        from medseg.errors import MedsegError

        raise MedsegError(f"--threads must be at least 1, got {threads}")
    if threads is not None and too_many(threads):
        from medseg.errors import MedsegError

        raise MedsegError(f"{source}: {too_many(threads, source)}")
    chosen = threads is not None or count is not None
    if threads is not None:
        count = CoreCount(int(threads), source)
    elif count is None:
        count = _from_environment() or usable_cores()
    for name in _ENVIRONMENT:  # for the pools not started yet, and for child processes
        if chosen or name not in _USERS_ENVIRONMENT:  # a user's own setting is left alone unless one was chosen
            os.environ[name] = str(count.threads)
    BUDGET.set_count(count)
    _set_torch_threads(count.threads)  # already imported: it read OMP_NUM_THREADS before this was called
    if "SimpleITK" in sys.modules:
        sys.modules["SimpleITK"].ProcessObject.SetGlobalDefaultNumberOfThreads(count.threads)
    return count.threads


def _from_environment() -> CoreCount | None:
    value = _USERS_ENVIRONMENT.get("OMP_NUM_THREADS", "")
    try:
        threads = int(value.split(",")[0])
    except ValueError:
        return None
    return CoreCount(threads, FROM_ENVIRONMENT) if threads >= 1 else None


def budget() -> int:
    """The process's whole budget (what :func:`configure` set, else the usable cores)."""
    return BUDGET.total


def budget_count() -> CoreCount:
    """The budget with where it came from (``medseg devices``)."""
    return BUDGET.count


def _set_torch_threads(threads: int) -> None:
    """PyTorch's thread count, when PyTorch is imported. Only once its import has finished: another thread may be
    importing it right now (the app imports the AI runtime in a job), and a half-imported module has no
    set_num_threads yet; its import reads OMP_NUM_THREADS, which configure() has set."""
    torch = sys.modules.get("torch")
    if torch is None or getattr(getattr(torch, "__spec__", None), "_initializing", False):
        return
    setter = getattr(torch, "set_num_threads", None)
    if setter is not None:
        setter(threads)
