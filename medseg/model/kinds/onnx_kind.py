"""An exported ONNX model (``medseg export --format onnx``): the network file and its JSON sidecar
(:mod:`medseg.model.onnx_model`), run through ONNX Runtime.

It opens as the ``.onnx`` file, or as a folder holding one ``.onnx`` file with its sidecar (what a folder
picker can choose). Around the network everything is medseg's engine, as for the package it was exported from:
the sidecar's plan resamples and normalises the series, the sliding window runs the file's tiles, the labels
go back to the series' grid and the package's post-processing runs. ONNX Runtime runs it on DirectML where
that provider is installed, else on its CPU provider: there are no PyTorch weights, so a PyTorch device (CUDA,
MPS, the CPU's PyTorch engine) cannot run it, and the result says which provider did.
"""

from __future__ import annotations

import hashlib
from dataclasses import replace
from pathlib import Path
from typing import Any

from medseg.model.kinds.base import Capabilities, ModelKind, ModelPipeline, OpenedModel, PlanReport, SegmentSettings
from medseg.model.kinds.package_kind import PackagePipeline, package_card

ONNX_MODEL = "exported ONNX model"
_ONNX_DEVICES = ("directml", "onnx-cpu")  # the ONNX Runtime rows of medseg.model.backends.BACKENDS


def _onnx_file(path: Path) -> Path | None:
    """The ``.onnx`` file ``path`` names: itself, or the one in a folder that has its sidecar beside it."""
    from medseg.model.onnx_model import ONNX_SUFFIX, sidecar_path

    if path.is_file():
        return path if path.suffix.lower() == ONNX_SUFFIX else None
    if path.is_dir() and not (path / "model.json").is_file():  # a medseg package keeps its ONNX files inside
        found = [p for p in path.glob(f"*{ONNX_SUFFIX}") if sidecar_path(p).is_file()]
        return found[0] if len(found) == 1 else None
    return None


class OnnxPipeline(PackagePipeline):
    """The exported network in ONNX Runtime, with the engine's steps around it (PackagePipeline's)."""

    def __init__(self, card: Any, package: Any, onnx_path: Path) -> None:
        super().__init__(card, package, rewritable=False)
        self.capabilities = Capabilities()  # no precision tiers: those are verified against PyTorch weights
        self.onnx_path = onnx_path

    def engine_packages(self) -> list[tuple[Any, str]]:
        return []  # one engine, ONNX Runtime: nothing to choose by measurement

    def identity(self) -> str:
        from medseg.model.onnx_model import sidecar_path

        digest = hashlib.sha256()
        for path in (self.onnx_path, sidecar_path(self.onnx_path)):
            digest.update(path.read_bytes())
        return f"{self.card.name}@{digest.hexdigest()[:16]}"

    def check_settings(self, settings: SegmentSettings, device: str, fallbacks: list[str]) -> str:
        device = ModelPipeline.check_settings(self, settings, device, fallbacks)
        return onnx_device(device, settings.device, fallbacks)

    def plan(self, volume: Any, device: str = "auto", configuration: str | None = None,
             structures: tuple[str, ...] | None = None, step_size: float = 0.5) -> PlanReport:
        from medseg.model import backends

        report = super().plan(volume, "cpu", configuration, structures, step_size)
        resolved = onnx_device(backends.resolve_device(device), device, [])
        report.footer = [line for line in report.footer if not line.startswith(("runs on:", "engine:", "precision"))]
        report.footer.append(f"runs on: {backends.describe(resolved)}, the network {self.onnx_path.name}")
        return report


def onnx_device(resolved: str, requested: str, fallbacks: list[str]) -> str:
    """The ONNX Runtime device for a run asked for ``requested`` (resolved by the device choice to ``resolved``):
    DirectML or the CPU provider; a PyTorch device asked for by name is said in ``fallbacks``."""
    from medseg.model import backends

    if resolved in _ONNX_DEVICES:
        return resolved
    if backends.directml_available():
        return "directml"
    if (requested or "auto").strip().lower() not in ("auto", "cpu"):
        fallbacks.append(f"an exported ONNX model runs in ONNX Runtime, not on {resolved}: its CPU provider ran it")
    return "onnx-cpu"


class OnnxModelKind(ModelKind):
    id, title = "onnx", ONNX_MODEL

    def recognises(self, path: Path) -> bool:
        return _onnx_file(path) is not None

    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        from medseg.model.onnx_model import read_onnx_model

        onnx_path = _onnx_file(path) or path
        package = read_onnx_model(onnx_path)
        card = package_card(package, reference, self.title)
        # the file holds one network, its folds averaged inside it: the package's fold count (no weights) says 0
        card = replace(card, configurations={name: summary.replace(", 0 fold(s), ONNX", ", one ONNX network")
                                             for name, summary in card.configurations.items()})
        return OpenedModel(card, OnnxPipeline(card, package, onnx_path))


__all__ = ["ONNX_MODEL", "OnnxModelKind", "OnnxPipeline", "onnx_device"]
