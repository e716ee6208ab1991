"""Which engine runs a model on the CPU: measured on this computer, once per model (issues #40, #51).

PyTorch, ONNX Runtime and OpenVINO (the CPU rows of medseg.model.backends.BACKENDS; OpenVINO when the
extra ``medseg[openvino]`` is installed) compute the same network at different speeds on different
CPUs, and not always to the same digits. So a measurement (:mod:`medseg.model.engine_measurement`:
when a model is installed or imported, ``medseg models verify --measure``, or the app while it is
idle) sends one tile of a synthetic CT through each engine and keeps the fastest one whose labels equal
PyTorch's on at least :data:`PARITY` of that tile, that is at least :data:`MARGIN` times faster,
whose pass fits in the free memory (its measured peak, with :data:`MEMORY_HEADROOM`) and stays within
:data:`MEMORY_BUDGET` times PyTorch's measured peak (time and memory at once, issue #51); otherwise
PyTorch. The ONNX engines run an export whose instance norms are short reductions
(:mod:`medseg.model.exact_norm`, :func:`exact_onnx`, kept in the cache folder so it is made once): as
InstanceNormalization, their one-pass statistics changed 0.4 % (ONNX Runtime) and 1.9 % (OpenVINO) of a
tile's labels on nnU-Net's real-size network. Memory weighs as it does for interactive AI: OpenVINO compiled
whole holds every activation (about 1.75x PyTorch's slabbed forward on that network); it now runs the
full-resolution stage slab by slab (:mod:`medseg.model.openvino_slabs`) and is measured as it runs. The choice, its reason and the figures are stored per
model and machine (CPU model, memory, thread count, engines: :func:`machine`; in the cache folder), shown
in the plan (Segment panel, ``medseg plan --model``) and in ``medseg segment --json``, with its date.

A run never measures (issue #51: the first Segment paid the measurement, 2.2x the second's time): with
no measurement for this model on this machine, it runs PyTorch (the default) at once and the model is
:func:`schedule`-d, so the app measures it in the background while it is idle. A machine that changed
(another CPU, memory or thread count) is such a case: the record of the old machine stays, unused.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import threading
import time
import weakref
from dataclasses import asdict, dataclass, field
from datetime import date
from pathlib import Path
from typing import Any, Callable

import torch

from medseg.model import backends

PIN_VARIABLE = "MEDSEG_CPU_ENGINE"  # "cpu", "onnx-cpu" or "openvino-cpu": use it, measure nothing
PARITY = 0.9999  # the share of a tile's labels another engine must compute as PyTorch does
MARGIN = 1.10  # how much faster it must be to replace PyTorch (less is within the noise of one tile)
MEMORY_HEADROOM = 1.25  # free memory an engine's measured peak must fit in, with room for the run's own arrays
# An engine chosen for speed must also stay near PyTorch's slabbed forward in memory (issue #51: OpenVINO compiled
# whole took 0.60x nnU-Net's time but 0.69x its memory): at most this many times PyTorch's measured peak for the
# tile, or MEMORY_SLACK_MB more (a small network's peaks are a few MB, within the reading's noise).
MEMORY_BUDGET = 1.5
MEMORY_SLACK_MB = 256.0
STORE_NAME = "cpu_runtimes.json"
EXPORT_FOLDER = "cpu-onnx"  # in the cache folder: the exact-norm exports the CPU ONNX engines run


@dataclass
class RuntimeChoice:
    """The CPU engine a model runs on, and why."""

    device: str  # a CPU row of medseg.model.backends.BACKENDS: "cpu" (PyTorch), "onnx-cpu", "openvino-cpu"
    reason: str
    threads: int
    measured: bool = False  # False: nothing measured yet (PyTorch until a CPU run measures)
    seconds: dict[str, float] = field(default_factory=dict)  # one tile through each engine
    setup_seconds: dict[str, float] = field(default_factory=dict)  # its ONNX export and load, paid once
    agreement: dict[str, float] = field(default_factory=dict)  # the tile's labels equal to PyTorch's
    tile: list[int] = field(default_factory=list)
    peak_mb: dict[str, float] = field(default_factory=dict)  # how far the process's memory rose: loading and pass
    free_mb: float = 0.0  # the free memory when it was measured
    measured_on: str = ""  # the date of the measurement (ISO), "" when nothing was measured
    machine: dict[str, Any] = field(default_factory=dict)  # what it was measured on (:func:`machine`)

    @property
    def engine(self) -> str:
        return backends.backend(self.device).engine

    def to_dict(self) -> dict[str, Any]:
        return {"engine": self.engine, **asdict(self)}

    def describe(self) -> str:
        """One line for the plan: "CPU engine: PyTorch (measured on 2026-12-07: ...)"."""
        return f"CPU engine: {self.engine} ({self.reason})"


def _others() -> list[str]:
    return [backends.backend(d).engine for d in backends.cpu_devices() if d != "cpu"]


def _unmeasured(threads: int, changed: str = "") -> RuntimeChoice:
    others = _others()
    if not others:
        return RuntimeChoice("cpu", "the only CPU engine installed", threads)
    later = (f"measured against {' and '.join(others)} in the background while the app is idle, or by "
             "`medseg models verify --measure`")
    if changed:
        return RuntimeChoice("cpu", f"{changed}: the default, PyTorch, until this model is {later}", threads)
    return RuntimeChoice("cpu", f"not measured on this computer yet: the default, PyTorch, runs at once; {later}",
                         threads)


# --- where choices are kept ----------------------------------------------------------------------------


_digests: dict[tuple[int, str], str] = {}  # hashing a large model's weights takes a fraction of a second


def model_digest(package: Any, configuration: str) -> str:
    """The configuration's plan and weights, hashed (a retrained model is measured again)."""
    key = (id(package), configuration)
    if key in _digests:
        return _digests[key]
    digest = hashlib.sha256()
    plan = package.configurations[configuration]
    digest.update(json.dumps({"name": package.name, "configuration": configuration, "plan": plan.to_dict(),
                              "labels": len(package.labels)}, sort_keys=True, default=repr).encode())
    for fold in package.weights.get(configuration, []):
        for name in sorted(fold):
            tensor = fold[name].detach().to("cpu").contiguous()
            digest.update(name.encode())
            digest.update(tensor.reshape(-1).view(torch.uint8).numpy().tobytes())
    _digests[key] = value = digest.hexdigest()[:24]
    weakref.finalize(package, _digests.pop, key, None)
    return value


