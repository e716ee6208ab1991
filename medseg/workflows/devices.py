"""The compute devices: which this machine offers, the one a run uses, and how a run's processes meet.

Every interface names a device as the user typed it ("auto", "cuda:1", "cpu", ...); the one
decision is :func:`medseg.model.backends.resolve_device` (an absent device is refused, in words,
before anything is read). The segment use case (:class:`medseg.workflows.segment.Segmenter`) and
training check it themselves; :func:`check_device` is for an interface that must refuse earlier
than its use case starts (before a series is read).
"""

from __future__ import annotations

import contextlib
import datetime
import os
from typing import Any, Iterator

INFERENCE, TRAINING = "inference", "training"  # what a device is chosen for (medseg.model.backends' words)


def check_device(requested: str, purpose: str = INFERENCE) -> str:
    """The device ``requested`` means here ("auto" made concrete); an absent one raises DeviceError."""
    from medseg.model.backends import resolve_device

    return resolve_device(requested, purpose)


def device_report() -> tuple[dict, list[str]]:
    """``medseg devices``: what this machine offers, as a JSON document and as lines for people."""
    from medseg.model.devices import probe, report_lines

    report = probe()
    return report.to_dict(), report_lines(report)


def join_processes(device: str, timeout: datetime.timedelta | None = None) -> Any:
    """The processes of a run started by torchrun meet (over NCCL when their device is a CUDA GPU, else
    gloo); one process alone gets a context of one. ``device``: a resolved device name."""
    from medseg.model.backends import torch_device
    from medseg.model.training.distributed import setup_distributed

    return setup_distributed("cuda" if torch_device(device).type == "cuda" else "cpu", timeout=timeout)


@contextlib.contextmanager
def profiled_run(folder: str | os.PathLike | None, device: str, title: str) -> Iterator[Any]:
    """``--profile DIR``: a torch.profiler trace and the phase table of the run inside (None: not profiled,
    and nothing is measured)."""
    if folder is None:
        yield None
        return
    from medseg.model.backends import torch_device
    from medseg.model.profiling import Profiling

    profiling = Profiling(folder, title=title)
    with profiling:
        profiling.set_device(torch_device(device))
        yield profiling


def phase(name: str) -> Any:
    """A phase of a profiled run ("load", "write", ...): timed when a run is profiled, free otherwise."""
    from medseg.model.profiling import phase as timed

    return timed(name)


__all__ = ["INFERENCE", "TRAINING", "check_device", "device_report", "join_processes", "profiled_run", "phase"]
