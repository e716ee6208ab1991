"""Open a study: an image file or a DICOM series, with what the reader found about it.

The one door for a command or a worker that needs an image (the GUI's progressive series
loading stays in :mod:`medseg.io`, which this calls). The spacing is checked as the I/O layer
checks it, or set by the user (``spacing_mm``), which a finding records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Sequence

from medseg.core.volume import GeometryFinding, Volume
from medseg.progress import CancelToken, ProgressCallback



@dataclass(frozen=True)
class OpenStudyRequest:
    source: str | os.PathLike | Sequence[str | os.PathLike]  # image file, DICOM folder/zip/DICOMDIR, or files
    series_uid: str | None = None  # which series (default: the largest volume)
    spacing_mm: tuple[float, float, float] | None = None  # the true (x, y, z) spacing, when the file's is wrong
    regularize: bool = True  # False: an irregular stack (tilted, gapped) as acquired


@dataclass
class OpenedStudy:
    volume: Volume
    findings: list[GeometryFinding] = field(default_factory=list)  # what the user must be told, in order

    @property
    def notes(self) -> list[str]:
        return [finding.message for finding in self.findings]


def open_study(request: OpenStudyRequest, progress: ProgressCallback | None = None,
               cancel: CancelToken | None = None) -> OpenedStudy:
    from medseg.io import load

    volume = load(request.source, series_uid=request.series_uid, progress=progress, cancel=cancel,
                  regularize=request.regularize, spacing_mm=request.spacing_mm)
    return OpenedStudy(volume, list(volume.meta.findings))


__all__ = ["OpenStudyRequest", "OpenedStudy", "open_study"]
