"""Segmentation ▸ Segment: the built-in starter model runs in a worker and its masks are shown."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtWidgets import QFileDialog

from medseg.errors import Cancelled
from medseg.model.package import load_package, starter_model_path
from medseg.model.rule_labels import rule_label_map


@pytest.fixture
def chest(driver, ct_dir):
    return driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")  # 512 x 512 x 48, 5 mm


def _table(window) -> dict[str, tuple[str, float]]:
    table = window.overlay_panel.table
    return {table.item(row, 2).text(): (table.item(row, 1).text(), float(table.item(row, 3).text()))
            for row in range(table.rowCount())}


def test_segment_shows_the_starter_masks_with_volumes(window, chest, qtbot, artifacts_dir):
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.segment_action.trigger()
        assert window.cancel_button.isVisible()  # it runs in the background, cancellable
    result = blocker.args[0]
    doc = window.document
    starter = load_package(starter_model_path())
    assert result.model_name == starter.name
    assert np.array_equal(doc.label_map.array, result.label_map.array) and doc.label_map.same_grid(chest)
    assert doc.history.depth == 1  # one undoable step
    assert {entry.name for entry in doc.labels.values()} == {"body", "lungs", "bones"}
    for value, entry in doc.labels.items():
        assert entry.color == starter.colors[value]
    # The table's ml column is voxel count x voxel volume, as the model reported it.
    rows = _table(window)
    voxel_ml = chest.voxel_volume_ml
    for name, (value, ml) in rows.items():
        assert ml == pytest.approx(np.count_nonzero(doc.label_map.array == int(value)) * voxel_ml, abs=0.05)
        assert ml == pytest.approx(result.volumes_ml[name], abs=0.05)
    # Real anatomy: the lungs of this chest CT (2873 ml by the rule labels) are found as lungs.
    reference = rule_label_map(chest).array == 2
    lungs = doc.label_map.array == int(rows["lungs"][0])
    assert 2 * np.count_nonzero(lungs & reference) / (lungs.sum() + reference.sum()) > 0.9
    assert starter.name in window.overlay_panel.source_label.text() and "3 labels found" in window.overlay_panel.source_label.text()
    assert window.segment_panel.result_label.text() == window.overlay_panel.source_label.text()  # under the button too
    # the statistics dock counts the new segmentation without being asked
    stats = window.stats_panel
    assert stats.table.rowCount() == 3 and stats.summary.text().startswith("3 labels")
    # the model's post-processing ran, and the user can see what it changed and that it is planned
    assert len(result.postprocessing) == len(starter.postprocessing) == 4
    tooltip = window.overlay_panel.source_label.toolTip()
    assert tooltip.startswith("After the network:") and all(note in tooltip for note in result.postprocessing)
    assert "then: lungs only inside the silhouette of body and bones" in window.segment_panel.plan_label.toPlainText()
    assert not window.cancel_button.isVisible()
    window.grab().save(str(artifacts_dir / "gui_segment_starter_lung1.png"))


def test_cancelled_segmentation_changes_nothing(window, chest, qtbot):
    assert window.document.label_map is None
    with qtbot.waitSignal(window.loader.failed, timeout=300_000) as blocker:
        window.segment_action.trigger()
        window.cancel_button.click()
    assert isinstance(blocker.args[0], Cancelled)
    assert window.document.label_map is None and window.document.labels == {}


def test_a_folder_that_is_not_a_model_is_refused_by_name(window, chest, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path))
    window.choose_model_action.trigger()
    with qtbot.waitSignal(window.error_shown, timeout=60_000) as blocker:
        window.segment_action.trigger()
    # the dialog names the problem and, on its own line, the folder the user chose
    assert blocker.args[0] == "not a medseg model package: model.json is missing"
    assert window.error_box.text() == blocker.args[0]
    assert window.error_box.informativeText().splitlines()[0] == f"File: {tmp_path}"
    assert window.document.label_map is None


def test_the_models_post_processing_can_be_switched_off(window, chest, qtbot, monkeypatch):
    # segment(postprocess=False) itself is tested in tests/model/test_postprocess.py; here: the
    # switch is offered for a model that declares steps, and the user's choice reaches the job
    panel = window.segment_panel
    assert panel.postprocess_box.isVisibleTo(window) and panel.postprocess
    asked = []
    monkeypatch.setattr(window.loader, "segment", lambda *args: asked.append(args))
    panel.postprocess_box.setChecked(False)
    window.segment_action.trigger()
    assert asked and asked[-1][3] is False
