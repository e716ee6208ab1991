"""NIfTI, NRRD and MHA/MHD volumes, read and written through SimpleITK.

SimpleITK converts every format's own convention (NIfTI's RAS qform/sform, NRRD's
space field) to ITK's LPS physical space, so a Volume read from any of them sits in the
same patient coordinates as the DICOM series it was made from. Writes are atomic: a
temporary file in the target folder, fsync, then rename, so a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from medseg.errors import ImageFormatError
from medseg.io.volume import Volume, VolumeMeta

IMAGE_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd")
WRITE_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".mha")


def image_suffix(path: str | os.PathLike) -> str | None:
    """The recognised image-file suffix of ``path`` (".nii.gz", ".nrrd", ...), or None."""
    name = str(path).lower()
    for suffix in IMAGE_SUFFIXES:
        if name.endswith(suffix):
            return suffix
    return None


def read_image(path: str | os.PathLike) -> Volume:
    """Read a NIfTI/NRRD/MHA/MHD file into a Volume (LPS geometry)."""
    path = Path(path)
    if not path.is_file():
        raise ImageFormatError("no such file", path=path)
    if image_suffix(path) is None:
        raise ImageFormatError("not a NIfTI, NRRD or MHA/MHD file (by its name)", path=path,
                               hint="supported: " + ", ".join(IMAGE_SUFFIXES))
    try:
        image = sitk.ReadImage(str(path))
    except Exception as error:  # SimpleITK raises RuntimeError with ITK's message
        raise ImageFormatError(f"cannot read the image ({_first_line(error)})", path=path,
                               hint="the file may be truncated or corrupt") from error
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ImageFormatError(f"the image has {image.GetNumberOfComponentsPerPixel()} components per voxel; "
                               "only scalar volumes are supported", path=path)
    if image.GetDimension() == 4 and image.GetSize()[3] == 1:
        image = image[:, :, :, 0]
    if image.GetDimension() not in (2, 3):
        raise ImageFormatError(f"the image is {image.GetDimension()}D; a 3D volume is needed", path=path)
    meta = VolumeMeta(source_files=[str(path)], extra={"format": image_suffix(path)})
    try:
        return Volume.from_sitk(image, meta)
    except Exception as error:
        raise ImageFormatError(f"the image geometry is not usable ({error})", path=path) from error


def write_image(volume: Volume, path: str | os.PathLike) -> Path:
    """Write ``volume`` as NIfTI (.nii/.nii.gz), NRRD or MHA, atomically. Returns the path."""
    path = Path(path)
    suffix = image_suffix(path)
    if suffix not in WRITE_SUFFIXES:
        raise ImageFormatError("cannot write this format (by its name)", path=path,
                               hint="use .nii.gz, .nii, .nrrd or .mha")
    if not path.parent.is_dir():
        raise ImageFormatError("the folder does not exist", path=path.parent)
    image = volume.to_sitk()
    fd, temp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    try:
        sitk.WriteImage(image, temp_name, useCompression=suffix in (".nii.gz", ".nrrd", ".mha"))
        with open(temp_name, "rb+") as handle:
            os.fsync(handle.fileno())
        os.replace(temp_name, path)
    except Exception as error:
        if os.path.exists(temp_name):
            os.unlink(temp_name)
        raise ImageFormatError(f"cannot write the image ({_first_line(error)})", path=path,
                               hint="check free disk space and write permission") from error
    return path


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # ITK messages end with the useful line; the first ones are source locations.
    return lines[-1] if lines else type(error).__name__


def is_label_array(array: np.ndarray) -> bool:
    return np.issubdtype(array.dtype, np.integer) and array.dtype.itemsize <= 2
