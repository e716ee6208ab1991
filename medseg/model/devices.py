"""The device check: which compute devices this machine offers medseg, and which it would use.

Shown by ``medseg devices [--json]`` and Help ▸ About. It asks the same functions the
device choice uses (medseg.model.backends), so the report and ``--device auto`` agree.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from medseg import __version__, threads
from medseg.build_info import build_info, training_unavailable_reason
from medseg.model import backends

GIB = 1024**3


@dataclass(frozen=True)
class CudaGpu:
    index: int
    name: str
    memory_bytes: int
    compute_capability: str


@dataclass(frozen=True)
class DeviceReport:
    medseg: str
    variant: str
    frozen: bool
    torch: str
    torch_cuda: str | None  # the CUDA version PyTorch was built with (None: a CPU build)
    onnxruntime: str | None
    onnx_providers: list[str]
    cuda: list[CudaGpu]
    directml: bool
    directml_adapters: list[str]  # Windows' display adapters; DirectML's device 0 is the default one
    mps_built: bool
    mps: bool
    cpu: str
    cpu_logical_cores: int
    cpu_physical_cores: int | None
    cpu_usable_cores: int  # in this process's affinity mask
    threads: int  # what medseg computes with on the CPU
    threads_source: str  # where that number came from (medseg.threads)
    torch_threads: int
    memory_bytes: int | None
    available: list[str]
    recommended: str
    training: bool
    training_note: str | None = None
    notes: list[str] = field(default_factory=list)
    openvino: str | None = None  # the optional extra medseg[openvino]: a third CPU engine

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _openvino_version() -> str | None:
    if not backends.openvino_available():
        return None
    import openvino

    return str(openvino.__version__)


def _onnxruntime_version() -> str | None:
    try:
        import onnxruntime
    except ImportError:
        return None
    return str(onnxruntime.__version__)


def _windows_adapters() -> list[str]:
    """Display adapter names on Windows (ONNX Runtime does not name DirectML's adapter)."""
    if sys.platform != "win32":
        return []
    try:
        done = subprocess.run(
            ["powershell", "-NoProfile", "-Command", "(Get-CimInstance Win32_VideoController).Name"],
            capture_output=True, text=True, timeout=10,
            creationflags=getattr(subprocess, "CREATE_NO_WINDOW", 0),
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in done.stdout.splitlines() if line.strip()]


def _cuda_gpus() -> list[CudaGpu]:
    if not backends.cuda_available():
        return []
    gpus = []
    for index in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(index)
        gpus.append(CudaGpu(index, props.name, int(props.total_memory), f"{props.major}.{props.minor}"))
    return gpus


def cpu_name() -> str:
    """The CPU's model name where the OS tells it cheaply (platform.processor() is often empty on Linux)."""
    if sys.platform.startswith("linux"):
        try:
            for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
        except OSError:
            pass
    return platform.processor() or platform.machine()


def _memory_bytes() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return int(psutil.virtual_memory().total)


def _physical_cores() -> int | None:
    try:
        import psutil
    except ImportError:
        return None
    return psutil.cpu_count(logical=False)


def probe() -> DeviceReport:
    """Look at the machine now (imports torch and ONNX Runtime; about a second)."""
    info = build_info()
    count = threads.budget_count()
    providers = backends.onnx_providers()
    directml = backends.DIRECTML_PROVIDER in providers
    mps_backend = getattr(torch.backends, "mps", None)
    notes = []
    if backends.mps_available():
        notes.append("MPS is offered but not chosen automatically (3D transposed convolutions differ "
                     "between PyTorch versions); pick it with --device mps")
    return DeviceReport(
        medseg=__version__,
        variant=str(info.get("variant")),
        frozen=bool(info.get("frozen")),
        torch=str(torch.__version__),
        torch_cuda=torch.version.cuda,
        onnxruntime=_onnxruntime_version(),
        onnx_providers=providers,
        cuda=_cuda_gpus(),
        directml=directml,
        directml_adapters=_windows_adapters() if directml else [],
        mps_built=bool(mps_backend is not None and mps_backend.is_built()),
        mps=backends.mps_available(),
        cpu=cpu_name(),
        cpu_logical_cores=os.cpu_count() or 1,
        cpu_physical_cores=_physical_cores(),
        cpu_usable_cores=threads.affinity_cores(),
        threads=count.threads,
        threads_source=count.explain(),
        torch_threads=torch.get_num_threads(),
        memory_bytes=_memory_bytes(),
        available=backends.available_devices(),
        recommended=backends.resolve_device("auto"),
        training=training_unavailable_reason() is None,
        training_note=training_unavailable_reason(),
        notes=notes,
        openvino=_openvino_version(),
    )


def report_lines(report: DeviceReport) -> list[str]:
    """The report as short lines for a terminal or the About box."""
    build = "source checkout" if report.variant == "source" else f"{report.variant} build"
    lines = [f"medseg {report.medseg} ({build}{', bundled' if report.frozen else ''})",
             f"Device used by 'auto': {report.recommended}   (available: {', '.join(report.available)})"]
    if report.cuda:
        for gpu in report.cuda:
            lines.append(f"CUDA GPU {gpu.index}: {gpu.name}, {gpu.memory_bytes / GIB:.1f} GiB, "
                         f"compute capability {gpu.compute_capability} (CUDA {report.torch_cuda})")
    elif report.torch_cuda:
        lines.append(f"CUDA: no usable GPU (PyTorch built for CUDA {report.torch_cuda}; check the NVIDIA driver)")
    else:
        lines.append(f"CUDA: not in this build (PyTorch {report.torch} is a CPU build)")
    if report.directml:
        adapters = ", ".join(report.directml_adapters) or "default adapter"
        lines.append(f"DirectML: available through ONNX Runtime {report.onnxruntime} ({adapters})")
    else:
        lines.append(f"DirectML: not available (ONNX Runtime providers: {', '.join(report.onnx_providers) or 'none'})")
    if report.mps:
        lines.append("Apple MPS: available")
    else:
        lines.append("Apple MPS: " + ("built in but not usable on this machine" if report.mps_built else "not in this build"))
    physical = f", {report.cpu_physical_cores} physical" if report.cpu_physical_cores else ""
    memory = f", {report.memory_bytes / GIB:.1f} GiB memory" if report.memory_bytes else ""
    usable = "" if report.cpu_usable_cores == report.cpu_logical_cores else f", {report.cpu_usable_cores} usable"
    lines.append(f"CPU: {report.cpu}, {report.cpu_logical_cores} logical cores{physical}{usable}{memory}")
    lines.append(f"CPU threads: {report.threads}, from {report.threads_source} (--threads N to change)")
    engines = ["PyTorch"] + ([f"ONNX Runtime {report.onnxruntime}"] if "onnx-cpu" in report.available else []) + \
        ([f"OpenVINO {report.openvino}"] if "openvino-cpu" in report.available else [])
    missing = "" if report.openvino else " (OpenVINO not installed: pip install 'medseg[openvino]')"
    lines.append(f"CPU engines: {', '.join(engines)}, measured per model by 'auto'{missing}")
    lines.append("Training: available" if report.training else f"Training: not available ({report.training_note})")
    lines.extend(f"Note: {note}" for note in report.notes)
    return lines
