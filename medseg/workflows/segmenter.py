"""One model loaded once for many studies, from Python (a notebook, a script): :func:`open_segmenter`.

TotalSegmentator's users asked for it (its issues #523, #581, draft PR #580): its Python call loads
the networks again for every scan. Here the model is opened once, and what its first study loads and
builds (each network's weights, the PyTorch modules, an ONNX session or an OpenVINO compilation, and
for TotalSegmentator's ``total`` every part's network) stays for the next study, as ``medseg batch``
keeps it (:class:`medseg.workflows.segment.Segmenter` with ``keep_loaded``). Each study goes through
the same checks, device, configuration choice and writers as ``medseg segment``::

    from medseg.workflows.segmenter import open_segmenter

    with open_segmenter("totalsegmentator/total", fast=True) as segment:
        for path in ["ct1.nii.gz", "ct2_dicom_folder"]:
            result = segment(path, output=path + ".seg.nii.gz")   # or without output: only the result
            print(result.volumes_ml)

Leaving the ``with`` block lets go of what was kept (the memory of every network the model ran).
docs/developer-guide.md has the runnable example a test runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Sequence

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model.kinds import SegmentSettings
from medseg.progress import CancelToken, ProgressCallback
from medseg.workflows.models import OpenedModel, open_model
from medseg.workflows.segment import SegmentedStudy, Segmenter
from medseg.workflows.studies import OpenStudyRequest

Source = Volume | OpenStudyRequest | str | os.PathLike | Sequence[str | os.PathLike]


class LoadedSegmenter:
    """A model kept loaded: call it with a study (a path, a DICOM folder, a list of files, or a Volume)."""

    def __init__(self, model: OpenedModel, settings: SegmentSettings) -> None:
        from medseg.workflows.batch_case import BatchCase

        self.segmenter = Segmenter(model, settings, keep_loaded=True)
        self._case = BatchCase(self.segmenter)

    @property
    def card(self) -> Any:
        """The model's card: name, version, labels, configurations."""
        return self.segmenter.card

    def __call__(self, study: Source, output: str | os.PathLike | None = None,
                 progress: ProgressCallback | None = None, cancel: CancelToken | None = None) -> SegmentedStudy:
        """Segment one study; ``output``: also write the result there (its format by its name: .nii.gz, .nrrd, a
        DICOM SEG .dcm, ...; replaced if it exists). Every refusal is a MedsegError naming the study."""
        if output is None:
            image = study if isinstance(study, Volume) else self.segmenter.open(study, cancel=cancel)
            return self.segmenter.segment(image, progress, cancel)
        target = Path(output)
        if isinstance(study, Volume):
            prepared = self.segmenter.prepare(study, cancel=cancel)
        else:
            prepared = self._case.read(study, target, cancel=cancel)
        return self._case.finish(prepared, target, progress=progress, cancel=cancel).segmented

    def close(self) -> None:
        """Let go of the networks kept loaded."""
        self.segmenter.close()

    def __enter__(self) -> "LoadedSegmenter":
        return self

    def __exit__(self, *_exc: Any) -> None:
        self.close()


def open_segmenter(model: OpenedModel | str | os.PathLike | None = None, *, fast: bool = False,
                   fastest: bool = False, configuration: str | None = None, device: str = "auto",
                   structures: Sequence[str] | None = None, step: float = 0.5, mirror: bool = False,
                   postprocess: bool = True, allow_modality: bool = False) -> LoadedSegmenter:
    """Open ``model`` (a catalogue id such as ``"totalsegmentator/total"``, a folder or package path, an opened
    model, or None for the built-in starter) once, for many studies. ``fast``/``fastest``: the publisher's speed
    flags (TotalSegmentator's --fast is its 3 mm configuration); ``configuration`` names one; ``structures``:
    only these (a TotalSegmentator model crops its run to them). The rest as ``medseg segment``'s options."""
    opened = model if isinstance(model, OpenedModel) else open_model(model)
    if fast or fastest:
        flag = "fastest" if fastest else "fast"
        flags = opened.pipeline.speed_flags()
        if flag not in flags:
            raise ModelError(f"{opened.card.name} has no {flag} configuration installed",
                             path=opened.card.source,
                             hint=f"its configurations: {', '.join(opened.pipeline.configuration_names())}")
        if configuration is not None and configuration != flags[flag]:
            raise ModelError(f"{flag}=True is configuration {flags[flag]}, not {configuration}: give one of them")
        configuration = flags[flag]
    settings = SegmentSettings(device=device, configuration=configuration, step=step, mirror=mirror,
                               postprocess=postprocess, allow_modality=allow_modality,
                               structures=tuple(structures) if structures is not None else None)
    return LoadedSegmenter(opened, settings)


__all__ = ["LoadedSegmenter", "open_segmenter"]