def _versions() -> dict[str, str | None]:
    versions: dict[str, str | None] = {"torch": torch.__version__}
    for module in ("onnxruntime", "openvino"):
        try:
            versions[module] = __import__(module).__version__
        except ImportError:
            versions[module] = None
    return versions


def machine(threads: int) -> dict[str, Any]:
    """What a measurement holds for: the CPU model, its architecture, the memory (GB), the thread count, the
    engines installed and their versions. Another value of any of them is another machine: measured again."""
    from medseg.model.devices import _memory_bytes, cpu_name  # the report's own readings

    memory = _memory_bytes()
    return {"cpu": cpu_name(), "architecture": platform.machine(),
            "memory_gb": round(memory / 2**30) if memory else None, "threads": int(threads),
            "engines": backends.cpu_devices(), "versions": _versions()}


def _store_key(package: Any, configuration: str, threads: int) -> str:
    described = {"model": model_digest(package, configuration), "machine": machine(threads)}
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:32]


def _machine_change(old: dict[str, Any], new: dict[str, Any]) -> str:
    """"this computer changed since ... (threads 2 -> 4)": what differs between two :func:`machine` readings."""
    names = {"cpu": "CPU", "architecture": "architecture", "memory_gb": "memory (GB)", "threads": "threads",
             "engines": "engines", "versions": "engine versions"}
    changes = [f"{names.get(k, k)} {old.get(k)} → {new.get(k)}" if k in ("memory_gb", "threads") else names.get(k, k)
               for k in sorted(set(old) | set(new)) if old.get(k) != new.get(k)]
    return f"this computer changed since the measurement ({', '.join(changes) or 'its description'})"


