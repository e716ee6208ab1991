"""Export a model for another runtime (ONNX, TorchScript) or as a medseg package, verified before it is written.

``medseg export`` and the Train tab's Export panel call :func:`export_models`: the formats are the
one table's (:mod:`medseg.model.export_formats`); the exported model and torch segment the same CT
(a real series, a training case, or the synthetic phantom) and must agree on >= 99.99 % of voxels.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Any, Sequence

from medseg.errors import MedsegError
from medseg.model.export_formats import EXPORT_FORMATS, EXPORT_TABLE, export_format
from medseg.progress import ProgressCallback

PHANTOM_NAME = "the synthetic demo phantom"


@dataclass(frozen=True)
class ExportRequest:
    models: Sequence[str | os.PathLike | None]  # references (open_model's); several: combined into one package
    format: str  # a key of EXPORT_FORMATS
    output: str | os.PathLike
    configuration: str | None = None  # default: the first ('package' exports all)
    check: bool = True  # False: no parity check
    check_image: str | os.PathLike | None = None  # the CT to check on (default: check_volume, else the phantom)
    check_volume: Any = None  # an image already open (the GUI's training case)
    check_name: str = ""


@dataclass
class _Prepared:
    package: Any
    volume: Any = None
    name: str = ""


@dataclass
class ExportOutcome:
    result: Any  # medseg.model.export_formats.ExportResult: path, format, parity
    checked: bool = True
    notes: list[str] = field(default_factory=list)


def _prepare(request: ExportRequest) -> _Prepared:
    from medseg.workflows.models import open_model

    if not str(request.output).strip():  # Path("") is the working folder: the write failed as "Device or resource busy"
        raise MedsegError("no output given (-o is empty)",
                          hint="name the file (.onnx/.pt) or the package folder/.zip to write")
    if len(request.models) > 1 and export_format(request.format).one_model:
        combined = " or ".join(f"--format {f}" for f in EXPORT_FORMATS if not export_format(f).one_model)
        raise MedsegError(f"--format {request.format} exports one model; several are combined only with {combined}")
    packages = [open_model(reference).package for reference in request.models]
    if len(packages) > 1:
        from medseg.model.package_model import combine_packages

        package = combine_packages(packages)
    else:
        package = packages[0]
    if not request.check:
        return _Prepared(package)
    if request.check_volume is not None:
        return _Prepared(package, request.check_volume, request.check_name)
    if request.check_image:
        from medseg.workflows.studies import OpenStudyRequest, open_study

        return _Prepared(package, open_study(OpenStudyRequest(request.check_image)).volume,
                                    str(request.check_image))
    from medseg.io.phantom import phantom_volume

    return _Prepared(package, phantom_volume(shape=(48, 160, 160), spacing=(2.0, 2.0, 4.0)), PHANTOM_NAME)


def export_models(request: ExportRequest, progress: ProgressCallback | None = None) -> ExportOutcome:
    """Open (and combine) the models, export, verify; the ExportResult says where and the parity."""
    from medseg.model.export_formats import export_model

    prepared = _prepare(request)
    result = export_model(prepared.package, request.format, request.output, prepared.volume, prepared.name,
                          request.configuration, progress=progress)
    return ExportOutcome(result, checked=request.check)


__all__ = ["EXPORT_FORMATS", "EXPORT_TABLE", "ExportRequest", "ExportOutcome", "export_models", "PHANTOM_NAME"]
