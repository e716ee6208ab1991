"""`medseg batch` over a saved PACS query: the series come through the PACS client and its cache."""

from __future__ import annotations

import json

import pydicom
from conftest import DICOM_PORT, OUR_AET, STORAGE_PORT, ct3_files, philips_1mm_files

from medseg.batch.table import read_table
from medseg.cli import main


def test_batch_over_a_saved_query(orthanc, ct_dir, tmp_path, capsys):
    assert main(["pacs", "servers", "--add", "archive", "--host", "127.0.0.1", "--port", str(DICOM_PORT), "--aet",
                 "ORTHANC", "--our-aet", OUR_AET, "--storage-port", str(STORAGE_PORT), "--retrieve", "get"]) == 0
    capsys.readouterr()
    assert main(["pacs", "query", "archive", "--modality", "CT", "--series", "--json"]) == 0
    query = tmp_path / "last-year.json"
    query.write_text(capsys.readouterr().out)
    assert json.loads(query.read_text())["server"] == "archive"  # the saved query names its server

    out, cache = tmp_path / "out", tmp_path / "cache"
    assert main(["batch", str(query), "-o", str(out), "--pacs-cache", str(cache), "--threads", "1", "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert events[-1]["event"] == "done" and events[-1]["counts"] == {"ok": 2}, [e for e in events if e["event"] == "case"]
    expected = {pydicom.dcmread(files[0], stop_before_pixels=True).SeriesInstanceUID: len(files)
                for files in (ct3_files(ct_dir), philips_1mm_files(ct_dir))}
    rows = read_table(out / "results.csv")
    assert {r["series_uid"] for r in rows} == set(expected)
    assert all(r["source"].startswith("pacs:archive/") and r["status"] == "ok" for r in rows)
    for row in rows:  # retrieved whole into the given cache, marked complete
        study_uid = row["source"].split("/")[1]
        folder = cache / study_uid / row["series_uid"]
        assert len(list(folder.glob("*.dcm"))) == expected[row["series_uid"]]
        assert (cache / study_uid / f"{row['series_uid']}.complete.json").is_file()
    # a rerun neither retrieves nor segments again
    assert main(["batch", str(query), "-o", str(out), "--pacs-cache", str(cache), "--json"]) == 0
    started = json.loads(capsys.readouterr().out.splitlines()[0])
    assert started["done_before"] == 2 and started["to_do"] == 0

