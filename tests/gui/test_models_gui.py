"""Segmentation ▸ Models… and the Segment panel's model chooser, driven with pytest-qt against a loopback
HTTP server (127.0.0.1, started by the test) serving a small real nnU-Net model."""

from __future__ import annotations

import hashlib
import io
import json
import sys
import zipfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "catalogue"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from loopback_server import LoopbackServer
from nnunet_fixture import DATASET_NAME, make_nnunet_result_folder

from medseg.catalogue.folders import find_installed, installed_model_path
from medseg.gui.segment.model_chooser import FOLDER, MANAGE, install_item, use_item
from medseg.gui.segment.models_dialog import ModelsDialog

OPEN_ID, LICENSED_ID = "test/tiny", "test/licensed"


@pytest.fixture(scope="module")
def weights_root(tmp_path_factory) -> Path:
    """A folder laid out as TotalSegmentator keeps its weights (Dataset901_.../<trainer folder>/...)."""
    root = tmp_path_factory.mktemp("weights")
    make_nnunet_result_folder(root, base_features=8, n_stages=3, patch_size=(16, 32, 32), seed=1)
    return root


@pytest.fixture(scope="module")
def model_zip(weights_root) -> bytes:
    root = weights_root
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted((root / DATASET_NAME).rglob("*")):
            archive.write(path, path.relative_to(root).as_posix())
    return buffer.getvalue()


def _entry(model_id: str, title: str, url: str, payload: bytes, licensed: bool) -> dict:
    return {
        "id": model_id, "title": title, "publisher": "tests", "version": "1.0", "modality": "CT",
        "structures": [{"value": 1, "name": "liver", "group": "organs"}, {"value": 2, "name": "spleen", "group": "organs"}],
        "configurations": [{"name": "3mm", "spacing_mm": [1.5, 1.5, 3.0], "datasets": [901]}],
        "files": [{"dataset": 901, "name": "tiny.zip", "urls": [url], "size": len(payload),
                   "sha256": hashlib.sha256(payload).hexdigest()}],
        "licence": {"spdx": "LicenseRef-Test" if licensed else "Apache-2.0", "url": "https://example.invalid/terms",
                    "commercial_use": not licensed, "acceptance_required": licensed,
                    "terms": "Non-commercial research use only." if licensed else "Apache License 2.0."},
        "citation": "A test model.", "medseg_support": {"status": "networks", "note": ""}}


@pytest.fixture
def server(tmp_path, monkeypatch, model_zip):
    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    for variable in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY"):
        monkeypatch.delenv(variable, raising=False)
    with LoopbackServer() as running:
        running.files["/tiny.zip"] = model_zip
        catalogue = {"format": "medseg-model-catalogue", "format_version": 1, "models": [
            _entry(OPEN_ID, "Tiny liver and spleen", f"{running.url}/tiny.zip", model_zip, False),
            _entry(LICENSED_ID, "Tiny licensed model", f"{running.url}/tiny.zip", model_zip, True)]}
        path = tmp_path / "catalogue.json"
        path.write_text(json.dumps(catalogue))
        monkeypatch.setenv("MEDSEG_CATALOGUE", str(path))
        yield running


def _row_state(dialog: ModelsDialog, model_id: str) -> str:
    for row in range(dialog.table.rowCount()):
        if dialog.table.item(row, 0).text() == model_id:
            return dialog.table.item(row, 1).text()
    raise AssertionError(f"{model_id} is not listed")


def test_licence_is_shown_and_must_be_accepted(qtbot, server, artifacts_dir):
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.search.setText("spleen")  # structures are searchable
    assert dialog.table.rowCount() == 2
    assert dialog.select(LICENSED_ID)
    assert "Non-commercial research use only." in dialog.details.toPlainText()
    dialog.install_button.click()
    box = dialog.licence_box
    qtbot.waitExposed(box)
    assert box.terms.toPlainText() == "Non-commercial research use only."
    box.grab().save(str(artifacts_dir / "gui_models_licence.png"))
    box.reject()
    assert "not installed: its licence was not accepted" in dialog.status.text()
    assert server.requests == [] and find_installed(LICENSED_ID) is None
    dialog.install_button.click()
    with qtbot.waitSignal(dialog.installed, timeout=120_000) as blocker:
        dialog.licence_box.accept_button.click()
    assert blocker.args == [LICENSED_ID]
    assert _row_state(dialog, LICENSED_ID) == "installed 1.0"
    assert find_installed(LICENSED_ID).licence["accepted_at"]
    dialog.grab().save(str(artifacts_dir / "gui_models_dialog.png"))


def test_cancel_stops_the_download_and_installs_nothing(qtbot, server, model_zip):
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    server.hold_after["/tiny.zip"] = len(model_zip) // 2
    assert dialog.select(OPEN_ID)
    dialog.install_button.click()
    assert dialog.cancel_button.isVisible() and dialog.progress.isVisible()
    assert server.bytes_sent.wait(60)
    qtbot.waitUntil(lambda: dialog.progress.value() > 0, timeout=60_000)  # progress reached the window
    with qtbot.waitSignal(dialog.job.finished_error, timeout=60_000):
        dialog.cancel_button.click()
        server.release.set()  # the next bytes arrive; the cancel is seen between blocks
    assert dialog.status.text().startswith("Cancelled: nothing was installed")
    assert find_installed(OPEN_ID) is None and _row_state(dialog, OPEN_ID) == "not installed"
    assert not dialog.cancel_button.isVisible()


