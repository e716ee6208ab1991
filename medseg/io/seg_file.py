"""Writing a multi-frame DICOM object with tens of thousands of frames: pydicom's encoding, each shared item once.

A BINARY SEG of TotalSegmentator's 117 structures on a 300-slice CT has some 30 000 frames, and
every frame carries a Per-Frame Functional Groups item: its position, the source image it was
derived from, its segment. pydicom encodes each nested dataset on its own, one Python call per
element, which took two thirds of the time of writing such a SEG (dcmqi, in C++, was faster).
Most of those items are shared: highdicom gives every frame on the same slice the same Plane
Position and Source Image items. Here each distinct item object is encoded once, by pydicom's own
element writer, and its bytes reused; the rest of the file is written by pydicom as usual.

The bytes are exactly pydicom's (tests/io/test_seg_file.py compares the two files byte for
byte). Anything this writer does not expect (a transfer syntax other than Explicit VR Little
Endian, a dataset without per-frame groups or pixel data) is written by pydicom as it is.
"""

from __future__ import annotations

import io
import os
import struct
from typing import Any, BinaryIO

from pydicom.dataset import Dataset
from pydicom.filebase import DicomBytesIO
from pydicom.filewriter import write_data_element
from pydicom.tag import Tag
from pydicom.uid import ExplicitVRLittleEndian

PER_FRAME = 0x52009230  # Per-Frame Functional Groups Sequence
PIXEL_DATA = 0x7FE00010
_ITEM = struct.pack("<HH", 0xFFFE, 0xE000)
_MAX_LENGTH = 0xFFFFFFFE


def _tag_bytes(tag: int) -> bytes:
    tag = Tag(tag)
    return struct.pack("<HH", tag.group, tag.element)


class _Encoder:
    """Explicit VR Little Endian bytes of datasets, each distinct item object encoded once."""

    def __init__(self, encodings: Any) -> None:
        self.encodings = encodings
        self._items: dict[int, tuple[Dataset, bytes]] = {}

    def dataset(self, dataset: Dataset, parent_encodings: Any) -> bytes:
        encodings = dataset.get("SpecificCharacterSet", parent_encodings)
        parts = []
        for tag in sorted(dataset.keys()):
            if tag.element == 0 and tag.group > 6:
                continue  # retired group lengths are not written (pydicom's rule)
            element = dataset[tag]
            if element.VR == "SQ":
                parts.append(self.sequence(int(tag), element.value, encodings))
            else:
                buffer = DicomBytesIO()
                buffer.is_little_endian, buffer.is_implicit_VR = True, False
                write_data_element(buffer, element, encodings)
                parts.append(buffer.getvalue())
        return b"".join(parts)

    def item(self, dataset: Dataset, encodings: Any) -> bytes:
        key = id(dataset)
        cached = self._items.get(key)
        if cached is None or cached[0] is not dataset:
            body = self.dataset(dataset, encodings)
            cached = self._items[key] = (dataset, _ITEM + struct.pack("<I", len(body)) + body)
        return cached[1]

    def sequence(self, tag: int, items: Any, encodings: Any) -> bytes:
        body = b"".join(self.item(item, encodings) for item in items)
        if len(body) > _MAX_LENGTH:
            raise OverflowError("sequence too long for a defined length")
        return _tag_bytes(tag) + b"SQ\x00\x00" + struct.pack("<I", len(body)) + body


def save_multiframe(dataset: Dataset, path: str | os.PathLike) -> None:
    """Write ``dataset`` (a multi-frame object made in memory) as pydicom's ``save_as`` would, faster."""
    meta = getattr(dataset, "file_meta", None)
    if (meta is None or meta.get("TransferSyntaxUID") != ExplicitVRLittleEndian or PER_FRAME not in dataset
            or PIXEL_DATA not in dataset or _pixel_vr(dataset) not in ("OB", "OW")):
        dataset.save_as(path, enforce_file_format=True)
        return
    frames = dataset[PER_FRAME].value
    pixels = dataset.PixelData
    encoder = _Encoder(dataset.get("SpecificCharacterSet"))
    try:
        per_frame = encoder.sequence(PER_FRAME, frames, dataset.get("SpecificCharacterSet", "iso8859"))
    except OverflowError:
        dataset.save_as(path, enforce_file_format=True)
        return
    # pydicom writes everything else: the file with an empty sequence and no pixels, then the two spliced in
    head = io.BytesIO()
    dataset[PER_FRAME].value = []
    dataset.PixelData = b""
    try:
        dataset.save_as(head, enforce_file_format=True)
    finally:
        dataset[PER_FRAME].value = frames
        dataset.PixelData = pixels
    written = head.getvalue()
    empty_sequence = _tag_bytes(PER_FRAME) + b"SQ\x00\x00" + b"\x00\x00\x00\x00"
    at = written.find(empty_sequence)
    vr = _pixel_vr(dataset).encode()
    empty_pixels = _tag_bytes(PIXEL_DATA) + vr + b"\x00\x00" + b"\x00\x00\x00\x00"
    if at < 0 or not written.endswith(empty_pixels) or written.find(empty_sequence, at + 1) >= 0:
        dataset.save_as(path, enforce_file_format=True)  # not the layout expected: pydicom as it is
        return
    padded = len(pixels) + (len(pixels) % 2)
    with open(path, "wb") as out:
        _write(out, written[:at], per_frame, written[at + len(empty_sequence):-len(empty_pixels)],
               _tag_bytes(PIXEL_DATA) + vr + b"\x00\x00" + struct.pack("<I", padded), pixels,
               b"\x00" if padded != len(pixels) else b"")


def _pixel_vr(dataset: Dataset) -> str:
    """Pixel Data's VR as pydicom writes it: "OB or OW" becomes OW above 8 bits allocated, else OB."""
    vr = str(dataset[PIXEL_DATA].VR)
    if vr == "OB or OW":
        return "OW" if int(dataset.get("BitsAllocated", 8)) > 8 else "OB"
    return vr


def _write(out: BinaryIO, *parts: bytes) -> None:
    for part in parts:
        out.write(part)


__all__ = ["save_multiframe"]
