"""PACS settings, credentials and cache without a network (the Orthanc tests are in tests/pacs)."""

from __future__ import annotations

import json

import pytest

from medseg.io.pacs import (
    CredentialStoreError,
    PacsError,
    PacsServer,
    PacsSettings,
    QueryFilters,
    SeriesCache,
    credentials_for,
    load_settings,
    save_settings,
    store_secret,
)
from medseg.io.pacs.cache import check_uid

STUDY, SERIES = "1.2.3", "1.2.3.4"


def test_settings_round_trip_without_secrets(tmp_path, monkeypatch):
    import keyring
    from keyring.backends import fail

    monkeypatch.setenv("MEDSEG_CONFIG_DIR", str(tmp_path / "config"))
    web = PacsServer(name="hospital web", protocol="dicomweb", url="https://pacs.example.org/dicom-web",
                     auth="basic", username="dr-who")
    dimse = PacsServer(name="hospital", host="pacs.example.org", port=11112, called_aet="PACS", our_aet="WS1",
                       storage_port=11113, retrieve="move", tls=True, ca_file="/etc/ca.pem")
    settings = PacsSettings(servers=[web, dimse], cache_limit_mb=123)
    path = save_settings(settings)
    assert path == tmp_path / "config" / "pacs.json"
    assert load_settings() == settings
    previous = keyring.get_keyring()
    keyring.set_keyring(fail.Keyring())
    try:
        with pytest.raises(CredentialStoreError, match="no OS keyring is available.*MEDSEG_PACS_PASSWORD"):
            store_secret(web, "s3cret")
        with pytest.raises(CredentialStoreError, match="no OS keyring"):
            credentials_for(web)
        monkeypatch.setenv("MEDSEG_PACS_PASSWORD", "s3cret")
        creds = credentials_for(web)
        assert (creds.username, creds.secret) == ("dr-who", "s3cret") and "s3cret" not in repr(creds)
    finally:
        keyring.set_keyring(previous)
    text = path.read_text()
    assert "s3cret" not in text and "password" not in text.lower()
    assert json.loads(text)["servers"][0]["username"] == "dr-who"


def test_bad_settings_and_records_say_what_is_wrong(tmp_path):
    bad = tmp_path / "pacs.json"
    bad.write_text("{not json")
    with pytest.raises(PacsError, match="cannot read the PACS settings") as info:
        load_settings(bad)
    assert info.value.path == bad
    with pytest.raises(PacsError, match="not a DICOMweb URL"):
        PacsServer(name="w", protocol="dicomweb", url="pacs.example.org")
    with pytest.raises(PacsError, match="not a valid AE title"):
        PacsServer(name="d", host="h", called_aet="A" * 17)
    with pytest.raises(PacsError, match="not a TCP port"):
        PacsServer(name="d", host="h", called_aet="PACS", port=70000)
    with pytest.raises(PacsError, match="no PACS server named 'x'"):
        PacsSettings().server("x")
    with pytest.raises(PacsError, match="not a date"):
        QueryFilters(birth_date="1.2.1970")
    with pytest.raises(PacsError, match="range .* is empty"):
        QueryFilters(date_from="20240201", date_to="20240101")
    assert QueryFilters(date_from="20240101").study_date == "20240101-"


def test_cache_marks_complete_only_with_every_instance(tmp_path):
    cache = SeriesCache(tmp_path)
    cache.prepare(STUDY, SERIES)
    cache.write_instance(STUDY, SERIES, "1.2.3.4.1", b"a" * 10)
    with pytest.raises(PacsError, match="1 of 2 instances are missing"):
        cache.mark_complete(STUDY, SERIES, ["1.2.3.4.1", "1.2.3.4.2"], "pacs")
    assert not cache.is_complete(STUDY, SERIES)
    cache.write_instance(STUDY, SERIES, "1.2.3.4.2", b"b" * 10)
    cache.mark_complete(STUDY, SERIES, ["1.2.3.4.1", "1.2.3.4.2"], "pacs")
    assert cache.is_complete(STUDY, SERIES)
    (cache.folder(STUDY, SERIES) / "1.2.3.4.2.dcm").write_bytes(b"")  # what a power cut can leave
    assert not cache.is_complete(STUDY, SERIES)
    assert not cache.usable_instance(STUDY, SERIES, "1.2.3.4.2")  # and the resume fetches it again
    assert cache.present(STUDY, SERIES) == {"1.2.3.4.1"}
    for hostile in ("../etc", "1.2/3", "", "1..2"):
        with pytest.raises(PacsError, match="not a valid DICOM UID"):
            check_uid(hostile, "Series Instance UID")


def test_cache_limit_evicts_oldest_complete_series_and_clear_deletes_all(tmp_path):
    import os

    cache = SeriesCache(tmp_path, limit_mb=1)
    for index, series in enumerate(("1.1", "1.2", "1.3")):
        cache.prepare(STUDY, series)
        cache.write_instance(STUDY, series, f"{series}.1", b"x" * 400_000)
        marker = cache.mark_complete(STUDY, series, [f"{series}.1"], "pacs")
        os.utime(marker, (1000 + index, 1000 + index))
    removed = cache.enforce_limit(keep=cache.folder(STUDY, "1.3"))
    assert removed == [cache.folder(STUDY, "1.1")]
    assert [cache.is_complete(STUDY, s) for s in ("1.1", "1.2", "1.3")] == [False, True, True]
    cache.prepare(STUDY, "1.4")  # a partial series is the user's too
    cache.write_instance(STUDY, "1.4", "1.4.1", b"y")
    assert cache.clear() >= 800_000
    assert cache.size_bytes() == 0 and list(tmp_path.iterdir()) == []
