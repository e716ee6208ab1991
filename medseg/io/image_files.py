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
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import SimpleITK as sitk

from medseg.core.labels import Label
from medseg.core.volume import GeometryFinding, Volume, VolumeMeta
from medseg.errors import GeometryError, ImageFormatError, SaveError
from medseg.io.atomic import atomic_path
from medseg.io.file_checks import IncompleteFile
from medseg.io.file_types import (
    format_of,
    image_header,
    image_read_suffixes,
    image_suffix,
    image_types,
    image_write_suffixes,
)
from medseg.io.header_facts import ImageHeader
from medseg.io.header_rewrite import header_axis_findings, write_unit_spacing_header
from medseg.io.memory_budget import check_allocation
from medseg.io.nifti_reader import read_nifti
from medseg.io.voxel_checks import SANE_SPACING_MM, SPACING_HINT, check_spacing, replace_non_finite
from medseg.io.voxel_stream import check_voxel_data

IMAGE_SUFFIXES = image_read_suffixes()  # from the one table of formats (medseg.io.file_types)
IMAGE_PATTERNS = " ".join(f"*{suffix}" for suffix in IMAGE_SUFFIXES)  # for file dialogs' filters
WRITE_SUFFIXES = image_write_suffixes()


def read_image(path: str | os.PathLike, spacing_mm: Sequence[float] | None = None) -> Volume:
    """Read a NIfTI/NRRD/MHA/MHD file into a Volume (LPS geometry).

    The header is checked first (:mod:`medseg.io.image_headers`: its lies, a data file outside its
    folder) and the voxel bytes once (:mod:`medseg.io.voxel_stream`: checksums, NaN); then one rule
    for the spacing, whatever the format: a header that states none is read as 1 mm with a finding;
    one that states 0, a negative number, NaN or infinity is refused unless ``spacing_mm`` (x, y, z,
    the command line's ``--spacing``) gives the true one, as is one outside any CT's range
    (:func:`~medseg.io.voxel_checks.check_spacing`).
    """
    path = Path(path)
    suffix = image_suffix(path)
    if suffix is None:
        raise ImageFormatError("not a NIfTI, NRRD or MHA/MHD file (by its name)", path=path,
                               hint="supported: " + ", ".join(IMAGE_SUFFIXES))
    if not path.exists():
        raise ImageFormatError("no such file", path=path)
    header = image_header(path)
    # A spacing of 1e30 or 1e-30 mm in a NIfTI sform made ITK fail on its direction cosines ("only supports
    # orthonormal direction cosines"): such a header is judged here, before ITK reads it, and read like
    # an unusable one (without ITK's geometry) when the user gives the true spacing.
    absurd = header.spacing.outside(*SANE_SPACING_MM)
    unusable = header.spacing.unusable() or absurd
    if unusable and spacing_mm is None:
        if absurd and not header.spacing.unusable():
            low, high = SANE_SPACING_MM
            stated = ", ".join(f"{value:g} mm along {axis}" for axis, value in absurd)
            raise GeometryError(f"the voxel spacing in the header ({header.spacing.field}) is {stated}: outside the "
                                f"range of any CT ({low}–{high:g} mm per axis), an absurd value; distances, volumes "
                                "and the segmentation would be wrong", path=path, hint=SPACING_HINT)
        raise GeometryError(f"the voxel spacing in the header is {header.spacing.describe()} "
                            f"({header.spacing.field}): distances and volumes cannot be measured", path=path,
                            hint=SPACING_HINT)
    # ITK's buffer and the NumPy copy made from it exist at the same time.
    check_allocation(2 * header.voxel_bytes, f"reading an image of {' x '.join(map(str, header.sizes))} voxels "
                                             f"({header.voxel_bytes / 2**30:.1f} GiB)", path)
    checked = check_voxel_data(path, header)
    non_finite = checked.non_finite
    meta = VolumeMeta(source_files=[str(path)], extra={"format": suffix})
    if header.label_names:  # a label map that names its labels (TotalSegmentator's NIfTI extension)
        meta.labels = {value: Label(value, name) for value, name in sorted(header.label_names.items())}
    if header.format == "nifti-2" or (unusable and header.nifti is not None):
        volume = read_nifti(path, header, meta, spacing_mm if unusable else None)
        volume.meta.findings.extend(header_axis_findings(header))
    elif unusable:
        volume = _read_with_header_spacing(path, header, meta)
    elif checked.stored is not None:
        volume = _nifti_from_stored(path, header, checked.stored, meta)
    else:
        volume = _read_itk(path, meta)
    if non_finite is not None:  # ITK made them 0: they were not numbers
        if non_finite.size != volume.array.size:
            raise ImageFormatError("the voxels read do not match the header's size", path=path)
        volume.array.reshape(-1)[non_finite] = np.nan
    if unusable:
        volume.meta.extra["header_spacing_mm"] = list(header.spacing.values or ())
    elif header.spacing.values is None:
        volume.meta.findings.append(GeometryFinding(
            "no_pixel_spacing", f"The header gives no voxel spacing ({header.spacing.field} is missing); 1 mm is "
                                "assumed, so distances and volumes may be wrong (give the true spacing with "
                                "--spacing X Y Z).", {"field": header.spacing.field}))
    if header.orientation_unusable:
        volume.meta.findings.append(unusable_orientation_finding(header))
    elif not header.orientation_given:
        volume.meta.findings.append(GeometryFinding(
            "no_orientation", "The header gives no orientation; the image axes are taken as the patient's (x right "
                              "to left, y front to back, z feet to head). Check the orientation.", {}))
    replace_non_finite(volume)
    return check_spacing(volume, spacing_mm)


