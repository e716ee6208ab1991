"""The scan's fast path: find a header's elements without pydicom's per-element machinery.

A CT header has ~250 elements and the scan keeps ~30 of them. pydicom's element generator
costs ~1 ms per file in Python (profiled: most of the scan after the file reads); this
walker only reads each element's tag and length with ``struct`` and jumps over the value,
so a 300-file series is scanned in a fraction of the time. It hands the elements it keeps
to pydicom as ``RawDataElement`` s in a ``Dataset``, exactly as ``pydicom.dcmread`` would,
so every value is still converted (character sets, VRs, multi-values) by pydicom.

It only takes the common case: a DICM preamble, explicit VR little-endian file meta, and
an explicit or implicit VR little-endian dataset (every uncompressed-LE and encapsulated
syntax). Anything else, anything odd (a length running past the bytes, a kept element
that is a sequence, a malformed item), returns None and the caller parses the file with
pydicom as before, so odd files get pydicom's behaviour and error messages unchanged.
"""

from __future__ import annotations

import struct
from typing import Any, Iterable

from pydicom.charset import convert_encodings
from pydicom.dataelem import RawDataElement, convert_raw_data_element
from pydicom.dataset import Dataset, FileMetaDataset
from pydicom.tag import BaseTag

EXPLICIT_LE = "1.2.840.10008.1.2.1"
IMPLICIT_LE = "1.2.840.10008.1.2"
_NOT_WALKED = {"1.2.840.10008.1.2.2", "1.2.840.10008.1.2.1.99"}  # big endian, deflated
_LONG_VRS = {b"OB", b"OD", b"OF", b"OL", b"OV", b"OW", b"SQ", b"SV", b"UC", b"UN", b"UR", b"UT", b"UV"}
_SHORT_VRS = {b"AE", b"AS", b"AT", b"CS", b"DA", b"DS", b"DT", b"FL", b"FD", b"IS", b"LO", b"LT", b"PN", b"SH",
              b"SL", b"SS", b"ST", b"TM", b"UI", b"UL", b"US"}
_UNDEFINED = 0xFFFFFFFF
_ITEM, _ITEM_END, _SEQUENCE_END = 0xFFFEE000, 0xFFFEE00D, 0xFFFEE0DD
_PIXEL_GROUP = 0x7FE0
_TAG_LENGTH = struct.Struct("<HHI")  # group, element, 32-bit length (implicit VR; items)
_EXPLICIT = struct.Struct("<HH2sH")  # group, element, VR, 16-bit length
_U32 = struct.Struct("<I")


class _Odd(Exception):
    """Not the common case: let pydicom parse the file."""


class MalformedHeader(ValueError):
    """Bytes no DICOM header holds (a run of zeros where elements should be: a sparse or wiped file).

    Raised, not handed to pydicom: pydicom parses zeros as empty elements, about 1 MB/s, so a
    16 GiB sparse file behind a DICOM preamble kept ``medseg info`` busy for hours."""


def walk_header(head: bytes, keep: Iterable[int]) -> tuple[Dataset, int] | None:
    """(dataset of the kept top-level elements, offset where the pixel data element starts) or None.

    ``head`` holds the start of the file; the walk must reach the pixel data (or the end of
    a file that ``head`` holds whole, then the offset is ``len(head)``).
    """
    if len(head) < 132 or head[128:132] != b"DICM":
        return None
    if len(head) >= 134 and head[132:134] != b"\x02\x00":
        raise MalformedHeader("a DICOM preamble without file meta information after it")
    try:
        meta, position = _walk(head, 132, implicit=False, keep=None, stop_group=0x0002)
        syntax_element = meta.get(0x00020010)
        if syntax_element is None:
            return None
        transfer_syntax = syntax_element.value.decode("ascii", "replace").strip(" \x00")
        if transfer_syntax in _NOT_WALKED or not transfer_syntax:
            return None
        implicit = transfer_syntax == IMPLICIT_LE
        keep_set = frozenset(int(tag) for tag in keep)
        elements, end = _walk(head, position, implicit, keep_set, stop_group=None)
    except (_Odd, struct.error, UnicodeError):
        return None
    file_meta = FileMetaDataset(meta)
    dataset = Dataset(elements)
    encoding: Any = "iso8859"
    if 0x00080005 in elements:
        encoding = convert_encodings(convert_raw_data_element(elements[BaseTag(0x00080005)]).value)
    dataset.set_original_encoding(implicit, True, encoding)
    dataset.file_meta = file_meta
    return dataset, end