def test_segment_panel_chooser_installs_and_uses_a_model(server, window, qtbot, artifacts_dir):
    chooser = window.segment_panel.model_chooser
    items = [chooser.itemText(i) for i in range(chooser.count())]
    assert items[0] == "Built-in starter: body, lungs, bones" and chooser.currentIndex() == 0
    assert any(text.startswith("Install Tiny liver and spleen (2 structures") for text in items)
    assert chooser.findData(FOLDER) > 0 and chooser.findData(MANAGE) > 0
    window.segmenting.open_models_dialog()  # made on first use; the chooser's item opens it and starts the install
    with qtbot.waitSignal(window.segmenting.models_dialog.installed, timeout=120_000):
        assert chooser.choose_item(install_item(OPEN_ID))
    qtbot.waitUntil(lambda: chooser.currentData() == use_item(OPEN_ID), timeout=10_000)
    assert window.segmenting.model_path() == str(installed_model_path(OPEN_ID))
    assert chooser.currentText() == "Tiny liver and spleen — installed"
    window.segmenting.models_dialog.close()
    assert window.segment_panel.model_label.text() == f"Model: {OPEN_ID}"
    window.segment_panel.grab().save(str(artifacts_dir / "gui_segment_panel_model_chooser.png"))
    chooser.showPopup()
    qtbot.waitUntil(lambda: chooser.view().isVisible())
    chooser.view().window().grab().save(str(artifacts_dir / "gui_segment_panel_model_list.png"))
    chooser.hidePopup()
    assert chooser.choose_item("builtin:")
    assert window.segmenting.model_path() is None



def test_importing_a_folder_with_a_licensed_model_asks_then_installs(qtbot, server, weights_root):
    dialog = ModelsDialog()
    qtbot.addWidget(dialog)
    dialog.show()
    dialog.import_folder(weights_root)  # the folder completes both test models; one is licensed
    qtbot.waitUntil(lambda: dialog.licence_box is not None and dialog.licence_box.isVisible(), timeout=60_000)
    assert find_installed(LICENSED_ID) is None and find_installed(OPEN_ID) is None  # refused before any install
    assert dialog.licence_box.terms.toPlainText() == "Non-commercial research use only."
    with qtbot.waitSignal(dialog.installed, timeout=120_000):
        dialog.licence_box.accept_button.click()
    assert find_installed(LICENSED_ID).licence["accepted_at"] and find_installed(OPEN_ID) is not None
    assert dialog.status.text() == f"Installed {OPEN_ID}, {LICENSED_ID}."  # catalogue order
    assert server.requests == []  # a folder import downloads nothing


def test_a_model_installed_from_the_command_line_is_listed_as_installed_with_its_size_on_disk(
        server, window, qtbot, artifacts_dir):
    """Issue 52: the Segment list offered "Install …" for a model installed with `medseg models install` while
    the window was open, until Models… was opened; the Models dialog's Size said "told by the server" for an
    installed model instead of what it takes on disk."""
    import os
    import subprocess

    from medseg.catalogue.entries import load_catalogue

    chooser = window.segment_panel.model_chooser
    title = "Tiny liver and spleen"
    assert any(chooser.itemText(i).startswith(f"Install {title}") for i in range(chooser.count()))
    done = subprocess.run([sys.executable, "-m", "medseg", "models", "install", OPEN_ID], capture_output=True,
                          text=True, timeout=600, cwd=Path(__file__).resolve().parents[2], env=dict(os.environ))
    assert done.returncode == 0, done.stderr[-3000:]
    assert find_installed(OPEN_ID) is not None
    chooser.showPopup()  # the user opens the list
    qtbot.waitUntil(lambda: chooser.view().isVisible())
    items = [chooser.itemText(i) for i in range(chooser.count())]
    chooser.view().window().grab().save(str(artifacts_dir / "issue52_model_list_after_cli_install.png"))
    chooser.hidePopup()
    assert f"{title} — installed" in items and not any(text.startswith(f"Install {title}") for text in items)
    assert chooser.choose_item(use_item(OPEN_ID))
    assert window.segmenting.model_path() == str(installed_model_path(OPEN_ID))

    window.segmenting.open_models_dialog()
    dialog = window.segmenting.models_dialog
    folder = find_installed(OPEN_ID).version_folder
    on_disk = sum(os.path.getsize(os.path.join(root, name)) for root, _dirs, names in os.walk(folder)
                  for name in names)
    sizes = {dialog.table.item(row, 0).text(): dialog.table.item(row, 3).text() for row in range(dialog.table.rowCount())}
    assert 2**10 < on_disk < 2**20  # the tiny test model: told in kB
    assert sizes[OPEN_ID] == f"{round(on_disk / 2**10)} kB on disk"
    entry = load_catalogue().get(LICENSED_ID)
    assert entry.size < 2**20 and sizes[LICENSED_ID] == f"{round(entry.size / 2**10)} kB"  # the download's size
    dialog.grab().save(str(artifacts_dir / "issue52_models_dialog_size_on_disk.png"))
    dialog.close()
