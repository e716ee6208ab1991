"""Is a file whole? Cheap checks by format, from its header and its size or trailer.

Used twice: before an atomic write renames its temporary file over the old one (ITK's
NIfTI writer reports a short write on stderr and returns as if it had succeeded, so a
full disk would otherwise install a truncated file and destroy the previous one), and
before a reader trusts a file (ITK reads a truncated NIfTI without complaint and fills
the missing voxels with garbage).

Each check reads the header and compares the bytes present with the bytes the header
declares; compressed data is checked by its trailer (gzip's length) or, where that does
not settle it, by streaming it through the decompressor. Nothing here loads voxels into
memory. A check raises :class:`IncompleteFile` with a reason. Which check a file gets (by its name) is
:func:`medseg.io.file_types.check_complete`'s choice; this module imports nothing of medseg's.
"""

from __future__ import annotations

import gzip
import json
import os
import struct
import zipfile
import zlib
from pathlib import Path
from typing import Callable

GZIP_MAGIC = b"\x1f\x8b"
_STREAM_CHUNK = 1 << 20


class IncompleteFile(Exception):
    """The file holds less than its header declares, or its structure is broken."""


# --- gzip -------------------------------------------------------------------------------
def gzip_uncompressed_size(path: Path, offset: int = 0, limit: int | None = None) -> int:
    """Bytes a gzip stream (every member, as bgzip writes them) inflates to, streamed in chunks.

    Stops counting past ``limit`` (returns a value > limit). Raises IncompleteFile when the
    stream is cut short or corrupt (a member's CRC or length wrong).
    """
    total = 0
    inflater = zlib.decompressobj(wbits=31)
    fed = False  # has the current member eaten input?
    members = 0
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            while True:
                chunk = handle.read(_STREAM_CHUNK)
                if not chunk:
                    break
                while chunk:
                    fed = True
                    total += len(inflater.decompress(chunk, _STREAM_CHUNK * 8))
                    chunk = inflater.unconsumed_tail
                    if inflater.eof:  # a member ended: the next one (bgzip) starts in unused_data
                        chunk = inflater.unused_data + chunk
                        inflater, fed, members = zlib.decompressobj(wbits=31), False, members + 1
                        if not chunk.strip(b"\x00"):
                            chunk = b""  # zero padding after the last member
                    if limit is not None and total > limit:
                        return total
    except zlib.error as error:
        raise IncompleteFile(f"the compressed data is corrupt ({error})") from error
    if fed or members == 0:
        raise IncompleteFile("the compressed data is cut short")
    return total


def _check_gzip_payload(path: Path, offset: int, expected: int) -> None:
    """A gzip stream from ``offset`` to the end that must inflate to ``expected`` bytes."""
    size = path.stat().st_size
    if size - offset < 18:
        raise IncompleteFile("the compressed data is cut short")
    with open(path, "rb") as handle:
        handle.seek(offset)
        if handle.read(2) != GZIP_MAGIC:
            raise IncompleteFile("the compressed data does not start like gzip")
        handle.seek(-4, os.SEEK_END)
        stored = struct.unpack("<I", handle.read(4))[0]  # ISIZE: length of the last member mod 2**32
    if stored == expected % 2**32:
        return
    # Several members (bgzip), or a cut: only the whole stream can tell.
    actual = gzip_uncompressed_size(path, offset, limit=expected)
    if actual < expected:
        raise IncompleteFile(f"the compressed data holds {actual} of the {expected} bytes its header declares")


# --- NIfTI ------------------------------------------------------------------------------
def nifti_expected_size(header: bytes) -> int | None:
    """Header + voxel bytes a NIfTI-1/2 file must hold, from its header (None if not NIfTI)."""
    for order in "<>":
        if len(header) >= 348 and struct.unpack(order + "i", header[:4])[0] == 348:
            dims = struct.unpack(order + "8h", header[40:56])
            bitpix = struct.unpack(order + "h", header[72:74])[0]
            offset = struct.unpack(order + "f", header[108:112])[0]
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
    offset = int(offset) if offset == offset and 0 <= offset < 2**40 else header_size
    voxels = 1
    for extent in dims[1:n_dims + 1]:
        voxels *= int(extent)
    return max(offset, header_size) + voxels * bitpix // 8


def read_nifti_header(path: Path) -> bytes:
    """The first 544 bytes of a .nii or .nii.gz (enough for a NIfTI-1 or -2 header)."""
    try:
        opener = gzip.open if path.name.lower().endswith(".gz") else open
        with opener(path, "rb") as handle:
            return handle.read(544)
    except (OSError, EOFError, zlib.error) as error:
        raise IncompleteFile(f"the NIfTI header cannot be read ({error})") from error


def check_nifti(path: Path) -> None:
    gzipped = path.name.lower().endswith(".gz")
    header = read_nifti_header(path)
    expected = nifti_expected_size(header)
    if expected is None:
        raise IncompleteFile("the file does not start with a NIfTI header")
    if gzipped:
        _check_gzip_payload(path, 0, expected)
    elif path.stat().st_size < expected:
        raise IncompleteFile(f"the file holds {path.stat().st_size} of the {expected} bytes its header declares")


# --- NRRD and MetaImage -------------------------------------------------------------------
_HEADER_LIMIT = 1 << 20