def _store_path():
    from medseg.app_dirs import cache_dir

    return cache_dir() / STORE_NAME


def _read_store() -> dict[str, Any]:
    from medseg.errors import MedsegError
    from medseg.io.json_files import read_json_object

    path = _store_path()
    if not path.is_file():
        return {}
    try:
        return read_json_object(path, "CPU engine measurements")
    except MedsegError:  # a damaged cache is measured again, never an error
        return {}


def pinned_choice(threads: int) -> RuntimeChoice | None:
    """The engine ``$MEDSEG_CPU_ENGINE`` names (a deployment that wants one engine everywhere), if any."""
    from medseg.errors import DeviceError

    pinned = os.environ.get(PIN_VARIABLE, "").strip().lower()
    if not pinned or pinned == "measure":
        return None
    if pinned not in [row.name for row in backends.BACKENDS if not row.gpu]:
        raise DeviceError(f"{PIN_VARIABLE}={pinned!r} is not a CPU engine",
                          hint="use cpu, onnx-cpu or openvino-cpu, or unset it to let a measurement choose")
    backends.resolve_device(pinned)  # installed?
    return RuntimeChoice(pinned, f"set by {PIN_VARIABLE}", threads)


def stored_choice(package: Any, configuration: str, threads: int) -> RuntimeChoice | None:
    """The engine pinned, or measured before for this model and machine (None: neither)."""
    pinned = pinned_choice(threads)
    if pinned is not None:
        return pinned
    record = _read_store().get(_store_key(package, configuration, threads))
    if not isinstance(record, dict):
        return None
    try:
        choice = RuntimeChoice(**{k: v for k, v in record.items() if k not in ("engine", "model")})
    except TypeError:  # an older or damaged record: measured again
        return None
    if choice.device not in backends.cpu_devices():
        return None
    short = _short_of_memory(choice.device, choice.peak_mb, free_memory_mb())
    if short:  # measured on a day with more free memory: PyTorch for this run, the record stays
        return RuntimeChoice("cpu", short, threads, True, choice.seconds, choice.setup_seconds, choice.agreement,
                             choice.tile, choice.peak_mb, choice.free_mb, choice.measured_on, choice.machine)
    return choice


def planned_choice(package: Any, configuration: str, threads: int) -> RuntimeChoice:
    """What a CPU run with ``--device auto`` will use: the stored measurement, else PyTorch at once (and the
    model is scheduled for a measurement in the background: :func:`schedule`)."""
    stored = stored_choice(package, configuration, threads)
    if stored is not None:
        return stored
    if not _others():
        return _unmeasured(threads)
    digest, now = model_digest(package, configuration), machine(threads)
    older = [r for r in _read_store().values() if isinstance(r, dict) and r.get("model") == digest
             and isinstance(r.get("machine"), dict)]
    schedule(package, configuration, threads)
    if not older:
        return _unmeasured(threads)
    # measured on this model before, on another machine (or thread count): that engine, if it is here and its
    # memory fits, is a better guess than the default until the new measurement is made
    changed = _machine_change(older[-1]["machine"], now)
    then = older[-1]
    if then.get("device") in backends.cpu_devices() and then.get("device") != "cpu" and \
            not _short_of_memory(then["device"], dict(then.get("peak_mb") or {}), free_memory_mb()):
        return RuntimeChoice(then["device"], f"{changed}: {then.get('engine')} as measured then "
                             f"({then.get('measured_on', '')}), until this model is measured again in the background "
                             "or by `medseg models verify --measure`", threads)
    return _unmeasured(threads, changed)


# --- measurements wanted (the app runs them while idle: medseg.model.engine_measurement) -------------------


_wanted: dict[tuple[str, str, int], tuple[Any, str, int]] = {}  # by the model's digest: one per model, however opened
_wanted_lock = threading.Lock()


def schedule(package: Any, configuration: str, threads: int) -> None:
    """Ask for a measurement of this model in the background (a run goes on with the default engine)."""
    key = (model_digest(package, configuration), configuration, int(threads))
    with _wanted_lock:
        _wanted.setdefault(key, (package, configuration, int(threads)))


