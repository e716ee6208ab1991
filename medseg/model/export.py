"""Export networks for other runtimes.

ONNX (for ONNX Runtime: DirectML on AMD/Intel/NVIDIA GPUs under Windows, and the CPU):
opset 17, the highest DirectML supports; the tile shape is fixed to the plan's patch,
the batch (tiles per pass) is dynamic. The legacy TorchScript-based exporter is used
because it writes one self-contained file and needs no onnxscript at run time.

TorchScript (for LibTorch deployments): a traced module, same tile contract. Every export
can be verified by :func:`measure_parity`: the exported runtime and torch segment the same
CT and must agree on >= 99.99 % of voxels (``export_model`` refuses to write otherwise).

This module knows no table of formats: :mod:`medseg.model.export_formats` names its exporters and readers
in its rows, and holds ``export_model`` and ``check_parity``, which take a format by name.
"""

from __future__ import annotations

import copy
import io
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO, Sequence

import torch
from torch import nn

from medseg.errors import ModelError
from medseg.io.atomic import atomic_write_bytes
from medseg.model.onnx_graph import (  # noqa: F401 - re-exported: export's public API
    ONNX_INPUT,
    ONNX_OPSET,
    ONNX_OUTPUT,
    FoldEnsemble,
    add_onnx_to_package,
    export_onnx,
    package_onnx,
)
from medseg.progress import ProgressCallback, report

# --- TorchScript, packages, and the parity check (training/export engine) ---------------------------

PARITY_REQUIRED = 0.9999  # exported runtimes must give the same label on >= 99.99 % of voxels


def export_torchscript(network: nn.Module | Sequence[nn.Module], plan: Any, path: str | Path | BinaryIO) -> str | Path | BinaryIO:
    """Write ``network`` (or the mean of several folds) as a traced TorchScript module for LibTorch.

    Traced at the plan's patch with a batch of 1; the traced graph holds no fixed batch
    size, so any number of tiles per pass works (the parity check runs several).
    """
    model = network if isinstance(network, nn.Module) else FoldEnsemble(list(network))
    model = copy.deepcopy(model).to("cpu").float().eval()
    if hasattr(model, "deep_supervision"):
        model.deep_supervision = False  # one logits tensor out, as inference wants
    channels = int(getattr(plan, "num_input_channels", 1) or 1)
    example = torch.zeros(1, channels, *[int(p) for p in plan.patch_size])
    target = os.fspath(path) if isinstance(path, (str, Path)) else path
    try:
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # tracer notes about python values in the graph
            traced = torch.jit.trace(model, example, check_trace=False)
            torch.jit.save(traced, target)
    except Exception as error:  # the tracer raises many types; the user needs one message
        raise ModelError(f"the network could not be exported to TorchScript: {error}",
                         path=path if isinstance(path, (str, Path)) else None) from error
    return path


def load_torchscript(path: str | Path | BinaryIO, device: str | torch.device = "cpu") -> torch.jit.ScriptModule:
    """A TorchScript export, loaded for inference (TorchScript archives hold code and tensors, no pickle)."""
    try:
        module = torch.jit.load(path if not isinstance(path, Path) else os.fspath(path), map_location=device)
    except Exception as error:  # corrupt or foreign file
        raise ModelError(f"cannot load TorchScript model: {error}", path=path if isinstance(path, (str, Path)) else None) from error
    return module.eval()


@dataclass
class ParityReport:
    """How closely an exported runtime reproduces the torch labels on one CT."""

    runtime: str  # "onnxruntime-cpu" or "torchscript"
    voxels: int
    differing: int
    max_abs_logit_difference: float
    image: str  # what was segmented (never a patient name)

    @property
    def agreement(self) -> float:
        return 1.0 - self.differing / max(self.voxels, 1)

    @property
    def passed(self) -> bool:
        return self.agreement >= PARITY_REQUIRED

    def __str__(self) -> str:
        verdict = "PASS" if self.passed else "FAIL"
        return (f"parity {self.runtime} vs torch on {self.image}: {100 * self.agreement:.4f} % of "
                f"{self.voxels} voxels agree ({self.differing} differ), max |logit difference| "
                f"{self.max_abs_logit_difference:.2e} - {verdict} (needs >= {100 * PARITY_REQUIRED:.2f} %)")


