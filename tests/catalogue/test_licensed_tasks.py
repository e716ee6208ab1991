"""TotalSegmentator's licensed tasks: installed with the user's licence key by the request TotalSegmentator
itself sends (the oracle: TotalSegmentator 2.18.0's own download code, its ``requests.post`` caught), against
a licence server on 127.0.0.1 that checks the JSON body and answers a zip in TotalSegmentator's layout."""

from __future__ import annotations

import io
import json
import logging
import os
import shutil
import stat
import sys
import zipfile
from pathlib import Path

import pytest
from nnunet_fixture import DATASET_NAME, make_nnunet_result_folder

from medseg.catalogue import licence_key
from medseg.catalogue.entries import load_catalogue
from medseg.catalogue.folders import find_installed, installed_model_path
from medseg.catalogue.install import import_path, install
from medseg.catalogue.licence_key import LICENSED_SPDX, LicenceKeyError
from medseg.cli import main as cli_main
from medseg.errors import DownloadError, LicenceNotAccepted
from medseg.workflows.models import open_model

TASK = "tissue_4_types"  # licensed, one network, no crop: the smallest licensed task to install
MODEL_ID = f"totalsegmentator/{TASK}"
FOLDER = "Dataset485_tissue_4types_1559subj"
KEY = "tsLicence0Key1x9Zq"  # 18 characters, as TotalSegmentator's offline check wants
PATH = "/download_weights"


@pytest.fixture(scope="module")
def task_weights(tmp_path_factory) -> Path:
    """Tiny random weights in TotalSegmentator's layout for tissue_4_types: <weights>/Dataset485_.../<trainer folder>."""
    root = tmp_path_factory.mktemp("licensed-weights")
    names = ["background", *(s.name for s in load_catalogue().get(MODEL_ID).structures)]
    make_nnunet_result_folder(root, spacing_zyx=(1.5, 1.5, 1.5), patch_size=(16, 32, 32), n_stages=3,
                              base_features=4, labels=names, seed=3)
    (root / DATASET_NAME).rename(root / FOLDER)
    return root


@pytest.fixture(scope="module")
def task_zip(task_weights) -> bytes:
    """The dataset folder zipped at the root, as TotalSegmentator's release script and licence server give it."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((task_weights / FOLDER).rglob("*")):
            archive.write(path, path.relative_to(task_weights).as_posix())
    return buffer.getvalue()


@pytest.fixture
def licence_server(server, task_zip, monkeypatch):
    """TotalSegmentator's backend as its client sees it: the zip for the right key and task, else a refusal."""

    def answer(body):
        if not isinstance(body, dict) or body.get("license_number") != KEY:
            return 403, json.dumps({"status": "invalid_license"}).encode(), "application/json"
        if body.get("task") != TASK:
            return 404, json.dumps({"status": "unknown_task"}).encode(), "application/json"
        return 200, task_zip, "application/zip"

    server.post_answers[PATH] = answer
    monkeypatch.setattr(licence_key, "LICENCE_SERVER", server.url + PATH)
    return server


def totalsegmentators_request(monkeypatch, tmp_path, dataset: int) -> dict:
    """The URL, JSON body and task TotalSegmentator 2.18.0 sends for ``dataset`` with licence KEY (its own code)."""
    import requests
    from totalsegmentator import libs

    home = tmp_path / "ts-home"
    home.mkdir(exist_ok=True)
    (home / "config.json").write_text(json.dumps({"license_number": KEY}))
    monkeypatch.setenv("TOTALSEG_HOME_DIR", str(home))
    sent = {}

    class Caught(Exception):
        pass

    def post(url, json=None, **kwargs):  # requests' own keyword
        sent.update(url=url, json=json)
        raise Caught

    monkeypatch.setattr(requests, "post", post)
    with pytest.raises(Caught):
        libs.download_pretrained_weights(dataset)
    monkeypatch.delenv("TOTALSEG_HOME_DIR")
    return sent


def models_root() -> Path:
    return Path(os.environ["MEDSEG_MODELS"])