def scheduled() -> list[tuple[Any, str, int]]:
    """The measurements asked for and not done yet: (package, configuration, threads)."""
    with _wanted_lock:
        return list(_wanted.values())


def unschedule(package: Any, configuration: str, threads: int) -> None:
    key = (model_digest(package, configuration), configuration, int(threads))
    with _wanted_lock:
        _wanted.pop(key, None)


def _remember(package: Any, configuration: str, choice: RuntimeChoice) -> None:
    from medseg.io.atomic import atomic_write_text

    store = _read_store()
    store[_store_key(package, configuration, choice.threads)] = {**choice.to_dict(),
                                                                  "model": model_digest(package, configuration)}
    try:
        _store_path().parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(_store_path(), json.dumps(store, indent=1))
    except Exception:  # noqa: BLE001 - an unwritable cache costs a measurement next time, nothing else
        pass


# --- the export the CPU ONNX engines run --------------------------------------------------------------------


def exact_onnx(package: Any, configuration: str) -> Path:
    """The configuration's folds (averaged) exported with exact instance norms, in the cache folder: made
    on first use (a real-size network takes about half a minute), then read by every run of the model."""
    from medseg.app_dirs import cache_dir
    from medseg.io.atomic import atomic_path
    from medseg.model.onnx_graph import export_onnx
    from medseg.model.package import build_networks

    path = cache_dir() / EXPORT_FOLDER / f"{model_digest(package, configuration)}.onnx"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        with atomic_path(path, suffix=".onnx", _by_format=False) as temp:
            export_onnx(build_networks(package, configuration, "cpu"), package.configurations[configuration], temp,
                        exact_norm=True)
    return path


# --- memory ------------------------------------------------------------------------------------------------


def free_memory_mb() -> float:
    """The memory this process can get now without swapping (medseg.io.memory_budget's reading), in MB."""
    from medseg.io.memory_budget import available_bytes

    return available_bytes() / 2**20


def _short_of_memory(device: str, peak_mb: dict[str, float], free_mb: float) -> str:
    """Why ``device``'s measured peak would not fit in ``free_mb`` while PyTorch's does ("" if it fits, or
    nothing was measured)."""
    need, torch_need = peak_mb.get(device), peak_mb.get("cpu")
    if device == "cpu" or need is None or torch_need is None or torch_need >= need or need * MEMORY_HEADROOM <= free_mb:
        return ""
    return (f"{backends.backend(device).engine} was measured fastest but needs about {_size(need)} for a "
            f"tile and {_size(free_mb)} are free: PyTorch, which needs about {_size(torch_need)}")


def _over_budget(device: str, peak_mb: dict[str, float], timed: dict[str, float] | None = None) -> str:
    """Why ``device``'s measured peak is over the memory budget beside PyTorch's ("" if within, or unmeasured)."""
    need, torch_need = peak_mb.get(device), peak_mb.get("cpu")
    if device == "cpu" or need is None or torch_need is None:
        return ""
    budget = max(torch_need * MEMORY_BUDGET, torch_need + MEMORY_SLACK_MB)
    if need <= budget:
        return ""
    speed = f"{timed['cpu'] / timed[device]:.2f}× PyTorch's speed but " if timed and device in timed else ""
    return (f"{backends.backend(device).engine} was {speed}needs {_size(need)} for a tile, over the memory budget "
            f"of {_size(budget)} ({MEMORY_BUDGET:g}× PyTorch's {_size(torch_need)}): PyTorch")


def _size(mb: float) -> str:
    return f"{mb / 1024:.1f} GB" if mb >= 1024 else f"{mb:.0f} MB" if mb >= 1 else "under 1 MB"


# --- measuring ---------------------------------------------------------------------------------------------


