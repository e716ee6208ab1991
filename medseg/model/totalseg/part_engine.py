"""Which CPU engine runs one network of TotalSegmentator's pipeline, and the run on it (issue 49's speed).

TotalSegmentator runs every network in PyTorch, and so did medseg's copy of its pipeline: 98 % of a
liver_segments run was the network, and medseg took 1.01-1.17x TotalSegmentator's time. A medseg package
already runs on the CPU engine measured fastest for it with equal labels (medseg.model.cpu_runtime:
PyTorch, ONNX Runtime or OpenVINO, about 2x PyTorch's speed on TotalSegmentator-sized networks here).
Each network of a TotalSegmentator model is such a package, so with ``--device auto`` it gets the same
choice: the record measured for it on this machine (at install, by ``medseg models verify --measure``, or
while the app is idle), else PyTorch at once and a measurement scheduled. ``--device cpu`` keeps PyTorch,
as TotalSegmentator itself (the parity tests compare that path voxel for voxel).

An ONNX engine runs the configuration's folds averaged in one export (float32); TotalSegmentator sums the
folds' float16 logits. The labels a measurement accepts are >= 99.9 % equal to PyTorch's on a tile, the
issue's bar for `exact`; an engine that fails in a run falls back to PyTorch and says so.
"""

from __future__ import annotations

from typing import Any

from medseg.model import backends

PYTORCH = "cpu"


def choose(package: Any, configuration: str, threads: int, auto: bool) -> tuple[str, str]:
    """(device, why) for one network: "cpu" (PyTorch) unless the run lets medseg choose (``--device auto``
    resolved to the CPU) and a measured record picks another engine."""
    if not auto:
        return PYTORCH, "PyTorch (the device was set to cpu)"
    from medseg.model import cpu_runtime

    choice = cpu_runtime.planned_choice(package, configuration, max(int(threads), 1))
    return choice.device, choice.describe()


def onnx_logits(device: str, package: Any, configuration: str, plan: Any, image: Any, step: float,
                progress: Any, cancel: Any, fallbacks: list[str], keep: dict | None, key: tuple) -> Any:
    """The network's logits on an ONNX engine (OpenVINO, ONNX Runtime); None when the engine failed (said in
    ``fallbacks``: the caller runs PyTorch). Kept in ``keep`` for a batch's next study."""
    import torch

    from medseg.errors import Cancelled
    from medseg.model.infer import _make_runner
    from medseg.model.profiling import phase
    from medseg.model.sliding_window import sliding_window_logits

    try:
        with phase("load"):
            runner = keep.get(key) if keep is not None else None
            if runner is None:
                runner = _make_runner(device, package, configuration, plan)
                if keep is not None:
                    keep[key] = runner
        with phase("stitching"):
            return sliding_window_logits(runner, torch.as_tensor(image), plan, step_size=step, progress=progress,
                                         cancel=cancel, fallbacks=fallbacks)
    except Exception as error:  # any engine failure (the Cancelled re-raised): PyTorch runs the network instead
        if isinstance(error, Cancelled):
            raise
        if keep is not None:
            keep.pop(key, None)
        first = str(error).splitlines()[0][:120] if str(error) else type(error).__name__
        fallbacks.append(f"{backends.backend(device).engine} failed on {package.name} ({first}): PyTorch ran it")
        return None


__all__ = ["PYTORCH", "choose", "onnx_logits"]
