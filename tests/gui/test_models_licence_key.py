"""The Models dialog's licence key field: shown for TotalSegmentator's licensed tasks, checked before the licence
or any download, sent to a licence server on 127.0.0.1 (started by the test) that checks TotalSegmentator's
JSON body and answers a zip in its layout."""

from __future__ import annotations

import io
import json
import stat
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalogue"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from loopback_server import LoopbackServer
from nnunet_fixture import DATASET_NAME, make_nnunet_result_folder

from medseg.catalogue import licence_key
from medseg.catalogue.entries import load_catalogue
from medseg.catalogue.folders import find_installed
from medseg.gui.segment.models_dialog import ModelsDialog

TASK = "tissue_4_types"
MODEL_ID = f"totalsegmentator/{TASK}"
FOLDER = "Dataset485_tissue_4types_1559subj"
KEY = "guiLicenceKey0x7Rq"  # 18 characters


@pytest.fixture(scope="module")
def task_zip(tmp_path_factory) -> bytes:
    root = tmp_path_factory.mktemp("licensed")
    names = ["background", *(s.name for s in load_catalogue().get(MODEL_ID).structures)]
    make_nnunet_result_folder(root, spacing_zyx=(1.5, 1.5, 1.5), patch_size=(16, 32, 32), n_stages=3,
                              base_features=4, labels=names, seed=7)
    (root / DATASET_NAME).rename(root / FOLDER)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((root / FOLDER).rglob("*")):
            archive.write(path, path.relative_to(root).as_posix())
    return buffer.getvalue()


@pytest.fixture
def licence_server(tmp_path, monkeypatch, task_zip):
    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    monkeypatch.delenv("MEDSEG_CATALOGUE", raising=False)
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    with LoopbackServer() as running:
        def answer(body):
            if body == {"license_number": KEY, "task": TASK, "version": "2.18.0"}:
                return 200, task_zip, "application/zip"
            return 403, json.dumps({"status": "invalid_license"}).encode(), "application/json"

        running.post_answers["/download_weights"] = answer
        monkeypatch.setattr(licence_key, "LICENCE_SERVER", running.url + "/download_weights")
        yield running


def test_the_key_field_installs_a_licensed_task(qtbot, licence_server, artifacts_dir):
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.select("totalsegmentator/liver_segments")  # an open task: no key asked
    assert not dialog.key_field.isVisible()
    assert dialog.select(MODEL_ID)
    assert dialog.key_field.isVisible() and dialog.install_button.isEnabled()
    assert dialog.key_field.echoMode() == dialog.key_field.EchoMode.Password

    dialog.install_button.click()  # no key: refused with where to get a licence, nothing shown or fetched
    assert "license-academic" in dialog.status.text() and dialog.licence_box is None
    dialog.key_field.setText(KEY[:-2])
    dialog.install_button.click()
    assert "has 16 characters" in dialog.status.text() and dialog.licence_box is None
    assert licence_server.requests == []

    dialog.key_field.setText(KEY)
    dialog.install_button.click()
    qtbot.waitExposed(dialog.licence_box)
    assert licence_server.requests == []  # the licence is accepted before anything is fetched
    with qtbot.waitSignal(dialog.installed, timeout=120_000) as blocker:
        dialog.licence_box.accept_button.click()
    assert blocker.args == [MODEL_ID]
    (request,) = licence_server.requests
    assert request["json"] == {"license_number": KEY, "task": TASK, "version": "2.18.0"}
    record = find_installed(MODEL_ID)
    key_file = record.folder / licence_key.KEY_FILE
    assert key_file.read_text().strip() == KEY and stat.S_IMODE(key_file.stat().st_mode) == 0o600
    assert dialog.key_field.text() == "" and KEY not in dialog.status.text()
    assert f"…{KEY[-4:]}" in dialog.key_field.toolTip() and KEY not in dialog.key_field.toolTip()
    dialog.grab().save(str(artifacts_dir / "gui_models_licence_key.png"))


def test_a_key_the_server_refuses_is_shown_masked_and_nothing_is_installed(qtbot, licence_server):
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    assert dialog.select(MODEL_ID)
    wrong = "w" * 14 + "Zz99"
    dialog.key_field.setText(wrong)
    dialog.install_button.click()
    qtbot.waitExposed(dialog.licence_box)
    dialog.licence_box.accept_button.click()
    qtbot.waitUntil(lambda: dialog.job is None and "Not installed" in dialog.status.text(), timeout=60_000)
    assert "invalid_license" in dialog.status.text() and "…Zz99" in dialog.status.text()
    assert wrong not in dialog.status.text() and find_installed(MODEL_ID) is None
