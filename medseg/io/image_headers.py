"""What a NIfTI, NRRD or MetaImage header says, and whether it can be trusted, before ITK reads a voxel.

ITK reads what a header says without question, and some of its readings change numbers without a
word (found by probing, issue 43): a missing or NaN spacing becomes 1 mm (volumes 27x too small),
a negative one mirrors the axis, NaN voxels of a NIfTI become 0 (water), ``CompressedData = True``
on raw bytes gives garbage, ``ElementType MET_STRING`` gives bytes, a detached ``data file`` is read
wherever it points (``../../etc/passwd``, ``/dev/zero``). This module reads the header itself and:

- describes the voxel spacing as the header states it: :class:`HeaderSpacing` (missing, or per axis
  the value the reader will use), so one rule decides everywhere (:mod:`medseg.io.voxel_checks`);
- refuses a header that lies about its data (an unknown voxel type, a data offset past the end,
  compressed data that does not inflate) with :class:`~medseg.errors.ImageFormatError` naming the file;
- refuses a detached data file that is not a regular file inside the header's own folder (the rule
  the DICOMDIR reader applies to its references).

NIfTI's binary header is read here, NRRD's and MetaImage's text in :mod:`medseg.io.text_headers` (at
most :data:`HEADER_LIMIT` bytes of it); which of them reads a file is the format table's choice
(:func:`medseg.io.formats.image_header`); the checks of the voxel bytes themselves (gzip's CRC,
non-finite values) are in :mod:`medseg.io.voxel_stream`.
"""

from __future__ import annotations

import math
import struct
from pathlib import Path

from medseg.errors import ImageFormatError
from medseg.io.header_facts import HEADER_LIMIT, HeaderSpacing, ImageHeader, check_regular

NIFTI1_SIZE, NIFTI2_SIZE = 348, 540


# --- NIfTI --------------------------------------------------------------------------------------------------
_NIFTI_FLOAT_TYPES = {16: 4, 64: 8, 1536: 16}  # float32, float64, float128
_NIFTI_TYPES = {2: 1, 4: 2, 8: 4, 16: 4, 64: 8, 256: 1, 512: 2, 768: 4, 1024: 8, 1280: 8, 1536: 16}
_NIFTI_UNSUPPORTED = {1: "1-bit", 32: "complex", 128: "RGB", 1792: "complex", 2048: "complex", 2304: "RGBA"}


def read_nifti_fields(path: Path) -> dict:
    """The NIfTI-1 or -2 header's fields (either byte order), from the first 544 bytes of the file."""
    import gzip
    import zlib

    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as handle:
            head = handle.read(NIFTI2_SIZE + 4)
    except (OSError, EOFError, zlib.error) as error:
        raise ImageFormatError(f"the NIfTI header cannot be read ({error})", path=path,
                               hint="the file may be truncated or corrupt") from error
    for order in "<>":
        if len(head) >= NIFTI1_SIZE and struct.unpack(order + "i", head[:4])[0] == NIFTI1_SIZE:
            return _nifti1(head, order)
        if len(head) >= NIFTI2_SIZE and struct.unpack(order + "i", head[:4])[0] == NIFTI2_SIZE:
            return _nifti2(head, order)
    raise ImageFormatError("not a NIfTI file: its first four bytes are not a NIfTI-1 or NIfTI-2 header size",
                           path=path, hint="the file may be truncated, corrupt or of another format")


def _nifti1(head: bytes, order: str) -> dict:
    u = lambda fmt, at: struct.unpack_from(order + fmt, head, at)  # noqa: E731
    return {"version": 1, "order": order, "magic": head[344:348], "dims": u("8h", 40), "datatype": u("h", 70)[0],
            "bitpix": u("h", 72)[0], "pixdim": u("8f", 76), "vox_offset": u("f", 108)[0],
            "scl_slope": u("f", 112)[0], "scl_inter": u("f", 116)[0], "qform_code": u("h", 252)[0],
            "sform_code": u("h", 254)[0], "quatern": u("6f", 256), "srow": u("12f", 280), "header_size": NIFTI1_SIZE,
            "extension": head[348] if len(head) > 348 else 0}


