"""NIfTI, NRRD and MHA/MHD volumes, read and written through SimpleITK.

SimpleITK converts every format's own convention (NIfTI's RAS qform/sform, NRRD's
space field) to ITK's LPS physical space, so a Volume read from any of them sits in the
same patient coordinates as the DICOM series it was made from. Writes are atomic: a
temporary file in the target folder, fsync, then rename, so a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from medseg.errors import ImageFormatError, SaveError
from medseg.io.atomic import atomic_path
from medseg.core.volume import Volume, VolumeMeta

IMAGE_SUFFIXES = (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd")
IMAGE_PATTERNS = " ".join(f"*{suffix}" for suffix in IMAGE_SUFFIXES)  # for file dialogs' filters
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
    if image_suffix(path) in (".nii", ".nii.gz"):
        _check_nifti_complete(path)
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
    try:
        with atomic_path(path, suffix=suffix) as temp:
            sitk.WriteImage(image, str(temp), useCompression=suffix in (".nii.gz", ".nrrd", ".mha"))
    except SaveError:
        raise
    except Exception as error:
        raise ImageFormatError(f"cannot write the image ({_first_line(error)})", path=path,
                               hint="check free disk space and write permission") from error
    return path


def _nifti_expected_size(header: bytes) -> int | None:
    """Header + voxel bytes a NIfTI-1/2 file must hold, from its header (None if unknown)."""
    for order in "<>":
        if len(header) >= 348 and struct.unpack(order + "i", header[:4])[0] == 348:
            dims = struct.unpack(order + "8h", header[40:56])
            bitpix = struct.unpack(order + "h", header[72:74])[0]
            offset = int(struct.unpack(order + "f", header[108:112])[0])
            header_size = 348
            break
        if len(header) >= 540 and struct.unpack(order + "i", header[:4])[0] == 540:
            bitpix = struct.unpack(order + "h", header[14:16])[0]
            dims = struct.unpack(order + "8q", header[16:80])
            offset = struct.unpack(order + "q", header[168:176])[0]
            header_size = 540
            break
    else:
        return None
    n_dims = dims[0]
    if not 1 <= n_dims <= 7 or bitpix <= 0 or any(d < 1 for d in dims[1:n_dims + 1]):
        return None
    voxels = int(np.prod([int(d) for d in dims[1:n_dims + 1]], dtype=np.float64))
    return max(offset, header_size) + voxels * bitpix // 8


def _check_nifti_complete(path: Path) -> None:
    """ITK reads a truncated .nii(.gz) without complaint (missing voxels come back as garbage)."""
    try:
        if str(path).lower().endswith(".gz"):
            with gzip.open(path, "rb") as handle:
                header = handle.read(544)
            expected = _nifti_expected_size(header)
            with open(path, "rb") as raw:
                raw.seek(-4, os.SEEK_END)
                stored_size = struct.unpack("<I", raw.read(4))[0]  # gzip trailer: length mod 2**32
            actual_ok = expected is None or stored_size == expected % 2**32
        else:
            with open(path, "rb") as handle:
                header = handle.read(544)
            expected = _nifti_expected_size(header)
            actual_ok = expected is None or path.stat().st_size >= expected
    except (OSError, EOFError, zlib.error, struct.error) as error:
        raise ImageFormatError(f"cannot read the NIfTI header ({error})", path=path,
                               hint="the file may be truncated or corrupt") from error
    if not actual_ok:
        raise ImageFormatError("the NIfTI file is truncated or corrupt (it holds fewer voxel bytes than its "
                               "header declares)", path=path, hint="copy or export the file again")


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # ITK messages end with the useful line; the first ones are source locations.
    return lines[-1] if lines else type(error).__name__