def nothing_installed() -> bool:
    folder = models_root() / "totalsegmentator" / TASK
    return find_installed(MODEL_ID) is None and not (folder.is_dir() and any(
        p.name.startswith("v-") or p.name == licence_key.KEY_FILE for p in folder.iterdir()))


def posts(server) -> list[dict]:
    return [r for r in server.requests if r.get("method") == "POST"]


def test_a_licensed_task_installs_with_its_key_by_totalsegmentators_request(licence_server, monkeypatch, tmp_path,
                                                                           capsys, caplog):
    caplog.set_level(logging.DEBUG)
    oracle = totalsegmentators_request(monkeypatch, tmp_path, 485)
    assert cli_main(["models", "install", MODEL_ID, "--licence-key", KEY, "--accept-licence"]) == 0
    (request,) = posts(licence_server)
    assert request["json"] == oracle["json"] == {"license_number": KEY, "task": TASK, "version": "2.18.0"}
    assert request["content_type"] == "application/json" and oracle["url"].endswith(PATH)

    opened = open_model(installed_model_path(MODEL_ID))
    assert {v: label.name for v, label in opened.card.labels.items()} == {s.value: s.name for s in load_catalogue().get(MODEL_ID).structures}
    record = find_installed(MODEL_ID)
    assert record.licence["key_given"] is True and record.licence["spdx"] == LICENSED_SPDX

    key_file = record.folder / licence_key.KEY_FILE
    assert key_file.read_text().strip() == KEY
    assert stat.S_IMODE(key_file.stat().st_mode) == 0o600
    # the key is in that file alone: not in the record, the converted model, the output or the log
    for path in models_root().rglob("*"):
        if path.is_file() and path != key_file:
            assert KEY.encode() not in path.read_bytes(), path
    printed = capsys.readouterr()
    assert KEY not in printed.out + printed.err and KEY not in caplog.text

    assert cli_main(["models", "info", MODEL_ID]) == 0
    info = capsys.readouterr().out
    assert f"licence key …{KEY[-4:]}" in info and KEY not in info
    assert cli_main(["models", "info", MODEL_ID, "--json"]) == 0
    assert KEY not in capsys.readouterr().out


def test_without_a_key_the_install_is_refused_and_says_where_to_get_one(licence_server, capsys):
    with pytest.raises(LicenceKeyError) as caught:
        install(MODEL_ID, accept_licence=True)
    text = str(caught.value)
    assert "TotalSegmentator's licensed tasks" in text and "--licence-key" in text
    assert "https://backend.totalsegmentator.com/license-academic/" in text and "jakob.wasserthal@usb.ch" in text
    assert cli_main(["models", "install", MODEL_ID, "--accept-licence"]) == 1
    assert "license-academic" in capsys.readouterr().err
    assert licence_server.requests == [] and nothing_installed()


@pytest.mark.parametrize("key", [KEY[:-1], KEY + "x", KEY[:8] + " " + KEY[9:], "", "   "],
                         ids=["17-characters", "19-characters", "a-space", "empty", "blank"])
def test_a_key_of_the_wrong_shape_is_refused_before_any_download(licence_server, key):
    with pytest.raises(LicenceKeyError, match="licence key|none was given"):
        install(MODEL_ID, accept_licence=True, licence_key=key)
    assert licence_server.requests == [] and nothing_installed()


def test_a_key_the_server_refuses_is_a_clear_error_that_shows_it_masked(licence_server):
    wrong = "x" * 14 + "W7k2"
    with pytest.raises(LicenceKeyError) as caught:
        install(MODEL_ID, accept_licence=True, licence_key=wrong)
    assert "invalid_license" in str(caught.value) and "…W7k2" in str(caught.value) and wrong not in str(caught.value)
    assert posts(licence_server)[0]["json"]["license_number"] == wrong
    assert nothing_installed()