def _text_header(path: Path, end_of_header: Callable[[str], bool]) -> tuple[dict[str, str], int]:
    """(fields, byte offset of the data) of a line-oriented text header."""
    fields: dict[str, str] = {}
    with open(path, "rb") as handle:
        head = handle.read(_HEADER_LIMIT)
    position = 0
    while True:
        newline = head.find(b"\n", position)
        if newline < 0:
            raise IncompleteFile("the header is cut short")
        line = head[position:newline].decode("latin-1").rstrip("\r")
        position = newline + 1
        if end_of_header(line):
            return fields, position
        for separator in (":=", ":", "="):
            if separator in line and not line.startswith("#"):
                key, value = line.split(separator, 1)
                fields.setdefault(key.strip().lower(), value.strip())
                break
        if line.lower().startswith("elementdatafile"):
            return fields, position


def _type_bytes(name: str) -> int | None:
    name = name.lower().replace("met_", "")
    table = (("longlong", 8), ("long long", 8), ("int64", 8), ("double", 8), ("char", 1), ("int8", 1),
             ("short", 2), ("int16", 2), ("float", 4), ("int32", 4), ("int", 4), ("long", 8))
    for key, size in table:
        if key in name:
            return size
    return None


def _product(text: str) -> int:
    total = 1
    for part in text.split():
        total *= int(part)
    return total


def check_nrrd(path: Path) -> None:
    if not open(path, "rb").read(4) == b"NRRD":
        raise IncompleteFile("the file does not start with a NRRD header")
    fields, offset = _text_header(path, lambda line: line == "")
    if "data file" in fields or "datafile" in fields:
        return  # detached data: nothing to count here
    try:
        expected = _product(fields["sizes"]) * (_type_bytes(fields["type"]) or 0)
    except (KeyError, ValueError) as error:
        raise IncompleteFile(f"the NRRD header lacks sizes or type ({error})") from error
    encoding = fields.get("encoding", "raw").lower()
    if encoding == "raw":
        if path.stat().st_size - offset < expected:
            raise IncompleteFile(f"the file holds {path.stat().st_size - offset} of the {expected} voxel bytes "
                                 "its header declares")
    elif encoding in ("gzip", "gz"):
        _check_gzip_payload(path, offset, expected)


def check_metaimage(path: Path) -> None:
    fields, offset = _text_header(path, lambda line: False)
    if fields.get("elementdatafile", "").upper() != "LOCAL":
        return  # the voxels are in another file (.mhd + .raw)
    try:
        voxels = _product(fields["dimsize"]) * int(fields.get("elementnumberofchannels", "1"))
        element = _type_bytes(fields["elementtype"]) or 0
    except (KeyError, ValueError) as error:
        raise IncompleteFile(f"the MetaImage header lacks DimSize or ElementType ({error})") from error
    present = path.stat().st_size - offset
    if fields.get("compresseddata", "false").lower() == "true":
        declared = fields.get("compresseddatasize")
        if declared is not None and present < int(declared):
            raise IncompleteFile(f"the file holds {present} of the {declared} compressed bytes its header declares")
        if present <= 0:
            raise IncompleteFile("the compressed voxel data is missing")
    elif present < voxels * element:
        raise IncompleteFile(f"the file holds {present} of the {voxels * element} voxel bytes its header declares")


# --- other formats medseg writes -------------------------------------------------------
def check_zip(path: Path) -> None:
    try:
        with zipfile.ZipFile(path) as archive:
            damaged = archive.testzip()
    except (zipfile.BadZipFile, OSError, EOFError, zlib.error) as error:
        raise IncompleteFile(f"the zip structure is broken ({error})") from error
    if damaged is not None:
        raise IncompleteFile(f"the zip member {damaged} is damaged")


def check_safetensors(path: Path) -> None:
    size = path.stat().st_size
    with open(path, "rb") as handle:
        prefix = handle.read(8)
        if len(prefix) < 8:
            raise IncompleteFile("the safetensors header is cut short")
        length = struct.unpack("<Q", prefix)[0]
        if length > min(size, 100 << 20):
            raise IncompleteFile("the safetensors header length is impossible")
        try:
            header = json.loads(handle.read(length))
        except ValueError as error:
            raise IncompleteFile(f"the safetensors header is not readable ({error})") from error
    ends = [entry["data_offsets"][1] for key, entry in header.items() if key != "__metadata__"]
    if size < 8 + length + max(ends, default=0):
        raise IncompleteFile(f"the file holds {size} bytes; its header declares {8 + length + max(ends, default=0)}")


def check_json(path: Path) -> None:
    try:
        json.loads(path.read_bytes())
    except ValueError as error:
        raise IncompleteFile(f"the JSON is cut short or invalid ({error})") from error


PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"


def check_png(path: Path) -> None:
    with open(path, "rb") as handle:
        handle.seek(max(0, path.stat().st_size - len(PNG_END)))
        if handle.read() != PNG_END:
            raise IncompleteFile("the PNG image is cut short (no end chunk)")


def check_dicom(path: Path) -> None:
    import pydicom

    try:
        dataset = pydicom.dcmread(path)
        if "PixelData" in dataset and "Rows" in dataset:
            frames = int(dataset.get("NumberOfFrames") or 1)
            bits = int(dataset.BitsAllocated) * int(dataset.get("SamplesPerPixel") or 1)
            expected = (int(dataset.Rows) * int(dataset.Columns) * frames * bits + 7) // 8
            syntax = dataset.file_meta.TransferSyntaxUID
            if not syntax.is_compressed and len(dataset.PixelData) < expected:
                raise IncompleteFile(f"the pixel data holds {len(dataset.PixelData)} of {expected} bytes")
    except IncompleteFile:
        raise
    except Exception as error:  # pydicom raises many types on a cut file
        raise IncompleteFile(f"the DICOM file cannot be read back ({type(error).__name__}: {error})"[:300]) from error
