"""`medseg pacs` against a real Orthanc: saved servers and ad-hoc ones, both protocols."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pydicom
from conftest import DICOM_PORT, OUR_AET, STORAGE_PORT, copy_files, ct3_files

from medseg.cli import main
from medseg.io import load


def _run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_servers_echo_query_get_send(orthanc, ct_dir, tmp_path, capsys, monkeypatch, memory_keyring):
    ct3 = pydicom.dcmread(ct3_files(ct_dir)[0], stop_before_pixels=True)
    code, out, _ = _run(capsys, "pacs", "servers", "--add", "web", "--url", orthanc.dicomweb_url)
    assert code == 0 and "saved web (DICOMweb" in out
    code, out, _ = _run(capsys, "pacs", "servers", "--add", "dimse", "--host", "127.0.0.1", "--port", str(DICOM_PORT),
                        "--aet", "ORTHANC", "--our-aet", OUR_AET, "--storage-port", str(STORAGE_PORT),
                        "--retrieve", "move")
    assert code == 0
    code, out, _ = _run(capsys, "pacs", "servers", "--json")
    assert [(s["name"], s["protocol"], s["retrieve"]) for s in json.loads(out)] == [
        ("web", "dicomweb", "get"), ("dimse", "dimse", "move")]

    assert _run(capsys, "pacs", "echo", "dimse")[1].startswith("C-ECHO OK")
    assert _run(capsys, "pacs", "echo", "web")[1].startswith("QIDO-RS OK")

    code, out, _ = _run(capsys, "pacs", "query", "web", "--patient-id", ct3.PatientID, "--series", "--json")
    answer = json.loads(out)
    assert code == 0 and [s["study_uid"] for s in answer["studies"]] == [ct3.StudyInstanceUID]
    assert [x["series_uid"] for x in answer["studies"][0]["series"]] == [ct3.SeriesInstanceUID]

    original = load(copy_files(ct3_files(ct_dir), tmp_path / "original"))
    for name in ("web", "dimse"):  # C-MOVE for the saved DIMSE server
        out_dir = tmp_path / f"out-{name}"
        code, out, _ = _run(capsys, "pacs", "get", name, ct3.StudyInstanceUID, "-o", str(out_dir), "--quiet")
        assert code == 0 and "3 instances (3 retrieved, 0 already here" in out
        retrieved = load(out_dir / ct3.StudyInstanceUID / ct3.SeriesInstanceUID)
        np.testing.assert_array_equal(retrieved.array, original.array)

    seg = ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"
    code, out, _ = _run(capsys, "pacs", "send", "--host", "127.0.0.1", "--port", str(DICOM_PORT), "--aet", "ORTHANC",
                        "--our-aet", OUR_AET, str(seg), "--json")
    assert code == 0 and [r["ok"] for r in json.loads(out)] == [True]
    assert orthanc.find_instance(pydicom.dcmread(seg, stop_before_pixels=True).SOPInstanceUID)

    code, _, err = _run(capsys, "pacs", "echo", "--host", "127.0.0.1", "--port", "4299", "--aet", "ORTHANC")
    assert code == 1 and "nothing is listening on 127.0.0.1:4299" in err
    code, _, err = _run(capsys, "pacs", "echo", "nosuch")
    assert code == 1 and "no PACS server named 'nosuch'" in err

    # a real process: what a user types
    result = subprocess.run([sys.executable, "-m", "medseg", "pacs", "query", "dimse", "--modality", "CT", "--json"],
                            capture_output=True, text=True, timeout=120, env=os.environ.copy())
    assert result.returncode == 0, result.stderr
    assert ct3.StudyInstanceUID in {s["study_uid"] for s in json.loads(result.stdout)["studies"]}
