"""File > PACS driven with pytest-qt against the real Orthanc: test, query, expand, retrieve, open, send."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
from conftest import copy_files, dimse_server, philips_1mm_files, web_server
from PySide6.QtCore import QStandardPaths, Qt

from medseg.io import load
from medseg.io.pacs import PacsSettings, save_settings


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch, orthanc):
    QStandardPaths.setTestModeEnabled(True)
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow

    monkeypatch.setattr(app_settings, "log_directory", lambda: tmp_path / "logs")
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    app_settings.settings().clear()
    save_settings(PacsSettings(servers=[web_server(orthanc), dimse_server(orthanc, retrieve="move")]))
    main = MainWindow()
    qtbot.addWidget(main)
    main.resize(1400, 820)
    main.show()
    qtbot.waitExposed(main)
    yield main
    main.close()


def _finish(qtbot, dialog, action, name):
    with qtbot.waitSignal(dialog.job_finished, timeout=60_000) as blocker:
        action()
    assert blocker.args == [name, True], dialog.status.text()


@pytest.mark.parametrize("server_row", [0, 1], ids=["dicomweb", "dimse-move"])
def test_query_expand_retrieve_opens_series(qtbot, window, ct_dir, tmp_path, artifacts_dir, server_row):
    philips = pydicom.dcmread(philips_1mm_files(ct_dir)[0], stop_before_pixels=True)
    window.pacs_action.trigger()
    dialog = window.opener.pacs_dialog
    qtbot.waitExposed(dialog)
    dialog.servers.server_list.setCurrentRow(server_row)
    _finish(qtbot, dialog, lambda: qtbot.mouseClick(dialog.servers.test_button, Qt.MouseButton.LeftButton), "echo")
    assert "OK" in dialog.servers.connection_label.text()

    dialog.query_form.fields["modality"].setText("CT")
    _finish(qtbot, dialog, lambda: qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton), "query")
    studies = {dialog.studies.topLevelItem(i).data(0, Qt.ItemDataRole.UserRole).study_uid: dialog.studies.topLevelItem(i)
               for i in range(dialog.studies.topLevelItemCount())}
    assert philips.StudyInstanceUID in studies
    item = studies[philips.StudyInstanceUID]
    _finish(qtbot, dialog, lambda: item.setExpanded(True), "series")
    assert item.childCount() == 1 and item.child(0).text(4) == "16"

    dialog.studies.setCurrentItem(item.child(0))
    _finish(qtbot, dialog, lambda: qtbot.mouseClick(dialog.retrieve_button, Qt.MouseButton.LeftButton), "retrieve")
    qtbot.waitUntil(lambda: window.document.volume is not None and not window.loader.busy, timeout=60_000)
    original = load(copy_files(philips_1mm_files(ct_dir), tmp_path / "original"))
    np.testing.assert_array_equal(window.document.volume.array, original.array)
    assert window.viewer.views["axial"].slice_count == 16
    assert "Retrieved 16 instances" in dialog.status.text()
    dialog.grab().save(str(artifacts_dir / f"pacs_dialog_{'web' if server_row == 0 else 'dimse'}.png"))
    window.grab().save(str(artifacts_dir / f"pacs_series_opened_{'web' if server_row == 0 else 'dimse'}.png"))

    seg = ct_dir / "dcmqi_ct3slice_masks" / "masks" / "liver_SEG.dcm"
    _finish(qtbot, dialog, lambda: dialog.send([str(seg)]), "send")
    assert [r.ok for r in dialog.send_results] == [True] and "stored" in dialog.status.text()


def test_dead_server_gives_a_message_not_a_frozen_window(qtbot, window, orthanc):
    dialog = window.opener.open_pacs()
    dialog.servers.form.set_server(dimse_server(orthanc, port=4299))
    with qtbot.waitSignal(dialog.job_finished, timeout=30_000) as blocker:
        qtbot.mouseClick(dialog.search_button, Qt.MouseButton.LeftButton)
        assert dialog.search_button.isEnabled()  # the GUI thread returned at once
    assert blocker.args == ["query", False]
    assert "nothing is listening on 127.0.0.1:4299" in dialog.status.text()
