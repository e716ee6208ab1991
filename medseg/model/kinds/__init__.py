"""Model kinds as plug-ins: one protocol (:mod:`.base`), one table (:data:`KINDS`).

Each kind is one module here and one line in :data:`KINDS`: it recognises its folders and opens
them into an :class:`~medseg.model.kinds.base.OpenedModel`, whose pipeline runs, plans and
describes it. Everything above ``model/`` (workflows, the catalogue, CLI, batch, GUI) asks the
table and the pipeline, never which kind it holds (tests/test_model_kinds.py greps for such checks).
Adding a kind: write ``medseg/model/kinds/<name>_kind.py`` with a ModelKind and its ModelPipeline,
then add it to KINDS (or call :func:`register` from a plug-in); docs/developer-guide.md has the recipe.
"""

from __future__ import annotations

import os
from pathlib import Path

from medseg.errors import ModelError
from medseg.model.kinds.base import (
    Capabilities,
    ModelCard,
    ModelKind,
    ModelPipeline,
    OpenedModel,
    PipelineOutput,
    PlanReport,
    SegmentSettings,
    SharedRuns,
)
from medseg.model.kinds.interactive_kind import InteractiveKind
from medseg.model.kinds.onnx_kind import OnnxModelKind
from medseg.model.kinds.package_kind import MedsegPackageKind, NnUNetResultKind
from medseg.model.kinds.totalseg_kind import TotalSegKind

# Asked in this order: the most specific files first (an nnInteractive folder also has an nnU-Net plans.json; the
# medseg package kind takes any file, for its reader to say what is wrong with it, so an .onnx file is asked before).
KINDS: list[ModelKind] = [TotalSegKind(), InteractiveKind(), NnUNetResultKind(), OnnxModelKind(), MedsegPackageKind()]


def register(kind: ModelKind, first: bool = True) -> None:
    """Add a kind (a plug-in's); asked before the built-in ones unless ``first`` is False."""
    if any(known.id == kind.id for known in KINDS):
        raise ValueError(f"a model kind {kind.id!r} is registered already")
    KINDS.insert(0, kind) if first else KINDS.append(kind)


def kind_ids() -> tuple[str, ...]:
    return tuple(kind.id for kind in KINDS)


def kind_named(kind_id: str) -> ModelKind:
    for kind in KINDS:
        if kind.id == kind_id:
            return kind
    raise ModelError(f"no model kind {kind_id!r} (known: {', '.join(kind_ids())})")


def kind_of(path: str | Path) -> ModelKind | None:
    """The kind whose files ``path`` holds, or None."""
    path = Path(path)
    return next((kind for kind in KINDS if kind.recognises(path)), None)


def open_path(path: str | os.PathLike[str], reference: str | os.PathLike[str] | None = None) -> OpenedModel:
    """Open the model at ``path`` with the kind that recognises it; a folder of no known kind is refused
    in words that name what medseg looks for."""
    path = Path(path)
    kind = kind_of(path)
    if kind is None:
        raise ModelError("this folder is not a model medseg can run: no model.json (a medseg package), no plans.json "
                         "with dataset.json (an nnU-Net v2 result folder), no .onnx file with its .onnx.json (an "
                         "exported ONNX model)", path=path,
                         hint="TotalSegmentator's or nnInteractive's weights folder: `medseg models import FOLDER` "
                              "(Segmentation ▸ Models… ▸ Import), then choose the model by its id")
    return kind.open(path, reference if reference is None or isinstance(reference, str) else Path(reference))


__all__ = ["KINDS", "Capabilities", "ModelCard", "ModelKind", "ModelPipeline", "OpenedModel", "PipelineOutput",
           "PlanReport", "SegmentSettings", "SharedRuns", "kind_ids", "kind_named", "kind_of", "open_path", "register"]
