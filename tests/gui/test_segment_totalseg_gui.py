"""A TotalSegmentator model in the window: the Segment panel's plan, the structure picker (search, groups),
and a run with progress per part whose labels are the pipeline's.

The model is TotalSegmentator's layout with small random weights (tests/model/ts_fixture.py) on a crop
of its own example abdomen; the pipeline is checked against TotalSegmentator itself in
tests/model/test_totalseg_parity.py and tests/workflows/test_segment_totalseg.py, so here the oracle
for the labels is that pipeline called directly with what the user picked. Which structures a search
or a group shows is judged against the catalogue's table of names and groups, not the picker's own.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox, QFileDialog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from infer_fixtures import ct_crop
from ts_fixture import make_totalseg_weights

from medseg.catalogue import load_catalogue
from medseg.model.totalseg import import_totalsegmentator_task, load_totalseg_model, segment_totalseg

# 20 slices of TotalSegmentator's example abdomen (3 mm), cropped in-plane (as tests/workflows' test)
ABDOMEN_SMALL = ("totalsegmentator/example_ct_sm.nii.gz", (slice(5, 25), slice(30, 54), slice(30, 62)))


@pytest.fixture(scope="module")
def ts_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ts-gui")
    weights = make_totalseg_weights(root / "weights", [291, 292, 293, 294, 295, 297, 298])
    return import_totalsegmentator_task(weights, root / "model")


@pytest.fixture
def abdomen(driver, ct_dir, tmp_path):
    path = tmp_path / "abdomen.nii.gz"
    sitk.WriteImage(ct_crop(ct_dir, ABDOMEN_SMALL), str(path))
    return driver.open_image_file(path)


def _shown(picker) -> set[str]:
    return {group.child(i).text(0) for group in picker.groups.values() if not group.isHidden()
            for i in range(group.childCount()) if not group.child(i).isHidden()}


def test_pick_structures_then_segment_with_progress_per_part(window, abdomen, ts_model, qtbot, artifacts_dir,
                                                             monkeypatch):
    entry = load_catalogue().get("totalsegmentator/total")
    catalogue = {s.name: s.group for s in entry.structures}
    panel = window.segment_panel
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(ts_model))
    window.choose_model_action.trigger()  # Model folder…: a converted TotalSegmentator task is a model
    assert window.segmenting.model_path() == str(ts_model)
    assert panel.model_label.text() == "Model: <b>totalsegmentator/total</b>"
    assert panel.structures_button.isVisible() and panel.structures_button.text() == "Structures: all 117…"
    assert not panel.postprocess_box.isVisible()
    configurations = [panel.configuration_box.itemData(i) for i in range(panel.configuration_box.count())]
    assert configurations[0] is None and sorted(configurations[1:]) == ["1.5mm", "3mm", "6mm"]  # automatic first
    plan = panel.plan_label.toPlainText()
    assert plan.startswith("3mm — ") and "3 mm apart" in plan  # a 3 mm series: the 3 mm network, and why
    assert "all 117 structures" in plan and all(name in plan for name in ("1.5mm", "6mm"))

    qtbot.mouseClick(panel.structures_button, Qt.MouseButton.LeftButton)
    picker = panel.structure_picker
    qtbot.waitUntil(picker.isVisible)
    assert picker.count_label.text() == "117 of 117 chosen (the whole model)"
    qtbot.mouseClick(picker.none_button, Qt.MouseButton.LeftButton)
    ok = picker.buttons.button(QDialogButtonBox.StandardButton.Ok)
    assert picker.count_label.text() == "0 of 117 chosen" and not ok.isEnabled()
    qtbot.keyClicks(picker.search, "phag")  # a search shows the names that hold it ...
    assert _shown(picker) == {name for name in catalogue if "phag" in name} == {"esophagus"}
    qtbot.mouseClick(picker.all_button, Qt.MouseButton.LeftButton)  # ... and All ticks only those
    picker.search.clear()
    qtbot.keyClicks(picker.search, "rib")  # the group's name matches too: the whole "ribs" group, sternum included
    assert _shown(picker) == {name for name, group in catalogue.items() if "rib" in name or "rib" in group}
    picker.search.clear()
    assert len(_shown(picker)) == 117
    picker.groups["ribs"].setCheckState(0, Qt.CheckState.Checked)  # a group's box ticks all of its structures
    ribs = {name for name, group in catalogue.items() if group == "ribs"}
    assert len(ribs) == 26 and picker.count_label.text() == "27 of 117 chosen" and ok.isEnabled()
    picker.grab().save(str(artifacts_dir / "gui_structure_picker.png"))
    qtbot.mouseClick(ok, Qt.MouseButton.LeftButton)
    assert not picker.isVisible()
    assert set(panel.structures) == ribs | {"esophagus"}
    assert panel.structures_button.text().startswith("Structures: 27 of 117 (esophagus, ")
    assert "27 of 117 structures: cropped around them" in panel.plan_label.toPlainText()

    panel.configuration_box.setCurrentIndex(panel.configuration_box.findData("1.5mm"))
    assert panel.plan_label.toPlainText().startswith("1.5mm — chosen by you (automatic would choose 3mm")
    window.segment_panel.grab().save(str(artifacts_dir / "gui_segment_panel_totalseg_plan.png"))
    shown_while_running = []

    def record(_fraction, text):  # connected after the panel's own slot: what the panel shows for this step
        if text.startswith("part ") and panel.parts_label.isVisible():
            shown_while_running.append(panel.parts_label.text())
            if text.startswith("part 2 of 2") and not screenshot.exists():
                panel.grab().save(str(screenshot))

    screenshot = artifacts_dir / "gui_segment_panel_totalseg_parts.png"
    screenshot.unlink(missing_ok=True)

    window.loader.progressed.connect(record)
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    window.loader.progressed.disconnect(record)
    result = blocker.args[0]
    assert result.configuration == "1.5mm" and len(result.parts) == 2  # only the networks of the structures asked for
    assert "part1_organs" in result.parts[0] and "part5_ribs" in result.parts[1]
    assert shown_while_running[0].startswith("▶ part 1 of 2: organs — tile 1 of ")
    assert shown_while_running[0].endswith("\n· 1 more part to run")
    assert any(text.startswith("✓ part 1: organs\n▶ part 2 of 2: ribs — tile ") for text in shown_while_running)
    qtbot.waitUntil(lambda: not panel.parts_label.isVisible())  # gone when the run is over

    direct, run = segment_totalseg(abdomen, load_totalseg_model(ts_model), "1.5mm", sorted(panel.structures),
                                   device=result.device)
    shown = window.document.label_map.array
    assert np.array_equal(shown, direct.label_map.array) and run.crop_xyz is not None
    names = {entry.name for entry in window.document.labels.values()}
    assert names and names <= ribs | {"esophagus"}  # TotalSegmentator's names, only those asked for
    assert {v: window.document.labels[v].name for v in window.document.labels} == {
        s.value: s.name for s in entry.structures if s.value in window.document.labels}
    # each structure as the catalogue describes it (group for the label tree, TotalSegmentator's colour and codes)
    described = entry.labels()
    for value, label in window.document.labels.items():
        assert (label.group, label.color, label.category, label.type) == (
            described[value].group, described[value].color, described[value].category, described[value].type)
        assert label.provenance.algorithm_name == "totalsegmentator/total"
    window.grab().save(str(artifacts_dir / "gui_totalseg_result_window.png"))
