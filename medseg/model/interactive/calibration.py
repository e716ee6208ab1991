"""Measure the CPU runtimes on one model and write the choice into its folder (see :mod:`.runtimes`).

:func:`calibrate` runs PyTorch (the reference: the convolutions nnInteractive runs) and every other
available runtime once, after a warm-up pass each, on :func:`calibration_input`, and keeps the fastest
whose object agrees with PyTorch's closely enough (:data:`~.runtimes.MIN_AGREEMENT`,
:data:`~.runtimes.MIN_DICE`) and that takes at most :data:`~.runtimes.MIN_GAIN` of PyTorch's time.
It also records each runtime's peak memory for a pass (``peak_mb``): OpenVINO holds whole activations,
about one and a half times PyTorch's slabbed forward, so a session on a machine with less free memory than that runs
PyTorch instead (:func:`~.runtimes.chosen_runtime`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Callable, Sequence

import numpy as np
import torch

from medseg.errors import ModelError
from medseg.io.atomic import atomic_write_text
from medseg.model.interactive.model_files import InteractiveModel
from medseg.model.interactive.runtimes import (
    CHOICE_FILE,
    MIN_AGREEMENT,
    MIN_DICE,
    MIN_GAIN,
    RuntimeChoice,
    available_runtimes,
    ensure_onnx,
    make_runner,
)
from medseg.model.interactive.session import SLAB_BYTES, InteractiveSession
from medseg.model.lean_forward import slab_budget
from medseg.model.peak_memory import PeakMemory  # also what the segmentation's CPU engine measurement reads


def calibration_input(model: InteractiveModel) -> torch.Tensor:
    """A synthetic CT-like patch (air, a body of soft tissue with noise, a denser round lesion) with a
    positive click in the lesion, drawn into the network's channels by medseg's own session."""
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
    say = progress or (lambda _text: None)
    candidates = [c for c in (candidates or available_runtimes()) if c != "torch"]
    x = calibration_input(model)
    say("running the network with PyTorch (the reference)")
    with slab_budget(SLAB_BYTES), PeakMemory() as memory:
        reference_runner = make_runner(model, "torch")
        _answer(reference_runner, x)  # the first pass includes oneDNN's one-time set-up, as OpenVINO's does
        reference, torch_seconds = _answer(reference_runner, x)
        del reference_runner
    measured: dict[str, dict] = {"torch": {"seconds": round(torch_seconds, 3), "agreement": 1.0, "dice": 1.0,
                                           "peak_mb": round(memory.peak_mb)}}
    best, best_seconds = "torch", torch_seconds
    for runtime in candidates:
        say(f"trying {runtime}")
        try:
            if folder is not None:  # the export is install work, not the runtime's pass: it stays out of its peak
                ensure_onnx(model, Path(folder))  # (the first one traces the module forward at full size)
            with PeakMemory() as memory:
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
                             "exact_enough": exact, "peak_mb": round(memory.peak_mb)}
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


__all__ = ["PeakMemory", "calibrate", "calibration_input"]
