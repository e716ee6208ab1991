"""The scan's fast header walk gives pydicom's own answer, or declines (then pydicom parses).

Oracle: ``pydicom.dcmread(stop_before_pixels=True, specific_tags=...)`` on every DICOM
file in shared/data, and on cut-off copies of them.
"""

from __future__ import annotations

import io
import warnings

import pydicom
import pytest
from pydicom.filereader import data_element_generator

from medseg.io.dicom_file_header import HEADER_BYTES, SCAN_KEYWORDS, SCAN_TAGS
from medseg.io.dicom_walk import walk_header

PIXEL_TAGS = (0x7FE00008, 0x7FE00009, 0x7FE00010)  # float, double, and integer pixel data
NOT_DICOM = {".txt", ".nrrd", ".gz", ".md", ".csv", ".nii", ".json"}


@pytest.fixture(scope="module")
def dicom_files(ct_dir):
    files = []
    for path in sorted(ct_dir.rglob("*")):
        if path.is_file() and path.suffix.lower() not in NOT_DICOM:
            with warnings.catch_warnings():  # every file of the data that is not named as another format is DICOM:
                warnings.simplefilter("ignore")  # one pydicom cannot read fails here, naming it (no file is passed over)
                reference = pydicom.dcmread(str(path), stop_before_pixels=True, specific_tags=SCAN_KEYWORDS)
            files.append((path, reference))
    return files


def _same(walked, reference) -> None:
    assert sorted(e.keyword for e in walked) == sorted(e.keyword for e in reference)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for element in reference:
            assert str(walked[element.tag].value) == str(element.value), element.keyword
    assert str(walked.file_meta.TransferSyntaxUID) == str(reference.file_meta.TransferSyntaxUID)


def test_walk_matches_pydicom_on_every_file(dicom_files):
    walked = 0
    for path, reference in dicom_files:
        head = path.read_bytes()[:HEADER_BYTES]
        result = walk_header(head, SCAN_TAGS)
        if result is None:
            continue
        walked += 1
        dataset, pixel_at = result
        _same(dataset, reference)
        # It stopped exactly where pydicom's stop_before_pixels stops.
        with open(path, "rb") as fp:
            pydicom.dcmread(fp, stop_before_pixels=True)
            assert pixel_at == fp.tell(), path.name
    # Implicit and explicit VR, native and encapsulated: nearly every file takes the fast path.
    assert walked >= 0.9 * len(dicom_files) and len(dicom_files) >= 100


def test_walk_declines_what_it_does_not_read(dicom_files):
    kinds = {str(reference.file_meta.TransferSyntaxUID): path for path, reference in dicom_files}
    for syntax in ("1.2.840.10008.1.2.2", "1.2.840.10008.1.2.1.99"):  # big endian, deflated
        assert walk_header(kinds[syntax].read_bytes()[:HEADER_BYTES], SCAN_TAGS) is None
    enhanced = next(p for p, r in dicom_files if r.get("NumberOfFrames") not in (None, "", 1, "1"))
    assert walk_header(enhanced.read_bytes()[:HEADER_BYTES], SCAN_TAGS) is None  # functional groups: pydicom


def _element_starts(data: bytes) -> list[int]:
    """Where each top-level element of the data set starts, by pydicom's own element reader, and
    where pydicom's stop_before_pixels stops last."""
    reader = io.BytesIO(data)
    meta = pydicom.dcmread(reader, stop_before_pixels=True).file_meta
    pixel_at = reader.tell()
    implicit = meta.TransferSyntaxUID == pydicom.uid.ImplicitVRLittleEndian
    stream = io.BytesIO(data)
    stream.seek(132 + 12 + int(meta.FileMetaInformationGroupLength))  # (0002,0000) is a 12-byte explicit UL
    starts = [stream.tell()]
    for _ in data_element_generator(stream, implicit, True, stop_when=lambda tag, vr, length: tag in PIXEL_TAGS):
        starts.append(stream.tell())  # the reader is at the end of the element it yielded
    assert starts[-1] == pixel_at
    return starts


def test_cut_off_headers_are_declined_or_read_to_their_end(dicom_files):
    """A head cut between two elements reads as a file that ends there (pydicom reads the same);
    cut inside an element (or a sequence) it is declined, never passed off as complete."""
    boundaries = inside = 0
    for path, _ in dicom_files[::7]:
        data = path.read_bytes()
        full = walk_header(data[:HEADER_BYTES], SCAN_TAGS)
        if full is None or full[1] == len(data[:HEADER_BYTES]):
            continue  # not walked (declined whole), or no pixel data within the head
        starts = _element_starts(data[:HEADER_BYTES])
        assert starts[-1] == full[1]  # the walk stops where pydicom's stop_before_pixels stops
        for cut in sorted({starts[1], starts[len(starts) // 2], starts[-1]}):
            result = walk_header(data[:cut], SCAN_TAGS)
            assert result is not None and result[1] == cut, (path.name, cut)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                reference = pydicom.dcmread(io.BytesIO(data[:cut]), stop_before_pixels=True,
                                            specific_tags=SCAN_KEYWORDS)
            _same(result[0], reference)
            boundaries += 1
        for start, following in zip(starts[1:4], starts[2:5]):
            for cut in (start + 2, (start + following) // 2 + 1, following - 1):  # inside the element
                if start < cut < following:
                    assert walk_header(data[:cut], SCAN_TAGS) is None, (path.name, cut)
                    inside += 1
        assert walk_header(data[:131], SCAN_TAGS) is None  # not even the preamble
    assert boundaries >= 10 and inside >= 30  # both kinds of cut were tried
