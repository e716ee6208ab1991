"""Compute devices and the tile runners that execute a network on them.

A *runner* maps a batch of tiles (B, C, *patch) float32 to logits (B, K, *patch). The
sliding window does not care which engine is behind it:

* ``TorchRunner``: PyTorch on CUDA (fp16 autocast, as nnU-Net), Apple MPS or the CPU;
* ``OnnxRunner``: ONNX Runtime with the DirectML provider (AMD/Intel/NVIDIA GPUs on
  Windows) or the CPU provider, from an exported model (``medseg.model.export``);
* ``OpenVinoRunner``: OpenVINO's CPU plugin (the optional extra ``medseg[openvino]``) on an
  export whose instance norms are short reductions (``medseg.model.exact_norm``).

Several folds of one configuration are averaged per tile (nnU-Net averages the stitched
fold logits; the Gaussian stitching is linear, so this is the same up to rounding and
needs one accumulator instead of one per fold).
"""

from __future__ import annotations

import contextlib
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Protocol, Sequence

import numpy as np
import torch
from torch import nn

from medseg import threads as medseg_threads
from medseg.errors import Cancelled, DeviceError, ModelError
from medseg.model.lean_forward import lean_forward
from medseg.progress import CancelToken

INFERENCE, TRAINING = "inference", "training"  # what a device is chosen for
DIRECTML_PROVIDER = "DmlExecutionProvider"
TORCH, ONNXRUNTIME, OPENVINO = "PyTorch", "ONNX Runtime", "OpenVINO"  # the engines behind the devices


class TileRunner(Protocol):
    name: str  # the device as the user names it: "cuda", "directml", "onnx-cpu", "openvino-cpu", "cpu", "mps"
    device: torch.device  # where input tiles must be and where logits come back

    def __call__(self, tiles: torch.Tensor) -> torch.Tensor: ...


def onnx_providers() -> list[str]:
    try:
        import onnxruntime
    except ImportError:  # onnxruntime is a dependency, but a broken install must not stop torch devices
        return []
    return list(onnxruntime.get_available_providers())


def cuda_available() -> bool:
    return torch.cuda.is_available()


def mps_available() -> bool:
    return bool(getattr(torch.backends, "mps", None) and torch.backends.mps.is_available())


def directml_available() -> bool:
    return DIRECTML_PROVIDER in onnx_providers()


def onnx_cpu_available() -> bool:
    return "CPUExecutionProvider" in onnx_providers()


def openvino_available() -> bool:
    """The optional extra ``medseg[openvino]`` is installed."""
    try:
        import openvino  # noqa: F401
    except ImportError:
        return False
    return True


@dataclass(frozen=True)
class Backend:
    """One compute backend: a device as ``--device`` names it, the engine that runs it, where its
    tensors live, what it is for, and how to tell whether this machine has it.

    :data:`BACKENDS` is the one table: the device choice, ``medseg devices``, the plan, segment,
    train and the GUI's menus all read it. A new backend is one row (and its runner).
    """

    name: str  # what --device takes
    engine: str  # TORCH, ONNXRUNTIME or OPENVINO
    tensor_device: str  # the torch device its pre- and post-processing run on ("cpu" for ONNX engines)
    gpu: bool  # computes on a graphics card
    purposes: tuple[str, ...]  # INFERENCE, TRAINING
    automatic: bool  # may "auto" pick it (in table order)?
    title: str  # for a menu: "DirectML (ONNX Runtime)"
    is_available: Callable[[], bool]
    absent: str  # why it cannot be used, for the DeviceError
    absent_hint: str

    @property
    def exported(self) -> bool:
        """It runs the model's ONNX export, not the PyTorch network."""
        return self.engine != TORCH

    def available(self) -> bool:
        return bool(self.is_available())


