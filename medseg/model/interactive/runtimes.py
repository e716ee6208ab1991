"""Which CPU runtime runs an interactive model's network, chosen by measurement for each model.

Candidates (what ``benchmarks/bench_interactive.py --runtimes`` measures on the 192^3 network):

* ``torch``: PyTorch with oneDNN convolutions and medseg's lean forward, float32: the convolutions
  nnInteractive itself runs, the same answer to float rounding, and always a candidate;
* ``openvino``: OpenVINO's CPU plugin in float32 (the optional ``openvino`` package);
* ``openvino-bf16``: OpenVINO in bfloat16 where the CPU computes it natively (AVX512-BF16 / AMX):
  several times faster, less exact.

Exactness decides before speed. :func:`calibrate` runs each available candidate once on a
synthetic CT-like patch with a click in its middle, compares its object with ``torch``'s, and
chooses the fastest candidate whose object agrees on at least :data:`MIN_AGREEMENT` of the voxels
with Dice at least :data:`MIN_DICE` (and that is at least :data:`MIN_GAIN` faster; otherwise torch).
The result (every candidate's seconds and agreement, the choice and the reason) is written into the
model's folder as ``runtime.json`` beside the ONNX export the OpenVINO candidates read
(``interactive.onnx``), both atomically, once per model: on install, or on first use of a model
folder. On nnInteractive's architecture with random weights (the tests' and the benchmark's
checkpoint) neither OpenVINO candidate agrees closely enough, so torch is chosen; a trained
network, whose answers are far from the decision boundary, may let a faster one through.
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from medseg.errors import Cancelled, ModelError
from medseg.io.atomic import atomic_path, atomic_write_text
from medseg.model.interactive.model_files import InteractiveModel
from medseg.progress import CancelToken

RUNTIMES = ("torch", "openvino", "openvino-bf16")
CHOICE_FILE = "runtime.json"
ONNX_FILE = "interactive.onnx"
MIN_AGREEMENT = 0.999  # the parity bar of tests/model/test_interactive_parity.py
MIN_DICE = 0.99
MIN_GAIN = 0.9  # a candidate must take at most this share of torch's time to replace it
CHOICE_VERSION = 1


@dataclass
class RuntimeChoice:
    """What calibration measured and chose. ``measured``: runtime -> seconds, agreement and Dice with torch
    (or the reason it could not run)."""

    runtime: str
    reason: str
    measured: dict[str, dict] = field(default_factory=dict)
    threads: int = 0
    version: int = CHOICE_VERSION

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)


def openvino_available() -> bool:
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


def available_runtimes() -> list[str]:
    return ["torch", "openvino", "openvino-bf16"] if openvino_available() else ["torch"]


# --- runners ----------------------------------------------------------------------------------------
class OpenVinoRunner:
    """The network's ONNX export compiled by OpenVINO for the CPU; logits back as a torch tensor.
    ``cancel`` stops a running pass (OpenVINO's asynchronous request is cancelled)."""

    def __init__(self, onnx: Path, precision: str = "f32", threads: int | None = None):
        try:
            import openvino
        except ImportError as error:
            raise ModelError("OpenVINO is not installed (pip install 'medseg[openvino]')") from error
        config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY",
                  "INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads())}
        try:
            self.compiled = openvino.Core().compile_model(str(onnx), "CPU", config)
        except RuntimeError as error:
            raise ModelError(f"OpenVINO could not compile the network: {error}", path=onnx) from error
        self.request = self.compiled.create_infer_request()
        self.name = "openvino" if precision == "f32" else f"openvino-{precision}"

    def __call__(self, tiles: torch.Tensor, cancel: CancelToken | None = None) -> torch.Tensor:
        self.request.start_async({0: np.ascontiguousarray(tiles.detach().cpu().numpy(), dtype=np.float32)})
        while not self.request.wait_for(100):  # milliseconds
            if cancel is not None and cancel.cancelled:
                self.request.cancel()
                raise Cancelled()
        return torch.from_numpy(self.request.get_output_tensor(0).data.copy())


def onnx_path(folder: Path) -> Path:
    return Path(folder) / ONNX_FILE


def ensure_onnx(model: InteractiveModel, folder: Path) -> Path:
    """The network's ONNX export in the model's folder (written once, atomically)."""
    from medseg.model.onnx_graph import export_onnx

    path = onnx_path(folder)
    if not path.is_file():
        with atomic_path(path, suffix=".onnx", _by_format=False) as temp:
            export_onnx(model.build_network(), model.plan, temp)
    return path


def make_runner(model: InteractiveModel, runtime: str, folder: Path | None = None, threads: int | None = None):
    """A runner of ``runtime`` for the session (torch needs no folder)."""
    if runtime == "torch":
        from medseg.model.backends import TorchRunner

        return TorchRunner([model.build_network()], "cpu", onednn=True, lean=True)
    if runtime not in RUNTIMES:
        raise ModelError(f"unknown interactive runtime {runtime!r} (known: {', '.join(RUNTIMES)})")
    if folder is None:
        raise ModelError(f"the {runtime} runtime needs the model's folder (for its ONNX export)")
    precision = "bf16" if runtime.endswith("bf16") else "f32"
    return OpenVinoRunner(ensure_onnx(model, folder), precision, threads)


# --- calibration -------------------------------------------------------------------------------------
def calibration_input(model: InteractiveModel) -> torch.Tensor:
    """A synthetic CT-like patch (air, a body of soft tissue with noise, a denser round lesion) with a
    positive click in the lesion, drawn into the network's channels by medseg's own session."""
    from medseg.model.interactive.session import InteractiveSession

    shape = tuple(int(p) for p in model.plan.patch_size)
    grid = np.indices(shape, dtype=np.float32)
    centre = np.array([s / 2 for s in shape], dtype=np.float32).reshape(3, 1, 1, 1)
    radius = np.sqrt((((grid - centre) / (np.array(shape, np.float32).reshape(3, 1, 1, 1) / 2)) ** 2).sum(0))
    noise = np.random.default_rng(0).normal(0, 15, shape).astype(np.float32)
    image = np.where(radius < 0.9, 40.0, -1000.0) + np.where(radius < 0.25, 80.0, 0.0) + noise
    seen: list[torch.Tensor] = []

    def capture(batch: torch.Tensor) -> torch.Tensor:
        seen.append(batch.detach().clone())
        return torch.zeros(batch.shape[0], 2, *batch.shape[2:])

    session = InteractiveSession(model, runner=capture, autozoom=False)
    session.set_image(image.astype(np.int16))
    session.add_point([s // 2 for s in shape], True)
    return seen[0]


def _answer(runner: Callable, x: torch.Tensor) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    with torch.inference_mode():
        logits = runner(x)
    seconds = time.perf_counter() - started
    return logits[0].argmax(0).to(torch.uint8).cpu().numpy(), seconds


def calibrate(model: InteractiveModel, folder: Path | None, candidates: Sequence[str] | None = None,
              threads: int | None = None, progress: Callable[[str], None] | None = None) -> RuntimeChoice:
    """Measure each candidate against torch on :func:`calibration_input` and write the choice into ``folder``
    (when given) as ``runtime.json``."""
    from medseg.model.lean_forward import slab_budget
    from medseg.model.interactive.session import SLAB_BYTES

    say = progress or (lambda _text: None)
    candidates = [c for c in (candidates or available_runtimes()) if c != "torch"]
    x = calibration_input(model)
    say("running the network with PyTorch (the reference)")
    with slab_budget(SLAB_BYTES):
        reference, torch_seconds = _answer(make_runner(model, "torch"), x)
    measured: dict[str, dict] = {"torch": {"seconds": round(torch_seconds, 3), "agreement": 1.0, "dice": 1.0}}
    best, best_seconds = "torch", torch_seconds
    for runtime in candidates:
        say(f"trying {runtime}")
        try:
            runner = make_runner(model, runtime, folder, threads)
            _answer(runner, x)  # the first pass of a compiled model includes one-time set-up
            answer, seconds = _answer(runner, x)
            del runner
        except (ModelError, RuntimeError) as error:
            measured[runtime] = {"error": str(error)[:300]}
            continue
        agreement = float((answer == reference).mean())
        a, b = answer.astype(bool), reference.astype(bool)
        dice = float(2 * (a & b).sum() / max(1, a.sum() + b.sum()))
        exact = agreement >= MIN_AGREEMENT and dice >= MIN_DICE
        measured[runtime] = {"seconds": round(seconds, 3), "agreement": round(agreement, 6), "dice": round(dice, 6),
                             "exact_enough": exact}
        if exact and seconds <= MIN_GAIN * torch_seconds and seconds < best_seconds:
            best, best_seconds = runtime, seconds
    choice = RuntimeChoice(best, _reason(best, measured), measured, int(threads or torch.get_num_threads()))
    if folder is not None:
        atomic_write_text(Path(folder) / CHOICE_FILE, choice.to_json())
    return choice


def _reason(best: str, measured: dict[str, dict]) -> str:
    torch_seconds = measured["torch"]["seconds"]
    parts = []
    for runtime, row in measured.items():
        if runtime == "torch":
            continue
        if "error" in row:
            parts.append(f"{runtime} could not run ({row['error']})")
        elif not row["exact_enough"]:
            parts.append(f"{runtime} ({row['seconds']:.1f} s) agreed with PyTorch on {100 * row['agreement']:.2f} % of "
                         f"the voxels (Dice {row['dice']:.4f}), below {100 * MIN_AGREEMENT:.1f} % / {MIN_DICE}")
        else:
            parts.append(f"{runtime} {row['seconds']:.1f} s, agreement {100 * row['agreement']:.3f} %")
    if best == "torch":
        head = f"PyTorch ({torch_seconds:.1f} s a pass): no other runtime was both exact enough and faster"
    else:
        row = measured[best]
        head = (f"{best}: {row['seconds']:.1f} s a pass against PyTorch's {torch_seconds:.1f} s, with the same object "
                f"on {100 * row['agreement']:.3f} % of the voxels")
    return head + (": " + "; ".join(parts) if parts else "")


def load_choice(folder: Path | None) -> RuntimeChoice | None:
    """The choice written by :func:`calibrate`, or None (none yet, or from an older medseg)."""
    if folder is None or not (Path(folder) / CHOICE_FILE).is_file():
        return None
    try:
        data = json.loads((Path(folder) / CHOICE_FILE).read_text(encoding="utf-8"))
        choice = RuntimeChoice(str(data["runtime"]), str(data["reason"]), dict(data.get("measured", {})),
                               int(data.get("threads", 0)), int(data.get("version", 0)))
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if choice.version != CHOICE_VERSION or choice.runtime not in RUNTIMES:
        return None
    return choice


def chosen_runtime(model: InteractiveModel, requested: str = "auto") -> tuple[str, str]:
    """(runtime, why) for a session: ``requested`` if it is one, else the model folder's measured choice,
    else torch. A choice that needs OpenVINO on a machine without it falls back to torch."""
    if requested != "auto":
        if requested not in RUNTIMES:
            raise ModelError(f"unknown interactive runtime {requested!r} (known: auto, {', '.join(RUNTIMES)})")
        return requested, "asked for"
    choice = load_choice(model.source_path)
    if choice is None:
        return "torch", "no measured choice for this model yet: PyTorch, the exact runtime"
    if choice.runtime != "torch" and not openvino_available():
        return "torch", f"{choice.runtime} was measured fastest, but OpenVINO is not installed here"
    return choice.runtime, choice.reason


__all__ = ["CHOICE_FILE", "MIN_AGREEMENT", "MIN_DICE", "ONNX_FILE", "OpenVinoRunner", "RUNTIMES", "RuntimeChoice",
           "available_runtimes", "calibrate", "calibration_input", "chosen_runtime", "ensure_onnx", "load_choice",
           "make_runner", "openvino_available"]
