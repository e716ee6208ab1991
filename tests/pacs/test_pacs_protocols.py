"""medseg.io.pacs against a real Orthanc, by DICOMweb and by DIMSE: echo, query, retrieve, send.

The oracle for queries is the DICOM headers of the files loaded into Orthanc (read with
pydicom); for retrievals, the same series loaded from ../shared/data with medseg.io; for
sends, Orthanc's own REST API and the original file's bytes.
"""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
from conftest import copy_files, ct3_files, dimse_server, philips_1mm_files, web_server

from medseg.io import load
from medseg.io.pacs import (
    QueryFilters,
    SeriesCache,
    echo,
    list_instances,
    query_series,
    query_studies,
    retrieve_series,
    send_files,
)


@pytest.fixture(scope="module")
def headers(ct_dir):
    ct3 = pydicom.dcmread(ct3_files(ct_dir)[0], stop_before_pixels=True)
    philips = pydicom.dcmread(philips_1mm_files(ct_dir)[0], stop_before_pixels=True)
    return {"ct3": ct3, "philips": philips}


@pytest.fixture(scope="module")
def originals(ct_dir, tmp_path_factory):
    folder = tmp_path_factory.mktemp("originals")
    return {"ct3": load(copy_files(ct3_files(ct_dir), folder / "ct3")),
            "philips": load(copy_files(philips_1mm_files(ct_dir), folder / "philips"))}


SERVERS = {"dicomweb": web_server, "dimse": dimse_server}


@pytest.mark.parametrize("protocol", SERVERS)
def test_echo(orthanc, protocol):
    answer = echo(SERVERS[protocol](orthanc))
    assert ("QIDO-RS OK" if protocol == "dicomweb" else "C-ECHO OK") in answer


@pytest.mark.parametrize("protocol", SERVERS)
def test_query_filters_and_pages(orthanc, headers, protocol):
    server = SERVERS[protocol](orthanc)
    ct3, philips = headers["ct3"], headers["philips"]
    everything = query_studies(server)
    assert {s.study_uid for s in everything.studies} == {ct3.StudyInstanceUID, philips.StudyInstanceUID}
    assert everything.more is False

    by_id = query_studies(server, QueryFilters(patient_id=ct3.PatientID)).studies
    assert [s.study_uid for s in by_id] == [ct3.StudyInstanceUID]
    assert by_id[0].modalities == ("CT",) and by_id[0].accession_number == ct3.AccessionNumber
    assert by_id[0].instance_count == 3
    by_name = query_studies(server, QueryFilters(patient_name=str(philips.PatientName)[:3] + "*")).studies
    assert [s.study_uid for s in by_name] == [philips.StudyInstanceUID]
    in_range = query_studies(server, QueryFilters(date_from=philips.StudyDate, date_to=philips.StudyDate)).studies
    assert [s.study_uid for s in in_range] == [philips.StudyInstanceUID]
    by_accession = query_studies(server, QueryFilters(accession_number=ct3.AccessionNumber)).studies
    assert [s.study_uid for s in by_accession] == [ct3.StudyInstanceUID]
    assert query_studies(server, QueryFilters(modality="MR")).studies == []
    assert query_studies(server, QueryFilters(patient_id="NO-SUCH-PATIENT")).studies == []

    first = query_studies(server, limit=1, offset=0)
    second = query_studies(server, limit=1, offset=1)
    assert first.more is True and second.more is False
    assert {first.studies[0].study_uid, second.studies[0].study_uid} == {ct3.StudyInstanceUID, philips.StudyInstanceUID}

    series = query_series(server, philips.StudyInstanceUID)
    assert [(s.series_uid, s.modality, s.instance_count) for s in series] == [(philips.SeriesInstanceUID, "CT", 16)]


@pytest.mark.parametrize("method", ["wado", "get", "move"])
def test_retrieved_voxels_equal_the_originals(orthanc, headers, originals, tmp_path, method):
    server = web_server(orthanc) if method == "wado" else dimse_server(orthanc)
    cache = SeriesCache(tmp_path / "cache")
    for key in ("ct3", "philips"):
        header = headers[key]
        seen = []
        result = retrieve_series(server, header.StudyInstanceUID, header.SeriesInstanceUID, cache, method=method,
                                 progress=seen.append)
        assert result.complete and result.received == result.expected == originals[key].shape_zyx[0]
        assert cache.is_complete(header.StudyInstanceUID, header.SeriesInstanceUID)
        assert seen[-1].fraction == 1.0
        retrieved = load(result.folder)
        np.testing.assert_array_equal(retrieved.array, originals[key].array)
        assert retrieved.spacing_mm == pytest.approx(originals[key].spacing_mm)
        assert retrieved.origin_mm == pytest.approx(originals[key].origin_mm)
    again = retrieve_series(server, header.StudyInstanceUID, header.SeriesInstanceUID, cache, method=method)
    assert again.complete and again.received == 0 and again.already_cached == 16


def _seg_path(ct_dir):
    return ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"


@pytest.mark.parametrize("protocol", SERVERS)
def test_seg_sent_is_listed_and_retrieves_byte_identical(orthanc, ct_dir, tmp_path, protocol):
    seg_path = _seg_path(ct_dir)
    seg = pydicom.dcmread(seg_path, stop_before_pixels=True)
    existing = orthanc.find_instance(seg.SOPInstanceUID)
    if existing:  # the other protocol's run sent it: start from a PACS without it
        orthanc.rest("DELETE", f"/instances/{existing}")
    server = SERVERS[protocol](orthanc)
    results = send_files(server, [seg_path])
    assert [(r.sop_instance_uid, r.ok) for r in results] == [(seg.SOPInstanceUID, True)]

    original = seg_path.read_bytes()
    orthanc_id = orthanc.find_instance(seg.SOPInstanceUID)
    assert orthanc_id is not None
    stored = orthanc.instance_file(orthanc_id)
    if protocol == "dicomweb":  # STOW-RS carries the file itself: Orthanc keeps it byte for byte
        assert stored == original
    else:  # C-STORE carries the data set, which Orthanc's DCMTK re-encodes: same elements and values
        assert pydicom.dcmread(pydicom.filebase.DicomBytesIO(stored)) == pydicom.dcmread(seg_path)
    assert seg.SOPInstanceUID in list_instances(server, seg.StudyInstanceUID, seg.SeriesInstanceUID)
    listed = {s.series_uid: s.modality for s in query_series(server, seg.StudyInstanceUID)}
    assert listed[seg.SeriesInstanceUID] == "SEG"

    cache = SeriesCache(tmp_path / "cache")
    result = retrieve_series(server, seg.StudyInstanceUID, seg.SeriesInstanceUID, cache)
    retrieved = (tmp_path / "cache" / seg.StudyInstanceUID / seg.SeriesInstanceUID / f"{seg.SOPInstanceUID}.dcm")
    assert result.complete and retrieved.is_file()
    if protocol == "dicomweb":  # WADO-RS returns the stored file as is
        assert retrieved.read_bytes() == original
    else:  # C-GET returns the stored data set; each side writes its own file meta group
        assert _body(retrieved.read_bytes()) == _body(stored)


def _body(data: bytes) -> bytes:
    """The data set after the preamble, "DICM" and the file meta group (its length is in 0002,0000)."""
    assert data[128:132] == b"DICM"
    meta_length = int.from_bytes(data[140:144], "little")
    return data[144 + meta_length:]