def _nifti2(head: bytes, order: str) -> dict:
    u = lambda fmt, at: struct.unpack_from(order + fmt, head, at)  # noqa: E731
    return {"version": 2, "order": order, "magic": head[4:8], "dims": u("8q", 16), "datatype": u("h", 12)[0],
            "bitpix": u("h", 14)[0], "pixdim": u("8d", 104), "vox_offset": float(u("q", 168)[0]),
            "scl_slope": u("d", 176)[0], "scl_inter": u("d", 184)[0], "qform_code": u("i", 344)[0],
            "sform_code": u("i", 348)[0], "quatern": u("6d", 352), "srow": u("12d", 400), "header_size": NIFTI2_SIZE,
            "extension": head[540] if len(head) > 540 else 0}


def nifti_header(path: Path) -> ImageHeader:
    fields = read_nifti_fields(path)
    if fields["magic"][:3] not in (b"n+1", b"n+2", b"ni1", b"ni2"):
        raise ImageFormatError(f"the NIfTI magic is {fields['magic']!r}, not n+1/n+2: not a NIfTI file medseg can "
                               "read", path=path, hint="the file may be corrupt or an ANALYZE 7.5 header")
    if fields["magic"][:3] in (b"ni1", b"ni2"):
        raise ImageFormatError("a NIfTI header with its voxels in a separate .img file is not supported", path=path,
                               hint="convert it to a single .nii/.nii.gz file")
    dims, datatype, bitpix = fields["dims"], fields["datatype"], fields["bitpix"]
    if not 2 <= dims[0] <= 7 or any(extent < 1 for extent in dims[1:dims[0] + 1]):
        raise ImageFormatError(f"the NIfTI header declares {dims[0]} dimensions of sizes "
                               f"{list(dims[1:max(1, min(dims[0], 7)) + 1])}: not an image", path=path)
    if any(extent != 1 for extent in dims[4:dims[0] + 1]):
        raise ImageFormatError(f"the NIfTI image has {dims[0]} dimensions (sizes {list(dims[1:dims[0] + 1])}); a 3D "
                               "volume is needed", path=path, hint="extract one volume, e.g. with fslroi")
    if datatype in _NIFTI_UNSUPPORTED:
        raise ImageFormatError(f"its voxels are {_NIFTI_UNSUPPORTED[datatype]} (NIfTI datatype {datatype}): not an "
                               "image medseg can read (a CT has one real value per voxel)", path=path)
    if datatype not in _NIFTI_TYPES or _NIFTI_TYPES[datatype] * 8 != bitpix:
        raise ImageFormatError(f"the NIfTI header's voxel type is inconsistent (datatype {datatype}, {bitpix} bits per "
                               "voxel)", path=path, hint="the header is corrupt")
    offset = fields["vox_offset"]
    header_size = fields["header_size"]
    if not (math.isfinite(offset) and offset == int(offset) and header_size <= offset < 2**40):
        raise ImageFormatError(f"the header says the voxels start at byte {offset:g}, which no NIfTI file can "
                               f"(a whole number of at least {header_size + 4 if fields['version'] == 1 else header_size} "
                               "is needed)", path=path, hint="the header is corrupt")
    if fields["version"] == 1 and offset < NIFTI1_SIZE + 4:
        raise ImageFormatError(f"the header says the voxels start at byte {int(offset)}, inside the header itself",
                               path=path, hint="the header is corrupt")
    _check_scaling(fields, path)
    label_names = _check_extensions(path, fields, int(offset)) if fields["extension"] else {}
    voxels = 1
    for extent in dims[1:dims[0] + 1]:
        voxels *= int(extent)
    return ImageHeader(f"nifti-{fields['version']}", nifti_spacing(fields), datatype in _NIFTI_FLOAT_TYPES,
                       data_offset=int(offset), compression="gzip" if path.name.lower().endswith(".gz") else "raw",
                       voxel_bytes=voxels * bitpix // 8, nifti=fields, sizes=[int(d) for d in dims[1:dims[0] + 1]],
                       orientation_given=fields["qform_code"] > 0 or fields["sform_code"] > 0,
                       orientation_unusable=_unusable_qform(fields), label_names=label_names)


