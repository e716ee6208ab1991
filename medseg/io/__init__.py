"""Image input/output: the Volume type, DICOM discovery and loading, NIfTI/NRRD/MHA.

- ``scan(paths)``: header-only parallel scan of a folder, files, .zip or DICOMDIR into
  :class:`SeriesInfo` (kind, loadable, geometry findings) plus the skipped files and why.
- ``load_series(series, on_slice=...)``: HU Volume, decoded middle slice first.
- ``load(path, series_uid=None)``: an image file, or the chosen/largest DICOM series.
- ``read_image`` / ``write_image``: NIfTI, NRRD, MHA (LPS in memory, atomic writes).
- ``resample_to(volume, reference)``: onto another Volume's grid.
"""

from medseg.io.dicom_load import load_series, middle_out
from medseg.io.dicom_scan import ScanResult, SeriesInfo, SkippedFile, scan
from medseg.io.image_files import read_image, write_image
from medseg.io.load import choose_series, load
from medseg.io.resample import resample_to
from medseg.io.volume import GeometryFinding, Volume, VolumeMeta

__all__ = [
    "GeometryFinding",
    "ScanResult",
    "SeriesInfo",
    "SkippedFile",
    "Volume",
    "VolumeMeta",
    "choose_series",
    "load",
    "load_series",
    "middle_out",
    "read_image",
    "resample_to",
    "scan",
    "write_image",
]