def _walk(head: bytes, position: int, implicit: bool, keep: frozenset[int] | None,
          stop_group: int | None) -> tuple[dict[BaseTag, RawDataElement], int]:
    """Top-level elements from ``position``; stops at the pixel data or where ``stop_group`` ends."""
    kept: dict[BaseTag, RawDataElement] = {}
    size = len(head)
    previous = -1
    unpack_implicit, unpack_explicit, unpack_u32 = _TAG_LENGTH.unpack_from, _EXPLICIT.unpack_from, _U32.unpack_from
    long_vrs, short_vrs = _LONG_VRS, _SHORT_VRS
    while position < size:
        if position + 8 > size:
            raise _Odd("an element header runs past the bytes")
        if stop_group is not None and head[position] | head[position + 1] << 8 != stop_group:
            return kept, position  # the file meta ends (the dataset may be implicit VR)
        if implicit:
            group, element, length = unpack_implicit(head, position)
            vr_bytes, value_at = None, position + 8
        else:
            group, element, vr_bytes, length = unpack_explicit(head, position)
            if group == 0 and stop_group is None:
                raise MalformedHeader(f"the header holds zeros where elements should be (byte {position})")
            if vr_bytes in long_vrs:
                if position + 12 > size:
                    raise _Odd("an element header runs past the bytes")
                length = unpack_u32(head, position + 8)[0]
                value_at = position + 12
            elif vr_bytes in short_vrs:
                value_at = position + 8
            else:
                raise _Odd("not a VR")
        tag = group << 16 | element
        if group == 0 and stop_group is None:
            raise MalformedHeader(f"the header holds zeros where elements should be (byte {position})")
        if tag <= previous:
            raise _Odd("elements out of order")
        previous = tag
        if group == _PIXEL_GROUP and element in (0x0008, 0x0009, 0x0010):
            return kept, position
        wanted = keep is None or tag in keep
        if length == _UNDEFINED:
            if wanted:
                raise _Odd("a kept element is a sequence (pydicom reads those)")
            # An undefined length is a sequence (or UN holding one, encoded implicit VR).
            position = _skip_sequence(head, value_at, implicit or vr_bytes == b"UN")
            continue
        end = value_at + length
        if end > size:
            raise _Odd("a value runs past the bytes")
        if wanted:
            if vr_bytes == b"SQ":
                raise _Odd("a kept element is a sequence (pydicom reads those)")
            vr = None if vr_bytes is None else vr_bytes.decode("ascii")
            kept[BaseTag(tag)] = RawDataElement(BaseTag(tag), vr, length, head[value_at:end], value_at,
                                                implicit, True, True, False)
        position = end
    if stop_group is not None:
        return kept, position
    return kept, size  # the whole file is in ``head`` and has no pixel data


def _skip_sequence(head: bytes, position: int, implicit: bool) -> int:
    """Position after the sequence delimiter of an undefined-length sequence starting at ``position``."""
    size = len(head)
    while True:
        if position + 8 > size:
            raise _Odd("a sequence runs past the bytes")
        group, element, length = _TAG_LENGTH.unpack_from(head, position)
        tag = group << 16 | element
        position += 8
        if tag == _SEQUENCE_END:
            return position
        if tag != _ITEM:
            raise _Odd("not an item")
        if length == _UNDEFINED:
            position = _skip_item(head, position, implicit)
        else:
            position += length


def _skip_item(head: bytes, position: int, implicit: bool) -> int:
    """Position after the item delimiter of an undefined-length item."""
    size = len(head)
    while True:
        if position + 8 > size:
            raise _Odd("an item runs past the bytes")
        group, element, length = _TAG_LENGTH.unpack_from(head, position)
        tag = group << 16 | element
        if tag == _ITEM_END:
            return position + 8
        if implicit:
            value_at = position + 8
            vr = None
        else:
            _g, _e, vr_bytes, short = _EXPLICIT.unpack_from(head, position)
            if vr_bytes in _LONG_VRS:
                length = _U32.unpack_from(head, position + 8)[0]
                value_at = position + 12
            elif vr_bytes in _SHORT_VRS:
                length, value_at = short, position + 8
            else:
                raise _Odd("not a VR")
            vr = vr_bytes
        if length == _UNDEFINED:
            position = _skip_sequence(head, value_at, implicit or vr == b"UN")
        else:
            position = value_at + length