def _unusable_qform(fields: dict) -> str:
    """Why the qform, the header's only transform, cannot be used ("" when it can, or is not the one used).

    A qform whose quaternion is NaN or infinite was read (by ITK and by nibabel) as no rotation at
    all, without a word: the image then lies in the patient's axes whatever the scanner's were."""
    if fields["qform_code"] <= 0 or fields["sform_code"] > 0:
        return ""
    values = dict(zip(("quatern_b", "quatern_c", "quatern_d"), (float(v) for v in fields["quatern"][:3])))
    bad = {name: value for name, value in values.items() if not math.isfinite(value)}
    if bad:
        return ", ".join(f"{name} = {value:g}" for name, value in bad.items())
    return ""


def _check_extensions(path: Path, fields: dict, offset: int) -> dict[int, str]:
    """Header extensions (esize, ecode, data) must end where the voxels start, or before: an extension
    running into the voxels means the header and the data disagree on where the data is. Gives the
    label names an extension states (:mod:`medseg.io.nifti_label_table`), {} if none does."""
    import gzip
    import zlib

    from medseg.io.nifti_label_table import MAX_BYTES, label_table

    names: dict[int, str] = {}
    position = fields["header_size"] + 4
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as handle:
            for _ in range(10_000):
                if position + 8 > offset:
                    break
                handle.seek(position)
                head = handle.read(8)
                if len(head) < 8:
                    break
                size, code = struct.unpack(fields["order"] + "ii", head)
                if size < 8 or position + size > offset:
                    raise ImageFormatError(f"the header extension at byte {position} declares {size} bytes, which "
                                           f"do not end before the voxels start (byte {offset})", path=path,
                                           hint="the header is corrupt")
                if not names and size - 8 <= MAX_BYTES:
                    names = label_table(code, handle.read(size - 8))
                position += size
    except (OSError, EOFError, zlib.error) as error:
        raise ImageFormatError(f"the NIfTI header extensions cannot be read ({error})", path=path) from error
    return names


def _check_scaling(fields: dict, path: Path) -> None:
    """scl_slope 0 or NaN means "not scaled" (the standard); anything else must be a plausible number."""
    slope, inter = fields["scl_slope"], fields["scl_inter"]
    if slope == 0 or math.isnan(slope):
        return
    if not (math.isfinite(slope) and 1e-6 <= abs(slope) <= 1e6) or not (math.isfinite(inter) and abs(inter) <= 1e9):
        raise ImageFormatError(f"the header scales its stored values by scl_slope {slope:g} and scl_inter {inter:g}: "
                               "no image's values are made that way", path=path, hint="the header is corrupt")


def nifti_spacing(fields: dict) -> HeaderSpacing:
    """The spacing ITK takes from a NIfTI header: the sform's column lengths when the sform is used
    (sform_code > 0), else pixdim[1..3] (qform or none), as the header states them."""
    n = max(2, min(3, fields["dims"][0]))
    pixdim = tuple(float(v) for v in fields["pixdim"][1:n + 1]) + (1.0,) * (3 - n)
    if fields["sform_code"] > 0:
        srow = fields["srow"]
        columns = [math.sqrt(sum(float(srow[4 * row + axis]) ** 2 for row in range(3))) for axis in range(3)]
        # An unusable pixdim is reported as the header states it (ITK then fails or mirrors); else the sform's
        # column length, which is the spacing ITK takes.
        values = tuple(p if not (math.isfinite(p) and p > 0) else c for p, c in zip(pixdim, columns))
        return HeaderSpacing(values, "sform")
    return HeaderSpacing(pixdim, "pixdim")


__all__ = ["HEADER_LIMIT", "HeaderSpacing", "ImageHeader", "check_regular", "nifti_header",
           "read_nifti_fields"]