# "auto" tries the automatic rows in this order. MPS is not chosen automatically:
# ConvTranspose3d support differs between PyTorch versions. On a CPU, "auto" lets a measurement on
# the model's own tile choose between the CPU rows (PyTorch first: the reference; then "onnx-cpu"
# and "openvino-cpu", which "auto" never picks without that measurement: medseg.model.cpu_runtime).
# The CPU ONNX rows run an export whose instance norms are short reductions
# (medseg.model.exact_norm): exported as InstanceNormalization, ONNX Runtime's and OpenVINO's
# one-pass float32 statistics (var = E[x^2] - E[x]^2) left nnU-Net's real-size network (6 stages,
# 32->320, 128^3, lung1 at 1.5 mm) equal to PyTorch's labels on only 99.60 % (ORT) and 98.15 %
# (OpenVINO 2026.4) of a tile (issues #16, #40); the exact export gives 99.9996 % and 99.9995 %,
# with OpenVINO at ~1.9x PyTorch's speed and ~1.75x its memory (2026-12-07, 2 threads; notebook). "openvino-cpu"
# now runs a plain U-Net's full-resolution stage slab by slab (medseg.model.openvino_slabs: the pass +745 MB
# against +1256 MB whole, at ~1.3x PyTorch's speed), and the choice also weighs memory (cpu_runtime.MEMORY_BUDGET).
# DirectML keeps the package's InstanceNormalization export (medseg.model.onnx_graph).
BACKENDS: tuple[Backend, ...] = (
    Backend("cuda", TORCH, "cuda", True, (INFERENCE, TRAINING), True, "CUDA", lambda: cuda_available(),
            "CUDA was requested but no CUDA GPU is usable by PyTorch", "use --device cpu or auto"),
    Backend("directml", ONNXRUNTIME, "cpu", True, (INFERENCE,), True, "DirectML (ONNX Runtime)",
            lambda: directml_available(),
            "DirectML was requested but ONNX Runtime's DmlExecutionProvider is not installed",
            "on Windows install onnxruntime-directml (it replaces onnxruntime), or use --device cpu"),
    Backend("mps", TORCH, "mps", True, (INFERENCE,), False, "Apple MPS (PyTorch)", lambda: mps_available(),
            "Apple MPS was requested but is not available", "use --device cpu"),
    Backend("cpu", TORCH, "cpu", False, (INFERENCE, TRAINING), True, "CPU", lambda: True, "", ""),
    Backend("onnx-cpu", ONNXRUNTIME, "cpu", False, (INFERENCE,), False, "CPU", lambda: onnx_cpu_available(),
            "ONNX Runtime is not installed", "pip install onnxruntime, or use --device cpu"),
    Backend("openvino-cpu", OPENVINO, "cpu", False, (INFERENCE,), False, "CPU", lambda: openvino_available(),
            "OpenVINO is not installed (it is the optional extra medseg[openvino])",
            "pip install 'medseg[openvino]', or use --device cpu"),
)
DEVICES = ("auto", *(backend.name for backend in BACKENDS))
# Where a run on each device does its tensor work (preprocessing, stitching, resampling): ONNX
# Runtime takes and returns host memory, so its devices work in the CPU's. Read from the table.
TENSOR_DEVICE = {row.name: row.tensor_device for row in BACKENDS}


def backend(name: str) -> Backend:
    """The table's row for a device name (DeviceError for a name it does not have)."""
    for row in BACKENDS:
        if row.name == name:
            return row
    raise DeviceError(f"unknown device {name!r}", hint=f"choose one of {', '.join(DEVICES)}")


def available_devices(purpose: str = INFERENCE) -> list[str]:
    """The devices that would work on this machine for ``purpose``, best first (menus, `medseg devices`).

    Training runs on PyTorch's CUDA or the CPU only: ONNX Runtime cannot train, and medseg's
    training has never been run on Apple MPS (refused rather than offered untried).
    """
    _check_purpose(purpose)
    return [row.name for row in BACKENDS if purpose in row.purposes and row.available()]


