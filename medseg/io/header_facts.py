"""The facts of an image header that medseg checks before reading (the records :mod:`medseg.io.image_headers`
and :mod:`medseg.io.text_headers` fill), and the rule every file read obeys: only a regular file."""

from __future__ import annotations

import math
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from medseg.errors import ImageFormatError

HEADER_LIMIT = 1 << 20  # no NRRD or MetaImage header is longer; a longer one is not read


@dataclass(frozen=True)
class HeaderSpacing:
    """The voxel spacing as a header states it: ``None`` when it states none (ITK then assumes 1 mm)."""

    values: tuple[float, ...] | None  # (x, y, z) as the reader will take them, before any correction
    field: str  # where it is stated ("pixdim", "sform", "space directions", "ElementSpacing", ...)

    def unusable(self) -> list[tuple[str, float]]:
        """The axes whose spacing is not a finite positive number: [(axis, value)]."""
        if self.values is None:
            return []
        return [(axis, value) for axis, value in zip("xyz", self.values) if not (math.isfinite(value) and value > 0)]

    def describe(self) -> str:
        return ", ".join(f"{value:g} mm along {axis}" for axis, value in self.unusable())

    def outside(self, low: float, high: float) -> list[tuple[str, float]]:
        """The axes whose spacing is a positive number outside [low, high]: [(axis, value)]."""
        if self.values is None:
            return []
        return [(axis, value) for axis, value in zip("xyz", self.values)
                if math.isfinite(value) and value > 0 and not low <= value <= high]


@dataclass
class ImageHeader:
    """The facts of an image header medseg checks before reading: format, spacing, voxels, files."""

    format: str  # "nifti-1", "nifti-2", "nrrd", "metaimage"
    spacing: HeaderSpacing
    float_voxels: bool = False  # may hold NaN or infinity
    data_files: list[Path] = field(default_factory=list)  # detached voxel files (checked: inside, regular)
    data_offset: int = 0  # where the voxels start in the file (attached data)
    compression: str = "raw"  # "raw", "gzip", "zlib"
    voxel_bytes: int = 0  # bytes of voxel data the header declares (uncompressed)
    nifti: dict | None = None  # the NIfTI header's fields (format "nifti-*")
    sizes: list[int] = field(default_factory=list)  # voxels per axis, as declared
    orientation_given: bool = True  # False: no transform at all (ITK then takes the axes as LPS, at 0)
    orientation_unusable: str = ""  # why the one transform stated cannot be used (ITK then takes the axes as LPS)
    label_names: dict[int, str] = field(default_factory=dict)  # a label table the header states (NIfTI extension)


def check_regular(path: Path, named: Path) -> None:
    """Only a regular file is read: a FIFO blocks forever, a device never ends."""
    try:
        mode = os.stat(path).st_mode
    except OSError as error:
        raise ImageFormatError(f"cannot open it ({error.strerror or error})", path=named) from error
    if not stat.S_ISREG(mode):
        kind = "a folder" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "a device or socket"
        raise ImageFormatError(f"not a regular file ({kind}): not read", path=named)
