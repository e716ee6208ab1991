"""NIfTI, NRRD and MHA/MHD volumes, read and written through SimpleITK.

SimpleITK converts every format's own convention (NIfTI's RAS qform/sform, NRRD's
space field) to ITK's LPS physical space, so a Volume read from any of them sits in the
same patient coordinates as the DICOM series it was made from. Writes are atomic: a
temporary file in the target folder, fsync, then rename, so a crash never leaves a
half-written file under the final name.
"""

from __future__ import annotations

import math
import os
import struct
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from medseg.errors import ImageFormatError, SaveError
from medseg.io.atomic import atomic_path
from medseg.io.file_checks import IncompleteFile, check_nifti, read_nifti_header
from medseg.io.memory_budget import check_allocation
from medseg.io.voxel_checks import replace_non_finite
from medseg.core.volume import GeometryFinding, Volume, VolumeMeta

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
    info = read_image_information(path)
    voxel_bytes = int(np.prod(info.GetSize(), dtype=np.float64)) * _bytes_per_voxel(info)
    # ITK's buffer and the NumPy copy made from it exist at the same time.
    check_allocation(2 * voxel_bytes, f"reading an image of {' x '.join(map(str, info.GetSize()))} voxels "
                                      f"({voxel_bytes / 2**30:.1f} GiB)", path)
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
    if image_suffix(path) in (".nii", ".nii.gz"):
        meta.findings.extend(_nifti_spacing_findings(path, image.GetDimension()))
    try:
        volume = Volume.from_sitk(image, meta)
    except Exception as error:
        raise ImageFormatError(f"the image geometry is not usable ({error})", path=path) from error
    replace_non_finite(volume)
    return volume


def _nifti_spacing_findings(path: Path, dimension: int) -> list[GeometryFinding]:
    """ITK reads a NIfTI pixdim of 0, NaN or infinity as 1 mm without a word: say so."""
    header = read_nifti_header(path)
    order = "<" if struct.unpack("<i", header[:4])[0] == 348 else ">"
    if struct.unpack(order + "i", header[:4])[0] != 348:
        return []  # NIfTI-2: ITK reads its double pixdim as given
    pixdim = struct.unpack(order + "8f", header[76:108])
    odd = {axis: value for axis, value in zip("xyz", pixdim[1:dimension + 1]) if not (math.isfinite(value) and value)}
    if not odd:
        return []
    listed = ", ".join(f"{axis} {value}" for axis, value in odd.items())
    return [GeometryFinding("no_pixel_spacing", f"The NIfTI header gives no usable voxel spacing ({listed}); "
                                                "1 mm is assumed, so distances and volumes may be wrong.",
                            {"pixdim": [float(v) for v in pixdim[1:4]]})]


def read_image_information(path: str | os.PathLike) -> sitk.ImageFileReader:
    """The header only (size, spacing, origin, direction, pixel type): no voxel is read."""
    reader = sitk.ImageFileReader()
    reader.SetFileName(str(path))
    try:
        reader.ReadImageInformation()
    except Exception as error:  # SimpleITK raises RuntimeError with ITK's message
        raise ImageFormatError(f"cannot read the image header ({_first_line(error)})", path=path,
                               hint="the file may be truncated or corrupt") from error
    if not 2 <= reader.GetDimension() <= 5:  # SimpleITK's images have 2 to 5 (found by fuzzing: a 1D NIfTI)
        raise ImageFormatError(f"the image header declares {reader.GetDimension()} dimension(s); a 3D volume is needed",
                               path=path)
    try:  # a one-voxel image of the declared type (found by fuzzing: complex voxels of 2 components cannot be made)
        _voxel_probe(reader)
    except RuntimeError as error:
        raise ImageFormatError(f"its voxels are {sitk.GetPixelIDValueAsString(reader.GetPixelID())} with "
                               f"{reader.GetNumberOfComponents()} components each: not an image medseg can read "
                               "(a CT has one real value per voxel)", path=path) from error
    return reader


def describe_image(path: str | os.PathLike) -> dict:
    """What ``medseg info`` shows of an image file, from its header alone (a 16 GiB file costs no more
    than a small one): size, spacing, origin, direction (LPS), voxel type and spacing findings."""
    path = Path(path)
    if not path.is_file():
        raise ImageFormatError("no such file", path=path)
    if image_suffix(path) in (".nii", ".nii.gz"):
        _check_nifti_complete(path)
    reader = read_image_information(path)
    dimension = reader.GetDimension()
    size = list(reader.GetSize())[:3] + [1] * max(0, 3 - dimension)
    spacing = list(reader.GetSpacing())[:3] + [1.0] * max(0, 3 - dimension)
    origin = list(reader.GetOrigin())[:3] + [0.0] * max(0, 3 - dimension)
    matrix = np.eye(3)
    given = np.asarray(reader.GetDirection(), dtype=float).reshape(dimension, dimension)
    matrix[:min(3, dimension), :min(3, dimension)] = given[:3, :3]
    probe = _voxel_probe(reader)
    findings = _nifti_spacing_findings(path, dimension) if image_suffix(path) in (".nii", ".nii.gz") else []
    return {"size_xyz": size, "spacing_mm": spacing, "origin_mm": origin, "direction": matrix,
            "dtype": str(sitk.GetArrayViewFromImage(probe).dtype), "components": reader.GetNumberOfComponents(),
            "findings": findings}


def _voxel_probe(reader: sitk.ImageFileReader) -> sitk.Image:
    """A one-voxel image of the header's voxel type (its numpy dtype and size per voxel)."""
    return sitk.Image([1] * reader.GetDimension(), reader.GetPixelID(), reader.GetNumberOfComponents())


def _bytes_per_voxel(reader: sitk.ImageFileReader) -> int:
    probe = _voxel_probe(reader)
    return probe.GetSizeOfPixelComponent() * reader.GetNumberOfComponents()


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

    def reads_back(temp: Path) -> None:
        """The header ITK reads from the file describes the image written."""
        reader = sitk.ImageFileReader()
        reader.SetFileName(str(temp))
        try:
            reader.ReadImageInformation()
        except RuntimeError as error:
            raise IncompleteFile(f"its header cannot be read back ({_first_line(error)})") from error
        if tuple(reader.GetSize()) != tuple(image.GetSize()):
            raise IncompleteFile(f"its header reads back size {reader.GetSize()}, not {image.GetSize()}")

    try:
        with atomic_path(path, suffix=suffix, verify=reads_back) as temp:
            sitk.WriteImage(image, str(temp), useCompression=suffix in (".nii.gz", ".nrrd", ".mha"))
    except SaveError:
        raise
    except Exception as error:
        raise ImageFormatError(f"cannot write the image ({_first_line(error)})", path=path,
                               hint="check free disk space and write permission") from error
    return path


def _check_nifti_complete(path: Path) -> None:
    """ITK reads a truncated .nii(.gz) without complaint (missing voxels come back as garbage)."""
    try:
        check_nifti(path)
    except IncompleteFile as error:
        raise ImageFormatError(f"the NIfTI file is truncated or corrupt ({error})", path=path,
                               hint="copy or export the file again") from error


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # ITK messages end with the useful line; the first ones are source locations.
    return lines[-1] if lines else type(error).__name__