def measure(package: Any, configuration: str, tile: torch.Tensor, threads: int,
            make_runner: Callable[[str], Any], cancel: Any = None,
            prepare: Callable[[str], None] | None = None) -> RuntimeChoice:
    """Run ``tile`` (a batch of one: :func:`medseg.model.engine_measurement.measurement_tile`) through every
    CPU engine here; returns the choice, stored. ``cancel`` (a CancelToken) is looked at between engines.
    ``prepare(device)`` makes what an engine reads from the cache folder (OpenVINO's slab parts) before its
    memory is measured, as the ONNX export is made first: the export's tracing is no part of a run's peak."""
    from medseg.model.peak_memory import PeakMemory

    timed: dict[str, float] = {}
    setup: dict[str, float] = {}
    peaks: dict[str, float] = {}
    labels: dict[str, torch.Tensor] = {}
    failures: dict[str, str] = {}
    free_mb = free_memory_mb()
    for device in backends.cpu_devices():  # one engine at a time: each one's peak is its own
        if cancel is not None:
            cancel.raise_if_cancelled()
        try:
            if backends.uses_onnx(device):  # made once per model: the export's tracing stays out of the engine's peak
                exact_onnx(package, configuration)
            if prepare is not None:
                prepare(device)
            with PeakMemory() as memory:
                started = time.perf_counter()
                runner = make_runner(device)
                setup[device] = round(time.perf_counter() - started, 3)
                started = time.perf_counter()
                with torch.inference_mode():
                    labels[device] = runner(tile).argmax(1)
                timed[device] = round(time.perf_counter() - started, 3)
                del runner
            peaks[device] = round(memory.peak_mb)
        except Exception as error:  # an engine that cannot run this model is not chosen
            if device == "cpu":
                raise
            labels.pop(device, None)
            failures[device] = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
    agreement = {d: round(float((labels[d] == labels["cpu"]).float().mean()), 6) for d in labels}
    reference = timed["cpu"]
    fast_enough = {d: t for d, t in timed.items() if d != "cpu" and agreement[d] >= PARITY and reference / t >= MARGIN}
    fitting = {d: t for d, t in fast_enough.items()
               if not _short_of_memory(d, peaks, free_mb) and not _over_budget(d, peaks)}
    chosen = min(fitting, key=fitting.get) if fitting else "cpu"
    fastest = min(fast_enough, key=fast_enough.get) if fast_enough else "cpu"
    reason = (_short_of_memory(fastest, peaks, free_mb) or _over_budget(fastest, peaks, timed)) \
        if chosen == "cpu" and fastest != "cpu" else _reason(chosen, timed, agreement, failures, peaks)
    today = date.today().isoformat()
    choice = RuntimeChoice(chosen, f"measured on {today}: {reason}", threads, True, timed, setup, agreement,
                           [int(n) for n in tile.shape[2:]], peaks, round(free_mb), today, machine(threads))
    _remember(package, configuration, choice)
    unschedule(package, configuration, threads)
    return choice


def _reason(chosen: str, timed: dict[str, float], agreement: dict[str, float], failures: dict[str, str],
            peaks: dict[str, float]) -> str:
    def engine(device: str) -> str:
        return backends.backend(device).engine

    reference = timed["cpu"]
    if chosen != "cpu":
        memory = (f", {_size(peaks[chosen])} peak for a tile against PyTorch's {_size(peaks['cpu'])}"
                  if chosen in peaks and "cpu" in peaks else "")  # 0: it reused memory the process had
        return (f"{engine(chosen)}: {reference / timed[chosen]:.2f}× PyTorch's speed on this model's tile here"
                f"{memory}, labels {agreement[chosen]:.4%} equal")
    parts = []
    for device, seconds in timed.items():
        if device == "cpu":
            continue
        if agreement[device] < PARITY:
            parts.append(f"{engine(device)}'s labels only {agreement[device]:.3%} equal to PyTorch's on this model's "
                         f"tile (needs {PARITY:.2%})")
        else:
            parts.append(f"{engine(device)} {reference / seconds:.2f}× PyTorch's speed (needs {MARGIN:.2f}×)")
    parts += [f"{engine(device)} could not run it ({why})" for device, why in failures.items()]
    return "; ".join(parts) if parts else "the only CPU engine installed"
