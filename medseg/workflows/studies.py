"""Open a study: an image file or a DICOM series, with what the reader found about it.

The one door for a command or a worker that needs an image (the GUI's progressive series
loading stays in :mod:`medseg.io`, which this calls). The spacing is checked as the I/O layer
checks it, or set by the user (``spacing_mm``), which a finding records.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

from medseg.core.volume import GeometryFinding, Volume, VolumeMeta
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


def open_scanned_series(series: Any, scan_result: Any = None, progress: ProgressCallback | None = None,
                        cancel: CancelToken | None = None, on_slice: Any = None, out: Any = None) -> Volume:
    """One series of a folder scan (medseg.io's SeriesInfo), decoded slice by slice (``on_slice(z, hu)`` as each
    arrives, into ``out`` when given: a preview's array); the scan's other series and skipped files become
    findings of the volume, as :func:`open_study` reports them."""
    from medseg.io import load_series

    volume = load_series(series, progress=progress, cancel=cancel, on_slice=on_slice, out=out)
    if scan_result is not None:
        from medseg.io.load import scan_findings

        volume.meta.findings.extend(scan_findings(scan_result, series))
    return volume


@dataclass
class SegmentedStudy:
    """A study with a segmentation opened onto it (a label map with its sidecar, or a DICOM SEG)."""

    volume: Volume
    segmentation: Any  # medseg.io.label_files.LabelFileResult: label_map, labels, segments, notes, naming

    @property
    def notes(self) -> list[str]:
        """What the reader says about the segmentation (moved, renamed, names guessed), in order."""
        return [*self.segmentation.notes, *self.segmentation.naming]


def open_segmented_study(request: OpenStudyRequest, segmentation: str | os.PathLike,
                         progress: ProgressCallback | None = None) -> SegmentedStudy:
    """The study, then ``segmentation`` placed onto its grid in patient coordinates (the one reader)."""
    from medseg.io.segmentations import open_segmentation

    volume = open_study(request, progress).volume
    return SegmentedStudy(volume, open_segmentation(segmentation, volume))


def open_segmentation_on(image: Volume, segmentation: str | os.PathLike) -> Any:
    """A segmentation file opened onto an image already open (a label map with its sidecar, or a DICOM SEG)."""
    from medseg.io.segmentations import open_segmentation

    return open_segmentation(segmentation, image)


def sidecar_of(path: str | os.PathLike) -> Path:
    """The ``.labels.json`` that travels with a label map: an input too, never to be overwritten."""
    from medseg.io.label_files import sidecar_path

    return sidecar_path(path)


@dataclass(frozen=True)
class ConvertRequest:
    """``medseg convert``: a study written as one image file, the format chosen by ``output``'s suffix."""

    study: OpenStudyRequest
    output: str | os.PathLike
    force: bool = False  # replace ``output`` if it exists
    option: str = "OUT"  # how the user named the output, for messages


@dataclass
class Converted:
    volume: Volume
    written: Path


def convert_study(request: ConvertRequest, progress: ProgressCallback | None = None) -> Converted:
    """Check the output (its format, not an input) before the study is read, and against its files once it is;
    then write it (atomically, checked by its format)."""
    from medseg.errors import ImageFormatError
    from medseg.io import write_image
    from medseg.io.image_files import WRITE_SUFFIXES, image_suffix
    from medseg.io.output_paths import check_output, source_paths

    output = request.output
    if not str(output).strip():
        raise ImageFormatError("no output file given (OUT is empty)", hint="name the file to write, e.g. ct.nii.gz")
    if image_suffix(output) not in WRITE_SUFFIXES:
        raise ImageFormatError("unsupported output format (by its name)", path=output,
                               hint="use " + ", ".join(WRITE_SUFFIXES))
    source = request.study.source
    check_output(output, source if isinstance(source, (list, tuple)) else [source], force=request.force,
                 option=request.option)
    volume = open_study(request.study, progress).volume
    check_output(output, source_paths(volume), force=True, option=request.option)
    return Converted(volume, Path(write_image(volume, output)))


def header_geometry(request: OpenStudyRequest) -> Volume | None:
    """The grid an image file's header declares, as a Volume whose voxels take no memory (one zero seen
    through the whole shape), for what a study would cost before a voxel is read (a 512 x 512 x 3000 CT
    that cannot be segmented here is refused with the figure before its 1.5 GiB are read). None for
    DICOM, and for a header whose spacing the read will refuse anyway."""
    import numpy as np

    from medseg.io.formats import image_header, image_suffix

    source = request.source
    if not isinstance(source, (str, os.PathLike)) or image_suffix(source) is None:
        return None
    path = Path(source)
    if not path.is_file():
        return None  # the read says what is wrong with it
    header = image_header(path)
    spacing = request.spacing_mm or header.spacing.values or (1.0, 1.0, 1.0)
    sizes = [int(n) for n in header.sizes[:3]]
    from medseg.io.voxel_checks import SANE_SPACING_MM

    unreadable = header.spacing.unusable() or header.spacing.outside(*SANE_SPACING_MM)
    if len(sizes) != 3 or min(sizes) < 1 or unreadable and request.spacing_mm is None:
        return None  # the read refuses it, naming the spacing
    if not all(np.isfinite(s) and s > 0 for s in spacing):
        return None
    stand_in = np.broadcast_to(np.zeros((), np.int16), tuple(reversed(sizes)))
    return Volume(stand_in, tuple(float(s) for s in spacing[:3]),
                  meta=VolumeMeta(source_files=[str(path)], extra={"voxel_bytes": int(header.voxel_bytes),
                                                                    "format": image_suffix(path)}))


__all__ = ["OpenStudyRequest", "OpenedStudy", "open_study", "open_scanned_series", "SegmentedStudy", "open_segmented_study",
           "open_segmentation_on", "sidecar_of", "ConvertRequest", "Converted", "convert_study", "header_geometry"]
