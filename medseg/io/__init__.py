"""Image input/output (the Volume type itself lives in ``medseg.core``): DICOM discovery and loading, NIfTI/NRRD/MHA.

- ``scan(paths)``: header-only parallel scan of a folder, files, .zip or DICOMDIR into
  :class:`SeriesInfo` (kind, loadable, geometry findings) plus the skipped files and why.
- ``load_series(series, on_slice=..., out=preview_stack(series))``: HU Volume, decoded middle
  slice first, into an array a viewer may show while it fills.
- ``load(path, series_uid=None)``: an image file, or the chosen/largest DICOM series.
- ``read_image`` / ``write_image``: NIfTI, NRRD, MHA (LPS in memory, atomic writes).
- ``resample_to(volume, reference)``: onto another Volume's grid.

The names are imported on first use (PEP 562), not with the package: pydicom, SimpleITK
and scipy cost about a second to import, and ``medseg --help`` or the first window must
not wait for them.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Imported now, not lazily: ``medseg.io.load`` is both a submodule and the function it
# defines, and importing the submodule later would rebind the package attribute to the
# module. The module itself imports its heavy dependencies only when called.
from medseg.io.load import choose_series, load

# public name -> the module that defines it
_EXPORTS = {
    "load_series": "dicom_load",
    "middle_out": "dicom_load",
    "preview_stack": "dicom_load",
    "ScanResult": "dicom_scan",
    "SeriesInfo": "dicom_scan",
    "SkippedFile": "dicom_file_header",
    "scan": "dicom_scan",
    "read_image": "image_files",
    "write_image": "image_files",
    "resample_to": "resample",
}

__all__ = ["ScanResult", "SeriesInfo", "SkippedFile", "choose_series", "load", "load_series", "middle_out",
           "preview_stack", "read_image", "resample_to", "scan", "write_image"]  # _EXPORTS and the two above


def __getattr__(name: str) -> Any:
    module_name = _EXPORTS.get(name)
    if module_name is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module_name}"), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


if TYPE_CHECKING:  # static analysers and IDEs see the eager form
    from medseg.io.dicom_file_header import SkippedFile
    from medseg.io.dicom_load import load_series, middle_out, preview_stack
    from medseg.io.dicom_scan import ScanResult, SeriesInfo, scan
    from medseg.io.image_files import read_image, write_image
    from medseg.io.resample import resample_to
