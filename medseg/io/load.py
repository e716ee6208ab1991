"""``load(path)``: one entry point for anything a user may open.

A NIfTI/NRRD/MHA file is read as is. Anything else is treated as DICOM (a folder, files,
a .zip, a DICOMDIR): the folder is scanned and one series is loaded, either the one
asked for or the loadable volume with the most slices. What was chosen and what was
left out is recorded in the Volume's findings, never silently.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Sequence

from medseg.errors import DicomError
from medseg.progress import CancelToken, Progress, ProgressCallback, report

if TYPE_CHECKING:  # imported when called: ``import medseg.io`` must stay cheap (see __init__)
    from medseg.core.volume import GeometryFinding, Volume
    from medseg.io.dicom_load import SliceCallback
    from medseg.io.dicom_scan import ScanResult, SeriesInfo

SCAN_SHARE = 0.3  # of the progress bar


def choose_series(result: ScanResult, source: str | os.PathLike | None = None) -> SeriesInfo:
    """The loadable volume with the most slices (single slices only when nothing else is there)."""
    candidates = [s for s in result.series if s.loadable]
    if not candidates:
        reasons = [f"{s.kind}: {s.series_description or s.key}" for s in result.series]
        reasons += [f"{Path(k.path).name}: {k.reason}" for k in result.skipped[:5]]
        raise DicomError("no loadable CT volume was found" + (f" ({'; '.join(reasons)[:600]})" if reasons else
                                                              " (no files)"),
                         path=source, hint="open a folder that contains a CT series, or a NIfTI/NRRD/MHA file")
    return max(candidates, key=lambda s: (s.kind == "volume", s.n_slices, s.series_uid != ""))


def _scaled(progress: ProgressCallback | None, start: float, share: float) -> ProgressCallback | None:
    if progress is None:
        return None
    return lambda p: progress(Progress(start + share * p.fraction, p.text, p.stage))


def load(
    path: str | os.PathLike | Sequence[str | os.PathLike],
    series_uid: str | None = None,
    progress: ProgressCallback | None = None,
    cancel: CancelToken | None = None,
    regularize: bool = True,
    on_slice: SliceCallback | None = None,
    spacing_mm: Sequence[float] | None = None,
) -> Volume:
    """Load an image file or a DICOM series (chosen by UID/key, else the largest volume).

    A spacing the header states as 0, negative, NaN or infinite, or outside what any CT has, is
    refused unless ``spacing_mm`` (x, y, z) gives the true one (:mod:`medseg.io.voxel_checks`).
    """
    return _load(path, series_uid, progress, cancel, regularize, on_slice, spacing_mm)


def _load(path, series_uid, progress, cancel, regularize, on_slice, spacing_mm) -> Volume:
    from medseg.io.dicom_load import load_series
    from medseg.io.dicom_scan import scan
    from medseg.io.formats import format_of, image_formats

    single = isinstance(path, (str, os.PathLike))
    found = format_of(path, image_formats()) if single else None
    if found is not None and Path(path).exists() and not Path(path).is_dir():
        report(progress, 0.0, "reading image", "read")
        volume = found[0].read_image(Path(path), spacing_mm)  # its reader imports SimpleITK, which DICOM need not
        report(progress, 1.0, "loaded", "read")
        return volume
    result = scan(path, progress=_scaled(progress, 0.0, SCAN_SHARE), cancel=cancel)
    source = path if single else None
    series = result.find(series_uid) if series_uid else choose_series(result, source)
    volume = load_series(series, progress=_scaled(progress, SCAN_SHARE, 1.0 - SCAN_SHARE), cancel=cancel,
                         regularize=regularize, on_slice=on_slice, spacing_mm=spacing_mm)
    volume.meta.findings.extend(scan_findings(result, series))
    volume.meta.extra["chosen_series_key"] = series.key
    return volume


def scan_findings(result: ScanResult, series: SeriesInfo) -> list[GeometryFinding]:
    """What the scan found beside the opened series — other series, series left out, files skipped
    and why — as findings of the loaded volume (the GUI's series browser and ``load`` alike)."""
    from medseg.core.volume import GeometryFinding

    findings: list[GeometryFinding] = []
    others = [s for s in result.series if s is not series]
    # A localizer or secondary capture is said once, as left out: not also as "another series in the same
    # place" (a folder of a series and its scout read as two findings about two other series).
    excluded = [s for s in others if s.kind in ("localizer", "secondary_capture")]
    images = [s for s in others if s not in excluded]
    if images:
        findings.append(GeometryFinding(
            "series_chosen",
            f"Opened the series {series.series_description or series.key!r} ({series.n_slices} images); "
            f"{len(images)} other image series {'is' if len(images) == 1 else 'are'} in the same place.",
            {"key": series.key, "others": [{"key": s.key, "kind": s.kind, "n_slices": s.n_slices,
                                            "description": s.series_description} for s in images]}))
    if excluded:
        findings.append(GeometryFinding(
            "localizer_excluded",
            f"{len(excluded)} localizer or secondary-capture series {'was' if len(excluded) == 1 else 'were'} "
            "left out (not part of a CT volume).",
            {"keys": [s.key for s in excluded]}))
    if result.skipped:
        findings.append(GeometryFinding(
            "non_image_skipped",
            f"{len(result.skipped)} file{'s were' if len(result.skipped) != 1 else ' was'} skipped "
            f"(not CT images, or unreadable): " + "; ".join(f"{Path(k.path).name}: {k.reason}" for k in result.skipped[:3])
            + ("; …" if len(result.skipped) > 3 else "") + ".",
            {"files": [{"path": k.path, "reason": k.reason} for k in result.skipped[:50]]}))
    return findings
