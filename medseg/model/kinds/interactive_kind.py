"""An interactive model (nnInteractive, or medseg's converted copy of it): prompts in, an object out.

It does not segment a series on its own: its pipeline says so in words when asked to, and the
Interactive AI tool (:mod:`medseg.workflows.interactive`) runs it. Opening it reads only its small
manifest; the 103 M weights load when the tool first needs them.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from medseg.core.volume import Volume
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
from medseg.progress import CancelToken, ProgressCallback

INTERACTIVE_MODEL = "interactive model"
_MANIFEST = "interactive.json"  # medseg.model.interactive.model_files.MODEL_JSON (not imported: it imports torch)


class InteractivePipeline(ModelPipeline):
    capabilities = Capabilities(segments=False, interactive=True, one_package=False)

    def configuration_names(self) -> dict[str, str]:
        return {"interactive": "prompts"}

    def _refuse(self) -> ModelError:
        return ModelError(f"{self.card.name} is an interactive model: it answers prompts, it does not segment a "
                          "series on its own", path=self.card.source,
                          hint="use it with the Interactive AI tool (or medseg edit --prompt)")

    def prepare(self, image: Volume, settings: SegmentSettings, device: str,
                progress: ProgressCallback | None, cancel: CancelToken | None) -> Any:
        raise self._refuse()

    def run(self, image: Volume, prepared: Any, settings: SegmentSettings, device: str,
            progress: ProgressCallback | None, cancel: CancelToken | None,
            shared: SharedRuns | None = None) -> PipelineOutput:
        raise self._refuse()

    def plan(self, volume: Volume, device: str = "auto", configuration: str | None = None,
             structures: tuple[str, ...] | None = None) -> PlanReport:
        return PlanReport(title="interactive", why="it segments the object your prompts point at",
                          lines=["use the Interactive AI tool (Edit panel)"])


class InteractiveKind(ModelKind):
    id, title = "nninteractive", INTERACTIVE_MODEL
    capabilities = InteractivePipeline.capabilities

    def recognises(self, path: Path) -> bool:
        if not path.is_dir():
            return False
        if (path / _MANIFEST).is_file():
            return True
        return (path / "plans.json").is_file() and any(
            (path / name).is_file() for name in ("inference_info.json", "inference_session_class.json"))

    def open(self, path: Path, reference: str | Path | None) -> OpenedModel:
        name, licence = path.name, ""
        if (path / _MANIFEST).is_file():
            try:
                manifest = json.loads((path / _MANIFEST).read_text(encoding="utf-8"))
            except (OSError, UnicodeDecodeError, ValueError) as error:
                raise ModelError(f"{_MANIFEST} cannot be read: {error}", path=path / _MANIFEST) from error
            if isinstance(manifest, dict):
                name, licence = str(manifest.get("name") or name), str(manifest.get("license") or "")
        card = ModelCard(id=str(reference) if reference is not None else name, name=name, version="", modality=None,
                         licence=licence, kind=self.title, source=path, configurations={"interactive": "prompts"},
                         labels={})
        return OpenedModel(card, InteractivePipeline(card))


__all__ = ["INTERACTIVE_MODEL", "InteractiveKind", "InteractivePipeline"]