def test_a_refusal_answered_with_status_200_is_not_taken_for_the_weights(licence_server):
    licence_server.post_answers[PATH] = lambda body: (200, b'{"status": "invalid_license"}', "application/json")
    with pytest.raises(LicenceKeyError, match="invalid_license"):
        install(MODEL_ID, accept_licence=True, licence_key=KEY)
    assert nothing_installed() and not list((models_root() / ".downloads").glob("*.part"))


def test_an_interrupted_licensed_download_starts_again_and_installs(licence_server, task_zip):
    licence_server.cut_after[PATH] = len(task_zip) // 2
    with pytest.raises(DownloadError, match="stopped after"):
        install(MODEL_ID, accept_licence=True, licence_key=KEY)
    assert nothing_installed()
    record = install(MODEL_ID, accept_licence=True, licence_key=KEY)
    first, second = posts(licence_server)
    # asked for the rest; the licence server answers the whole zip (200), which replaces the part
    assert first["range"] is None and second["range"] == f"bytes={len(task_zip) // 2}-"
    assert record.sources[0]["size"] == len(task_zip) and KEY not in json.dumps(record.to_json())


def test_a_reinstall_uses_the_key_stored_with_the_model(licence_server):
    install(MODEL_ID, accept_licence=True, licence_key=KEY)
    install(MODEL_ID, accept_licence=True)  # again, without typing the key
    assert [r["json"]["license_number"] for r in posts(licence_server)] == [KEY, KEY]


def test_the_licence_is_still_accepted_before_anything_is_fetched(licence_server):
    with pytest.raises(LicenceNotAccepted, match="needs your acceptance"):
        install(MODEL_ID, licence_key=KEY)
    assert licence_server.requests == [] and nothing_installed()


def test_a_key_for_an_open_task_is_refused(licence_server):
    with pytest.raises(LicenceKeyError, match="needs no licence key"):
        install("totalsegmentator/liver_segments", licence_key=KEY)
    assert licence_server.requests == []


def test_imported_licensed_weights_need_no_key_and_info_says_none_was_given(task_weights, tmp_path, capsys):
    weights = tmp_path / "nnunet" / "results"
    shutil.copytree(task_weights, weights)
    (record,) = import_path(weights, accept_licence=True).installed
    assert record.id == MODEL_ID and record.licence["key_given"] is False
    assert not (record.folder / licence_key.KEY_FILE).exists()
    assert cli_main(["models", "info", MODEL_ID]) == 0
    assert "no licence key was given" in capsys.readouterr().out


def test_the_task_asked_for_is_the_one_totalsegmentator_asks_for(monkeypatch, tmp_path):
    """Every licensed CT task's networks, by the name TotalSegmentator's own download sends."""
    licensed = [e for e in load_catalogue() if e.licence.spdx == LICENSED_SPDX]
    assert len(licensed) >= 10
    for entry in licensed:
        for weight in entry.files:
            oracle = totalsegmentators_request(monkeypatch, tmp_path, weight.dataset)
            assert licence_key.request_body(entry, weight, KEY) == oracle["json"], entry.id


def test_the_key_can_come_from_standard_input(licence_server, monkeypatch):
    monkeypatch.setattr(sys, "stdin", io.StringIO(KEY + "\n"))
    assert cli_main(["models", "install", MODEL_ID, "--licence-key", "-", "--accept-licence"]) == 0
    assert posts(licence_server)[0]["json"]["license_number"] == KEY


def test_a_pack_carries_no_key_and_remove_deletes_it(licence_server, tmp_path):
    from medseg.catalogue.install import remove
    from medseg.catalogue.packs import install_pack, pack

    record = install(MODEL_ID, accept_licence=True, licence_key=KEY)
    packed = pack(MODEL_ID, tmp_path / "tissue.medsegpack")
    with zipfile.ZipFile(packed) as archive:
        assert all(KEY.encode() not in archive.read(name) for name in archive.namelist())
    remove(MODEL_ID)
    assert not (record.folder / licence_key.KEY_FILE).exists() and find_installed(MODEL_ID) is None
    installed = install_pack(packed, accept_licence=True)  # another machine: weights without a key
    assert installed.licence["key_given"] is False and not (installed.folder / licence_key.KEY_FILE).exists()
