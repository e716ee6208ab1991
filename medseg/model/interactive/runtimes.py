"""Which CPU runtime runs an interactive model's network, chosen by measurement for each model
(the measuring is :mod:`.calibration`'s).

Candidates (what ``benchmarks/bench_interactive.py --runtimes`` measures on the 192^3 network):

* ``torch``: PyTorch with oneDNN convolutions and medseg's lean forward, float32: the convolutions
  nnInteractive itself runs, the same answer to float rounding, and always a candidate;
* ``openvino``: OpenVINO's CPU plugin in float32 (the optional extra ``medseg[openvino]``) on an ONNX
  export whose instance norms are short reductions (:mod:`medseg.model.exact_norm`): exported as
  InstanceNormalization, OpenVINO's one-pass statistics changed 0.44 % of a 192^3 patch's voxels on
  nnInteractive's ResEnc-L with random weights (over the 0.1 % bound, so calibration rejected it);
  the exact export changes 0.0001 %, at about 0.6x PyTorch's CPU time (measured 2026-12-06, 2 threads:
  38-40 against 69 CPU s a 192^3 pass; 0.66-0.69x nnInteractive's in benchmarks/bench_interactive.py),
  but OpenVINO holds more memory than PyTorch (it keeps whole activations, the lean forward slabs): the peak
  of a process running one 192^3 pass is 5.6 GB with the network compiled for the patch's static shape
  (7.2 GB on the export's dynamic batch axis, about nnInteractive's whole process), PyTorch's 3.6 GB;
* ``openvino-bf16``: OpenVINO in bfloat16 where the CPU computes it natively (AVX512-BF16 / AMX):
  several times faster (0.9 against 7.5 s at 64^3), and 99.1 % of the voxels: not exact enough.

Exactness decides before speed. :func:`~.calibration.calibrate` runs each available candidate once on a
synthetic CT-like patch with a click in its middle, compares its object with ``torch``'s, and
chooses the fastest candidate whose object agrees on at least :data:`MIN_AGREEMENT` of the voxels
with Dice at least :data:`MIN_DICE` (the bounds issue #39 sets against nnInteractive), and that is at
least :data:`MIN_GAIN` faster; otherwise torch. The result (every candidate's seconds and agreement,
the choice and the reason) is written into the model's folder as ``runtime.json`` beside the ONNX
export the OpenVINO candidates read (:data:`ONNX_FILE`), both atomically, once per model: on install,
or on first use of a model folder. The plan shows the choice and its reason. Calibration also records
each runtime's peak memory for a pass; a session on a machine with less free memory than the chosen
runtime's peak (with :data:`MEMORY_HEADROOM`) runs PyTorch, whose slabbed forward needs about half.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from medseg.errors import ModelError
from medseg.io.atomic import atomic_path
from medseg.model.backends import OpenVinoRunner, openvino_available  # the segmentation's "openvino-cpu" row's too
from medseg.model.interactive.model_files import InteractiveModel

RUNTIMES = ("torch", "openvino", "openvino-bf16")
CHOICE_FILE = "runtime.json"
ONNX_FILE = "interactive-exact-norm.onnx"  # a new name: an older export (InstanceNormalization) is not reused
MIN_AGREEMENT = 0.999  # the parity bar of tests/model/test_interactive_parity.py
MIN_DICE = 0.99
MIN_GAIN = 0.9  # a candidate must take at most this share of torch's time to replace it
CHOICE_VERSION = 3  # 1: measured on the InstanceNormalization export; 2: OpenVINO's peak on a dynamic batch axis


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


def available_runtimes() -> list[str]:
    return ["torch", "openvino", "openvino-bf16"] if openvino_available() else ["torch"]


def onnx_path(folder: Path) -> Path:
    return Path(folder) / ONNX_FILE


def ensure_onnx(model: InteractiveModel, folder: Path) -> Path:
    """The network's ONNX export in the model's folder (written once, atomically)."""
    from medseg.model.onnx_graph import export_onnx

    path = onnx_path(folder)
    if not path.is_file():
        with atomic_path(path, suffix=".onnx", _by_format=False) as temp:
            export_onnx(model.build_network(), model.plan, temp, exact_norm=True)
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
    shape = (1, model.plan.num_input_channels, *model.plan.patch_size)  # every pass is one patch
    return OpenVinoRunner(ensure_onnx(model, folder), precision, threads, shape=shape)


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
    return runtime_for_folder(model.source_path, requested)


def runtime_for_folder(folder: Path | None, requested: str = "auto") -> tuple[str, str]:
    """:func:`chosen_runtime` for the model in ``folder``, without reading its weights."""
    if requested != "auto":
        if requested not in RUNTIMES:
            raise ModelError(f"unknown interactive runtime {requested!r} (known: auto, {', '.join(RUNTIMES)})")
        return requested, "asked for"
    choice = load_choice(folder)
    if choice is None:
        return "torch", "no measured choice for this model yet: PyTorch, the exact runtime"
    if choice.runtime != "torch" and not openvino_available():
        return "torch", f"{choice.runtime} was measured fastest, but OpenVINO is not installed here"
    short = _short_of_memory(choice)
    if short:
        return "torch", short
    return choice.runtime, choice.reason


def measured_pass_seconds(folder: Path | None, runtime: str) -> float | None:
    """A full-patch pass's seconds on ``runtime`` as calibration measured them on this computer (None: not
    measured)."""
    choice = load_choice(folder)
    seconds = choice.measured.get(runtime, {}).get("seconds") if choice is not None else None
    if not isinstance(seconds, (int, float)) or seconds <= 0:
        return None
    return float(seconds)


MEMORY_HEADROOM = 1.25  # free memory a runtime's measured peak must fit in, with room for the app's own growth


def free_memory_mb() -> float:
    """The memory this process can get now without swapping (medseg.io.memory_budget's reading), in MB."""
    from medseg.io.memory_budget import available_bytes

    return available_bytes() / 2**20


def _short_of_memory(choice: RuntimeChoice) -> str:
    """Why the chosen runtime would not fit in the free memory while PyTorch's slabbed forward does ("" if it
    fits, or nothing was measured): OpenVINO holds whole activations, about one and a half times PyTorch's peak."""
    need = choice.measured.get(choice.runtime, {}).get("peak_mb")
    torch_need = choice.measured.get("torch", {}).get("peak_mb")
    if choice.runtime == "torch" or need is None or torch_need is None or torch_need >= need:
        return ""
    free = free_memory_mb()
    if need * MEMORY_HEADROOM <= free:
        return ""
    return (f"{choice.runtime} was measured fastest but needs about {need / 1024:.1f} GB for a pass and "
            f"{free / 1024:.1f} GB are free: PyTorch, which needs about {torch_need / 1024:.1f} GB")


__all__ = ["CHOICE_FILE", "MIN_AGREEMENT", "MIN_DICE", "MIN_GAIN", "ONNX_FILE", "OpenVinoRunner", "RUNTIMES",
           "RuntimeChoice", "available_runtimes", "chosen_runtime", "ensure_onnx", "load_choice", "make_runner",
           "measured_pass_seconds", "runtime_for_folder",
           "free_memory_mb", "openvino_available"]


def calibrated_pass(folder: Path | None, runtime: str, source: str) -> tuple[float | None, str]:
    """A pass's seconds as measured at install for ``runtime``, with ``source`` (how it is known); (None, "")
    where nothing was measured."""
    seconds = measured_pass_seconds(folder, runtime)
    return (seconds, source) if seconds is not None else (None, "")


def takes_cancel(runner: object) -> bool:
    """Whether a runner stops a running pass when its cancel token is set (OpenVINO's infer request does)."""
    return isinstance(runner, OpenVinoRunner)