def unusable_orientation_finding(header: ImageHeader) -> GeometryFinding:
    return GeometryFinding(
        "orientation_unusable", f"The header's orientation (its qform; it has no sform) is not a number "
                                f"({header.orientation_unusable}); the image axes are taken as NIfTI's default (x towards "
                                "the patient's right, y to the front, z to the head), so left and right, front and "
                                "back may be swapped. Check the orientation against the scanner's images.",
        {"qform": header.orientation_unusable})


def _read_itk(path: Path, meta: VolumeMeta) -> Volume:
    info = read_image_information(path)
    voxel_bytes = int(np.prod(info.GetSize(), dtype=np.float64)) * _bytes_per_voxel(info)
    check_allocation(2 * voxel_bytes, f"reading an image of {' x '.join(map(str, info.GetSize()))} voxels "
                                      f"({voxel_bytes / 2**30:.1f} GiB)", path)
    try:
        image = sitk.ReadImage(str(path))
    except Exception as error:  # SimpleITK raises RuntimeError with ITK's message
        raise ImageFormatError(f"cannot read the image ({_first_line(error)})", path=path,
                               hint="the file may be truncated or corrupt") from error
    return _volume(image, meta, path)


def _nifti_from_stored(path: Path, header: ImageHeader, stored: np.ndarray, meta: VolumeMeta) -> Volume:
    """A gzip NIfTI from the voxel bytes the CRC check already inflated, with the geometry and voxel type
    ITK's header reader gives: one inflation instead of two (the check had made opening 2.6x slower)."""
    info = read_image_information(path)
    fields = header.nifti
    assert fields is not None
    dimension = info.GetDimension()
    size = list(info.GetSize())
    voxels = stored.view(np.dtype(_NIFTI_NUMPY[fields["datatype"]]).newbyteorder(fields["order"]))
    array = voxels.reshape(size[::-1]).astype(voxels.dtype.newbyteorder("="), copy=False)
    if array.ndim == 4:
        array = array[0]
    if array.ndim == 2:
        array = array[np.newaxis]
    if array.ndim != 3:
        raise ImageFormatError(f"the image is {array.ndim}D; a 3D volume is needed", path=path)
    target = sitk.GetArrayViewFromImage(_voxel_probe(info)).dtype  # what ITK would give (float when scaled)
    slope, inter = fields["scl_slope"], fields["scl_inter"]
    if target.kind == "f" and slope and np.isfinite(slope) and (slope != 1 or inter != 0):
        array = (array.astype(np.float64) * slope + inter).astype(target)
    elif array.dtype != target:
        array = array.astype(target)
    n = min(3, dimension)
    spacing = list(info.GetSpacing())[:n] + [1.0] * (3 - n)
    origin = list(info.GetOrigin())[:n] + [0.0] * (3 - n)
    direction = np.eye(3)
    direction[:n, :n] = np.asarray(info.GetDirection(), dtype=float).reshape(dimension, dimension)[:n, :n]
    try:
        return Volume(np.ascontiguousarray(array), spacing, origin, direction, meta)
    except Exception as error:
        raise ImageFormatError(f"the image geometry is not usable ({error})", path=path) from error


def _volume(image: sitk.Image, meta: VolumeMeta, path: Path) -> Volume:
    if image.GetNumberOfComponentsPerPixel() != 1:
        raise ImageFormatError(f"the image has {image.GetNumberOfComponentsPerPixel()} components per voxel; "
                               "only scalar volumes are supported", path=path)
    if image.GetDimension() == 4 and image.GetSize()[3] == 1:
        image = image[:, :, :, 0]
    if image.GetDimension() not in (2, 3):
        raise ImageFormatError(f"the image is {image.GetDimension()}D; a 3D volume is needed", path=path)
    try:
        return Volume.from_sitk(image, meta)
    except Exception as error:
        raise ImageFormatError(f"the image geometry is not usable ({error})", path=path) from error