def measure_parity(
    package: Any, configuration: str, volume: Any, parity_runner: Any, exported: bytes | str | Path | None = None,
    image_name: str = "image", step_size: float = 0.5,
) -> ParityReport:
    """Segment ``volume`` with torch and with an exported runtime; count voxels whose label differs.

    ``parity_runner`` is an export format's reader (``(package, configuration, exported) -> (tile runner,
    its name)``, a row of :mod:`medseg.model.export_formats`, which callers name: ``check_parity`` there).
    ``exported`` is the exported model (bytes or a path); by default it is exported from the package here.
    """
    import numpy as np

    from medseg.model import backends
    from medseg.model.logits_grid import logits_to_label_map
    from medseg.model.package import build_networks
    from medseg.model.preprocess import preprocess
    from medseg.model.sliding_window import sliding_window_logits

    plan = package.configurations[configuration]
    prep = preprocess(volume, plan)
    image = torch.from_numpy(prep.data)
    torch_runner = backends.TorchRunner(build_networks(package, configuration, "cpu"), "cpu")
    other, name = parity_runner(package, configuration, exported)
    reference_logits = sliding_window_logits(torch_runner, image, plan, step_size=step_size)
    other_logits = sliding_window_logits(other, image, plan, step_size=step_size)
    reference = logits_to_label_map(reference_logits, prep)
    labels = logits_to_label_map(other_logits, prep)
    difference = float((reference_logits.float() - other_logits.float()).abs().max())
    return ParityReport(name, int(reference.size), int(np.count_nonzero(reference != labels)), difference, image_name)


def onnx_parity_runner(package: Any, configuration: str, exported: bytes | str | Path | None) -> tuple[Any, str]:
    """The ONNX row's reader: ONNX Runtime (CPU provider) on the exported model (default: exported here)."""
    from medseg.model import backends

    model = exported if exported is not None else package_onnx(package, configuration)
    return backends.OnnxRunner(os.fspath(model) if isinstance(model, Path) else model, "onnx-cpu"), "onnxruntime-cpu"


def torchscript_parity_runner(package: Any, configuration: str, exported: Any) -> tuple[Any, str]:
    """The TorchScript row's reader: the traced module (default: traced here)."""
    from medseg.model import backends
    from medseg.model.package import build_networks

    if exported is None:
        buffer = io.BytesIO()
        export_torchscript(build_networks(package, configuration, "cpu"), package.configurations[configuration],
                           buffer)
        buffer.seek(0)
        exported = buffer
    elif isinstance(exported, bytes):
        exported = io.BytesIO(exported)
    return backends.TorchRunner([load_torchscript(exported)], "cpu", name="torchscript"), "torchscript"


def export_onnx_package(fmt: Any, package: Any, names: list[str], out: Path, check_volume: Any | None,
                        check_name: str, progress: ProgressCallback | None, onnx: Any) -> list[ParityReport]:
    """The package row's export: every configuration's ONNX model (checked by ``onnx``, the ONNX row's reader)
    inside the saved package."""
    from medseg.model.package import save_package

    reports: list[ParityReport] = []
    for index, name in enumerate(names):
        report(progress, index / len(names), f"Exporting {name} to {onnx.title} ({index + 1} of {len(names)})",
               "export")
        add_onnx_to_package(package, name)
        if check_volume is not None:
            report(progress, (index + 0.5) / len(names), f"Checking {name}'s ONNX model against PyTorch", "parity")
            reports.append(measure_parity(package, name, check_volume, onnx.parity_runner, package.onnx[name],
                                          check_name))
    _require_parity(reports, out)
    report(progress, 1.0, "Writing the package", "write")
    if reports:  # the package says how its ONNX model was verified
        package.provenance["export_parity"] = [str(report) for report in reports]
    save_package(package, out)
    return reports


def export_network_file(fmt: Any, package: Any, names: list[str], out: Path, check_volume: Any | None,
                        check_name: str, progress: ProgressCallback | None) -> list[ParityReport]:
    """A one-file row's export (ONNX, TorchScript): the first configuration written by the row's writer,
    read back by its runtime for the parity check, then written atomically."""
    from medseg.model.package import build_networks

    name = names[0]
    networks = build_networks(package, name, "cpu")
    buffer = io.BytesIO()
    report(progress, 0.0, f"Exporting {name} to {fmt.title}", "export")
    fmt.write(networks, package.configurations[name], buffer)
    data = buffer.getvalue()
    reports: list[ParityReport] = []
    if check_volume is not None:
        report(progress, 0.5, "Checking the exported model against PyTorch", "parity")
        reports.append(measure_parity(package, name, check_volume, fmt.parity_runner, data, check_name))
    _require_parity(reports, out)
    report(progress, 1.0, "Writing the file", "write")
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(out, data)
    if fmt.sidecar is not None:  # after the file: a file without its sidecar is refused in words, never misread
        atomic_write_bytes(*fmt.sidecar(package, name, out))
    return reports


def _require_parity(reports: Sequence[ParityReport], out: Path) -> None:
    failed = [r for r in reports if not r.passed]
    if failed:
        raise ModelError(f"the export failed its parity check: {failed[0]}", path=out)
