"""The one table of model-export formats: ``export --format``, the Export panel's list and the export itself.

A row maps a format to what exports it and, for one network file, the runtime that reads the file back
for the parity check. Adding a format is one row here (and its writer). This module imports no PyTorch
(the command line builds its parser and the GUI its list from it at start-up): the functions below
import the export code when called.

The layers: the exporters and readers (:mod:`medseg.model.export`, :mod:`medseg.model.onnx_graph`) know no
table; this table names them, and the entry points that take a format by name (``export_model``,
``check_parity``) live here, above both.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from medseg.errors import ModelError
from medseg.model.onnx_model import ONNX_SUFFIX, onnx_sidecar

if TYPE_CHECKING:
    from medseg.model.export import ParityReport
    from medseg.progress import ProgressCallback

ExportStep = Callable[..., "list[ParityReport]"]


def _export_network_file(fmt: ExportFormat, package: Any, names: list[str], out: Path, check_volume: Any,
                         check_name: str, progress: Any) -> list[ParityReport]:
    from medseg.model.export import export_network_file

    return export_network_file(fmt, package, names, out, check_volume, check_name, progress)


def _export_package(fmt: ExportFormat, package: Any, names: list[str], out: Path, check_volume: Any,
                    check_name: str, progress: Any) -> list[ParityReport]:
    from medseg.model.export import export_onnx_package

    return export_onnx_package(fmt, package, names, out, check_volume, check_name, progress, BY_KEY["onnx"])


def _write_onnx(networks: Any, plan: Any, target: Any) -> Any:
    from medseg.model.onnx_graph import export_onnx

    return export_onnx(networks, plan, target)


def _write_torchscript(networks: Any, plan: Any, target: Any) -> Any:
    from medseg.model.export import export_torchscript

    return export_torchscript(networks, plan, target)


def _onnx_runner(package: Any, configuration: str, exported: Any) -> tuple[Any, str]:
    from medseg.model.export import onnx_parity_runner

    return onnx_parity_runner(package, configuration, exported)


def _torchscript_runner(package: Any, configuration: str, exported: Any) -> tuple[Any, str]:
    from medseg.model.export import torchscript_parity_runner

    return torchscript_parity_runner(package, configuration, exported)


@dataclass(frozen=True)
class ExportFormat:
    key: str  # ``export --format``
    title: str  # what the Export panel lists, and progress says ("Exporting 3d_fullres to ONNX")
    suffix: str  # of the file written ("" : a package folder, or a .zip)
    export: ExportStep  # (format, package, configuration names, out, check volume, its name, progress) -> reports
    # (networks, plan, file or buffer): writes one network file; None for a whole package
    write: Callable[[Any, Any, Any], Any] | None = None
    # (package, configuration, exported model or None) -> (tile runner, its name): reads the export back
    parity_runner: Callable[[Any, str, Any], tuple[Any, str]] | None = None
    runtime_name: str = ""  # the parity report's runtime ("onnxruntime-cpu")
    dialog_title: str = ""  # the Export panel's entry (default: title)
    one_model: bool = True  # exports one model (several are combined only into a package)
    # (package, configuration, the file written) -> (path, bytes) of the sidecar written beside it: what the file
    # alone does not say for it to be opened as a model (an ONNX model: medseg.model.onnx_model)
    sidecar: Callable[[Any, str, Path], tuple[Path, bytes]] | None = None

    @property
    def listed_as(self) -> str:
        return self.dialog_title or self.title


EXPORT_TABLE: tuple[ExportFormat, ...] = (
    ExportFormat("onnx", "ONNX", ONNX_SUFFIX, _export_network_file, _write_onnx, _onnx_runner, "onnxruntime-cpu",
                 dialog_title="ONNX (opset 17, DirectML)", sidecar=onnx_sidecar),
    ExportFormat("torchscript", "TorchScript", ".pt", _export_network_file, _write_torchscript, _torchscript_runner,
                 "torchscript"),
    ExportFormat("package", "medseg package", "", _export_package, one_model=False),
)
EXPORT_FORMATS = tuple(f.key for f in EXPORT_TABLE)  # ``export --format``'s choices
BY_KEY = {f.key: f for f in EXPORT_TABLE}


def export_format(key: str) -> ExportFormat:
    """The row of ``key``; an unknown format is refused naming the known ones."""
    if key not in BY_KEY:
        raise ModelError(f"unknown export format {key!r} (use {', '.join(EXPORT_FORMATS)})")
    return BY_KEY[key]


def parity_format(runtime: str) -> ExportFormat:
    """The row whose runtime reads an export back for the parity check ("onnx", "torchscript")."""
    found = BY_KEY.get(runtime)
    if found is None or found.parity_runner is None:
        known = " or ".join(f.key for f in EXPORT_TABLE if f.parity_runner is not None)
        raise ModelError(f"unknown runtime {runtime!r} (use {known})")
    return found


# --- exporting and checking by a format's name (the command line, the Export panel) -------------------------
@dataclass
class ExportResult:
    path: Path
    format: str
    parity: list[ParityReport]


def export_model(
    package: Any, fmt: str, out: str | os.PathLike[str], check_volume: Any | None = None, check_name: str = "image",
    configuration: str | None = None, progress: ProgressCallback | None = None,
) -> ExportResult:
    """Export a package in a format of this table, then verify it on ``check_volume``.

    ONNX and TorchScript write one file for one configuration (``configuration`` or the
    package's first); "package" writes the safetensors package with every configuration's
    ONNX model inside (so the DirectML path needs no export on the user's machine).
    A failed parity check raises ModelError and leaves no output behind. ``progress`` hears each
    stage (an ONNX export of a large network takes half a minute with no finer steps to count).
    """
    row = export_format(fmt)
    out = Path(out)
    names = [configuration] if configuration else list(package.configurations)
    if configuration is not None and configuration not in package.configurations:
        raise ModelError(f"model {package.name!r} has no configuration {configuration!r}")
    reports = row.export(row, package, names, out, check_volume, check_name, progress)
    return ExportResult(out, fmt, reports)


def check_parity(
    package: Any, configuration: str, volume: Any, runtime: str, exported: bytes | str | Path | None = None,
    image_name: str = "image", step_size: float = 0.5,
) -> ParityReport:
    """Segment ``volume`` with torch and with the exported runtime; count voxels whose label differs.

    ``runtime`` is an export format whose row reads its file back ("onnx", ONNX Runtime's CPU provider, or
    "torchscript"). ``exported`` is the exported model (bytes or a path); by default it is exported from the
    package here.
    """
    from medseg.model.export import measure_parity

    runner = parity_format(runtime).parity_runner
    return measure_parity(package, configuration, volume, runner, exported, image_name, step_size)