def _read_with_header_spacing(path: Path, header: ImageHeader, meta: VolumeMeta) -> Volume:
    """A NRRD/MetaImage whose header spacing is unusable (ITK refuses 0 and NaN, mirrors a negative):
    read through a copy of its header with 1 mm (the caller then sets the user's spacing), pointing
    at the original voxels, so the orientation is the header's and no voxel is copied."""
    with tempfile.TemporaryDirectory(prefix="medseg-header-") as folder:
        copy = write_unit_spacing_header(path, header, Path(folder))
        try:
            image = sitk.ReadImage(str(copy))
        except Exception as error:
            raise ImageFormatError(f"cannot read the image ({_first_line(error)})", path=path,
                                   hint="the file may be truncated or corrupt") from error
    volume = _volume(image, meta, path)
    volume.meta.findings.extend(header_axis_findings(header))
    return volume


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
    suffix = image_suffix(path)
    if suffix is None or not path.exists():
        raise ImageFormatError("no such file" if suffix else "not a NIfTI, NRRD or MHA/MHD file (by its name)",
                               path=path)
    header = image_header(path)
    findings = [unusable_orientation_finding(header)] if header.orientation_unusable else []
    absurd = header.spacing.outside(*SANE_SPACING_MM)
    if absurd and not header.spacing.unusable():
        findings.append(GeometryFinding(
            "absurd_spacing", "The voxel spacing in the header is " + ", ".join(f"{v:g} mm along {a}" for a, v in absurd)
            + f" ({header.spacing.field}), outside the range of any CT: medseg measures nothing on this image unless "
              "the true spacing is given (--spacing X Y Z).", {"spacing": list(header.spacing.values or ())}))
    if header.spacing.unusable():
        findings.append(GeometryFinding(
            "unusable_spacing", f"The voxel spacing in the header is {header.spacing.describe()} "
                                f"({header.spacing.field}): medseg measures nothing on this image unless the true "
                                "spacing is given (--spacing X Y Z).", {"spacing": list(header.spacing.values or ())}))
    elif header.spacing.values is None:
        findings.append(GeometryFinding("no_pixel_spacing", f"The header gives no voxel spacing ({header.spacing.field} "
                                                            "is missing); 1 mm is assumed.", {}))
    odd = bool(header.spacing.unusable() or absurd)  # read without ITK's geometry, as read_image does
    if header.nifti is not None and (header.format == "nifti-2" or odd):
        from medseg.io.nifti_reader import nifti_geometry

        fields = header.nifti
        try:
            spacing, matrix, origin, more = nifti_geometry(fields, [1.0, 1.0, 1.0] if odd else None)
        except ImageFormatError as error:
            raise ImageFormatError(error.message, path=path, hint=error.hint) from error
        dims = fields["dims"]
        size = [int(d) for d in dims[1:min(3, dims[0]) + 1]] + [1] * max(0, 3 - dims[0])
        dtype = str(np.dtype(_NIFTI_NUMPY[fields["datatype"]]))
        return {"size_xyz": size, "spacing_mm": list(header.spacing.values or spacing), "origin_mm": list(origin),
                "direction": matrix, "dtype": dtype, "components": 1, "findings": findings + more}
    with tempfile.TemporaryDirectory(prefix="medseg-header-") as folder:
        source = write_unit_spacing_header(path, header, Path(folder)) if odd else path
        reader = read_image_information(source)
        dimension = reader.GetDimension()
        size = list(reader.GetSize())[:3] + [1] * max(0, 3 - dimension)
        spacing = list(header.spacing.values) if odd and header.spacing.values else \
            list(reader.GetSpacing())[:3] + [1.0] * max(0, 3 - dimension)
        origin = list(reader.GetOrigin())[:3] + [0.0] * max(0, 3 - dimension)
        matrix = np.eye(3)
        given = np.asarray(reader.GetDirection(), dtype=float).reshape(dimension, dimension)
        matrix[:min(3, dimension), :min(3, dimension)] = given[:3, :3]
        probe = _voxel_probe(reader)
        return {"size_xyz": size, "spacing_mm": spacing, "origin_mm": origin, "direction": matrix,
                "dtype": str(sitk.GetArrayViewFromImage(probe).dtype), "components": reader.GetNumberOfComponents(),
                "findings": findings}


_NIFTI_NUMPY = {2: "u1", 4: "i2", 8: "i4", 16: "f4", 64: "f8", 256: "i1", 512: "u2", 768: "u4", 1024: "i8",
                1280: "u8", 1536: "f8"}


def _voxel_probe(reader: sitk.ImageFileReader) -> sitk.Image:
    """A one-voxel image of the header's voxel type (its numpy dtype and size per voxel)."""
    return sitk.Image([1] * reader.GetDimension(), reader.GetPixelID(), reader.GetNumberOfComponents())


def _bytes_per_voxel(reader: sitk.ImageFileReader) -> int:
    probe = _voxel_probe(reader)
    return probe.GetSizeOfPixelComponent() * reader.GetNumberOfComponents()


def write_image(volume: Volume, path: str | os.PathLike) -> Path:
    """Write ``volume`` as NIfTI (.nii/.nii.gz), NRRD or MHA, atomically. Returns the path."""
    path = Path(path)
    found = format_of(path, image_types())
    suffix = found[1] if found else None
    if found is None or suffix not in found[0].write_suffixes:
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
            sitk.WriteImage(image, str(temp), useCompression=suffix in found[0].compressed_suffixes)
    except SaveError:
        raise
    except Exception as error:
        raise ImageFormatError(f"cannot write the image ({_first_line(error)})", path=path,
                               hint="check free disk space and write permission") from error
    return path


def _first_line(error: Exception) -> str:
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    # ITK messages end with the useful line; the first ones are source locations.
    return lines[-1] if lines else type(error).__name__