def resolve_device(requested: str, purpose: str = INFERENCE) -> str:
    """The one device choice: turn "auto" into a concrete device, check an explicit one exists.

    The GUI, the CLI, training and the device report all come here. Raises DeviceError (with
    what to choose instead) for a device that is unknown, absent, or not usable for ``purpose``.
    Training also takes "cuda:N" (one GPU of several).
    """
    _check_purpose(purpose)
    requested = (requested or "auto").strip().lower()
    if purpose == TRAINING:
        return _resolve_training(requested)
    if requested == "auto":
        return next(row.name for row in BACKENDS if row.automatic and INFERENCE in row.purposes and row.available())
    row = backend(requested)
    if not row.available():
        raise DeviceError(row.absent, hint=row.absent_hint)
    return requested


def _resolve_training(requested: str) -> str:
    if requested == "auto":
        return next(row.name for row in BACKENDS if row.automatic and TRAINING in row.purposes and row.available())
    name, _, index = requested.partition(":")
    if requested not in DEVICES and not (name == "cuda" and index):
        raise DeviceError(f"unknown device {requested!r}", hint="training runs on auto, cuda, cuda:N or cpu")
    row = backend(name)
    if TRAINING not in row.purposes:
        raise DeviceError(f"training runs on CUDA or the CPU, not {requested!r} ({requested} is for segmenting)",
                          hint="use --device auto, cuda or cpu")
    if not row.available():
        raise DeviceError(row.absent, hint=row.absent_hint)
    if index and not (index.isdigit() and int(index) < torch.cuda.device_count()):
        raise DeviceError(f"there is no CUDA GPU {index!r} (this machine has {torch.cuda.device_count()})",
                          hint="use --device cuda, or cuda:0 to cuda:" f"{torch.cuda.device_count() - 1}")
    return requested


def _check_purpose(purpose: str) -> None:
    if purpose not in (INFERENCE, TRAINING):
        raise ValueError(f"purpose is {INFERENCE!r} or {TRAINING!r}, not {purpose!r}")


def torch_device(device: str) -> torch.device:
    """The torch device a run on ``device`` (a name :func:`resolve_device` returned; "cuda:N" too) does its
    tensor work on (ONNX engines take and return host memory)."""
    name, _, index = device.partition(":")
    row = backend(name)
    return torch.device(row.tensor_device, int(index)) if index and row.tensor_device == "cuda" else torch.device(row.tensor_device)


def uses_onnx(device: str) -> bool:
    """The device runs the model's ONNX export (ONNX Runtime), not its PyTorch network."""
    return backend(device).exported


def cpu_devices() -> list[str]:
    """The CPU rows available here (the engines a measurement may choose between), PyTorch first."""
    return [row.name for row in BACKENDS if not row.gpu and INFERENCE in row.purposes and row.available()]


@dataclass(frozen=True)
class DeviceChoice:
    device: str  # what resolve_device and --device take
    label: str  # what a menu shows


def device_choices(purpose: str = INFERENCE) -> list[DeviceChoice]:
    """"auto" and then every device :func:`available_devices` finds, named for a menu."""
    automatic = resolve_device("auto", purpose)
    if purpose == INFERENCE and not backend(automatic).gpu and len(cpu_devices()) > 1:
        # medseg.model.cpu_runtime measures the engines per model; short, so a side panel shows it whole
        here = "CPU, fastest engine per model"
    else:
        here = describe(automatic)
    choices = [DeviceChoice("auto", f"Automatic ({here})")]
    return choices + [DeviceChoice(device, describe(device)) for device in available_devices(purpose)]


def describe(device: str) -> str:
    """A device in a few words: the GPU's name and memory, or the CPU and its engine."""
    if device == "cuda":
        props = torch.cuda.get_device_properties(0)
        more = torch.cuda.device_count() - 1
        return f"CUDA: {props.name}, {props.total_memory / 2**30:.0f} GB" + (f" (+{more} more)" if more > 0 else "")
    row = backend(device)
    return row.title if row.gpu else f"{row.title} ({row.engine})"


def is_out_of_memory(error: BaseException) -> bool:
    """True for a device out-of-memory error from PyTorch, ONNX Runtime or OpenVINO (which have no own type)."""
    if isinstance(error, torch.OutOfMemoryError):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and any(
        marker in text for marker in ("out of memory", "e_outofmemory", "failed to allocate", "bad_alloc")
    )


def free_device_memory(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.empty_cache()
    elif device.type == "mps":
        torch.mps.empty_cache()


def _onednn_conv_forward(conv: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return torch.ops.aten.mkldnn_convolution(x, conv.weight, conv.bias, conv.padding, conv.stride, conv.dilation, conv.groups)


def use_onednn_convolutions(network: nn.Module) -> int:
    """Route a CPU network's convolutions to oneDNN; returns how many were rerouted.

    PyTorch's CPU heuristics send many U-Net convolutions (few channels, 3D) to its slow
    im2col kernel; oneDNN computes the same convolution about twice as fast (measured in
    benchmarks/bench_infer.py). Results differ only by float rounding.
    """
    if not torch.backends.mkldnn.is_available():
        return 0
    rerouted = 0
    for module in network.modules():
        if type(module) in (nn.Conv2d, nn.Conv3d) and module.padding_mode == "zeros" and not isinstance(module.padding, str):
            module.forward = types.MethodType(_onednn_conv_forward, module)
            rerouted += 1
    return rerouted


def _module_forward(network: nn.Module, tiles: torch.Tensor) -> torch.Tensor:
    return network(tiles)


class TorchRunner:
    """PyTorch networks (the folds of one configuration) on one device.

    ``onednn=True`` reroutes CPU convolutions to oneDNN (see use_onednn_convolutions);
    ``lean=True`` runs medseg U-Nets on the CPU with medseg.model.lean_forward (same
    numbers, a third of the activation memory).
    """

    def __init__(
        self, networks: Sequence[nn.Module], device: str | torch.device, name: str | None = None, onednn: bool = False,
        lean: bool = False,
    ):
        if not networks:
            raise DeviceError("no network to run")
        self.device = torch.device(device)
        self.name = name or self.device.type
        self.networks = [network.to(self.device).eval() for network in networks]
        if onednn and self.device.type == "cpu":  # changes the modules: only for networks built for this run
            for network in self.networks:
                use_onednn_convolutions(network)
        self.lean = lean and self.device.type == "cpu"
        # fp16 autocast on CUDA only, as nnU-Net: CPU autocast is slow on most CPUs, MPS lacks it.
        self.autocast = self.device.type == "cuda"
        if self.autocast:
            torch.backends.cudnn.benchmark = True

    def __call__(self, tiles: torch.Tensor) -> torch.Tensor:
        context = torch.autocast("cuda") if self.autocast else contextlib.nullcontext()
        forward = lean_forward if self.lean else _module_forward  # lean falls back to the module for other networks
        with torch.inference_mode(), context:
            logits = forward(self.networks[0], tiles)
            for network in self.networks[1:]:
                logits += forward(network, tiles)
            if len(self.networks) > 1:
                logits /= len(self.networks)
        return logits


class OnnxRunner:
    """An exported model (folds already averaged inside it) in ONNX Runtime."""

    def __init__(self, model: bytes | str | Path, device: str, threads: int | None = None):
        import onnxruntime

        if device == "directml":
            providers = [DIRECTML_PROVIDER, "CPUExecutionProvider"]
        else:
            providers = ["CPUExecutionProvider"]
        options = onnxruntime.SessionOptions()
        # the job's share of the process's threads (ORT's pool is sized once, when the session is made)
        options.intra_op_num_threads = threads or medseg_threads.current()
        if device == "directml":
            # DirectML requires these (ONNX Runtime docs: no memory pattern, sequential execution).
            options.enable_mem_pattern = False
            options.execution_mode = onnxruntime.ExecutionMode.ORT_SEQUENTIAL
        source = model if isinstance(model, bytes) else os.fspath(model)
        try:
            self.session = onnxruntime.InferenceSession(source, options, providers=providers)
        except Exception as error:  # ORT raises its own exception types, not importable by name
            raise DeviceError(f"ONNX Runtime could not load the model on {device}: {error}") from error
        self.input_name = self.session.get_inputs()[0].name
        self.name = device
        self.device = torch.device("cpu")  # ORT takes and returns host memory

    def __call__(self, tiles: torch.Tensor) -> torch.Tensor:
        batch = np.ascontiguousarray(tiles.detach().cpu().numpy(), dtype=np.float32)
        try:
            (logits,) = self.session.run(None, {self.input_name: batch})[:1]
        except Exception as error:
            if "memory" in str(error).lower() or "alloc" in str(error).lower():
                raise RuntimeError(f"out of memory in ONNX Runtime: {error}") from error
            raise DeviceError(f"ONNX Runtime failed on {self.name}: {error}") from error
        return torch.from_numpy(logits)



class OpenVinoRunner:
    """An ONNX export compiled by OpenVINO for the CPU; logits back as a torch tensor. ``precision``: "f32",
    or "bf16" where the CPU computes it natively. ``cancel`` stops a running pass (OpenVINO's asynchronous
    request is cancelled).

    The network is compiled for the exact input shape it is given (``shape``, or the first call's; a new
    shape compiles again, replacing the old): on a dynamic batch axis OpenVINO cannot plan its activation
    memory ahead and allocated 5.4 GB for one 192^3 pass of nnInteractive's network where the static shape
    needs 3.6 GB, in the same time and with the same answer (measured 2026-12-07, 2 threads).
    """

    def __init__(self, onnx: str | Path, precision: str = "f32", threads: int | None = None, name: str | None = None,
                 shape: Sequence[int] | None = None):
        try:
            import openvino
        except ImportError as error:
            raise ModelError("OpenVINO is not installed (pip install 'medseg[openvino]')") from error
        self.onnx = Path(onnx)
        self.config = {"INFERENCE_PRECISION_HINT": precision, "PERFORMANCE_HINT": "LATENCY",
                       "INFERENCE_NUM_THREADS": int(threads or torch.get_num_threads())}
        self.core = openvino.Core()
        self.compiled = self.request = None
        self.shape: tuple[int, ...] | None = None
        self._unshaped = None  # read up front when no shape is given, reshaped by the first call

        self.name = name or ("openvino" if precision == "f32" else f"openvino-{precision}")
        self.device = torch.device("cpu")  # OpenVINO takes and returns host memory
        if shape is not None:
            self._compile(tuple(int(n) for n in shape))
        else:
            self._unshaped = self._read()  # a broken file fails here, not at the first pass

    def _read(self):
        try:
            return self.core.read_model(os.fspath(self.onnx))
        except RuntimeError as error:
            raise ModelError(f"OpenVINO could not read the network: {error}", path=self.onnx) from error

    def _compile(self, shape: tuple[int, ...]) -> None:
        self.compiled = self.request = None  # the old shape's buffers go before the new ones are planned
        model = self._unshaped if self._unshaped is not None else self._read()
        self._unshaped = None
        try:
            model.reshape({model.inputs[0]: list(shape)})
            self.compiled = self.core.compile_model(model, "CPU", self.config)
        except RuntimeError as error:
            raise ModelError(f"OpenVINO could not compile the network for input {list(shape)}: {error}",
                             path=self.onnx) from error
        self.request = self.compiled.create_infer_request()
        self.shape = shape

    def __call__(self, tiles: torch.Tensor, cancel: CancelToken | None = None) -> torch.Tensor:
        if tuple(tiles.shape) != self.shape:
            self._compile(tuple(tiles.shape))
        self.request.start_async({0: np.ascontiguousarray(tiles.detach().cpu().numpy(), dtype=np.float32)})
        while not self.request.wait_for(100):  # milliseconds
            if cancel is not None and cancel.cancelled:
                self.request.cancel()
                raise Cancelled()
        return torch.from_numpy(self.request.get_output_tensor(0).data.copy())
