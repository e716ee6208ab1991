"""Editing in the real window with synthetic mouse events on a real chest CT (0.57 × 0.57 × 5 mm)."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QMessageBox
from scipy import ndimage

from medseg.edit import tools
from medseg.edit.document import SegmentationDocument


@pytest.fixture
def chest(driver, ct_dir):
    return driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")


def axial(window):
    view = window.viewer.views["axial"]
    view.update()
    return view


def widget_point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def drag(qtbot, view, points, modifier=Qt.KeyboardModifier.NoModifier):
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, modifier, points[0])
    for p in points[1:]:
        qtbot.mouseMove(view, p)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, modifier, points[-1])


def test_brush_stroke_erase_undo_with_the_mouse(window, chest, qtbot, artifacts_dir):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    z = window.view.cursor_xyz[2]
    panel.tool_buttons["brush"].click()
    assert window.view.tools.active == "brush"
    panel.radius.setValue(6.0)
    assert window.view.tools.radius_mm.value == 6.0  # the widget is bound to the tool's property
    start, end = (150, 300, z), (300, 300, z)
    points = [widget_point(view, (x, 300, z)) for x in range(150, 301, 25)]
    drag(qtbot, view, points)
    painted = doc.label_map.array == window.view.active_label
    assert np.flatnonzero(painted.any(axis=(1, 2))).tolist() == [z]  # a disc on the view's slice only
    # every voxel within the radius of the dragged segment is painted (no gaps between mouse events), none beyond
    yy, xx = np.mgrid[0:512, 0:512]
    sx, sy = chest.spacing_mm[:2]
    t = np.clip((xx - start[0]) / (end[0] - start[0]), 0, 1)
    distance = np.hypot((xx - (start[0] + t * (end[0] - start[0]))) * sx, (yy - 300) * sy)
    # The stroke's points are widget pixels, each up to half a pixel off the dragged line (a small view shows
    # two voxels a pixel), and a voxel counts by its centre: half its diagonal.
    a, b = view.index_to_widget((0, 300, z)), view.index_to_widget((100, 300, z))
    slack = 0.5 * 100 * sx / abs(b.x() - a.x()) + 0.5 * np.hypot(sx, sy)
    assert np.all(painted[z][distance <= 6.0 - slack]) and not np.any(painted[z][distance > 6.0 + slack])
    assert doc.history.depth == 1  # the whole drag is one undo step
    assert panel.history_label.text().startswith("Undo: 1 step")
    window.grab().save(str(artifacts_dir / "gui_edit_brush_stroke.png"))

    panel.tool_buttons["erase"].click()
    drag(qtbot, view, [widget_point(view, (225, 300, z))])
    erased = painted & (doc.label_map.array == 0)
    assert erased.any() and doc.history.depth == 2

    undo, redo = window.editing.undo_action, window.editing.redo_action
    assert undo.shortcut().toString() == "Ctrl+Z" and redo.shortcut().toString() == "Ctrl+Shift+Z"
    assert undo.text() == "Undo erase"
    undo.trigger()
    assert np.array_equal(doc.label_map.array == window.view.active_label, painted)
    window.editing.undo_action.trigger()
    assert not doc.label_map.array.any()
    redo.trigger()
    assert np.array_equal(doc.label_map.array == window.view.active_label, painted)


def test_fill_and_keep_island_by_clicking(window, chest, qtbot):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    z = window.view.cursor_xyz[2]
    hu = chest.array[z]
    lung = np.argwhere(hu < -700)
    seed_yx = lung[len(lung) // 2]
    panel.tool_buttons["fill"].click()
    panel.fill_by_hu.setChecked(True)
    panel.hu_masked.setChecked(True)
    panel.hu_low.setValue(-1100)
    panel.hu_high.setValue(-700)
    drag(qtbot, view, [widget_point(view, (int(seed_yx[1]), int(seed_yx[0]), z))])
    components, _ = ndimage.label((hu >= -1100) & (hu <= -700))  # face connectivity in the slice
    expected = components == components[tuple(seed_yx)]
    assert np.array_equal(doc.label_map.array[z] == window.view.active_label, expected)
    assert not doc.label_map.array[np.arange(doc.label_map.shape_zyx[0]) != z].any()

    # keep island: paint a far blob, click the fill: the blob goes
    panel.tool_buttons["brush"].click()
    panel.hu_masked.setChecked(False)  # the HU mask would keep the brush off soft tissue
    tissue = np.argwhere((hu > 20) & (hu < 80))
    by, bx = (int(v) for v in tissue[0])
    drag(qtbot, view, [widget_point(view, (bx, by, z))])
    assert doc.label_map.array[z, by, bx] == window.view.active_label
    panel.tool_buttons["keep-island"].click()
    drag(qtbot, view, [widget_point(view, (int(seed_yx[1]), int(seed_yx[0]), z))])
    assert doc.label_map.array[z, by, bx] == 0
    assert np.array_equal(doc.label_map.array[z] == window.view.active_label, expected)


def test_interpolate_and_grow_from_the_panel(window, chest, qtbot):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    panel.tool_buttons["brush"].click()
    panel.radius.setValue(15.0)
    for z in (20, 26):
        window.view.set_cursor((256, 256, z))
        drag(qtbot, view, [widget_point(view, (256, 256, z))])
    lm = doc.label_map
    assert lm.array[21:26].sum() == 0
    panel.operation_buttons["interpolate"].click()
    assert all(lm.array[z].any() for z in range(20, 27))
    before = lm.voxel_count(window.view.active_label)
    panel.setting_boxes["margin_mm"].setValue(3.0)
    panel.operation_buttons["grow"].click()
    assert lm.voxel_count(window.view.active_label) > before
    assert doc.history.depth == 4


def test_ctrl_click_picks_the_label_and_lock_protects_it(window, chest, qtbot):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    z = window.view.cursor_xyz[2]
    panel.tool_buttons["brush"].click()
    drag(qtbot, view, [widget_point(view, (200, 200, z))])
    panel.add_label("lesion")
    lesion = window.view.active_label
    assert lesion != 1 and doc.labels[lesion].name == "lesion"
    drag(qtbot, view, [widget_point(view, (260, 200, z))])
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ControlModifier, widget_point(view, (200, 200, z)))
    assert window.view.active_label == 1 and panel.label_box.currentData() == 1
    panel.lock_box.setChecked(True)
    assert doc.labels[1].locked
    first = doc.label_map.array == 1
    window.view.set_active_label(lesion)
    panel.radius.setValue(40.0)
    drag(qtbot, view, [widget_point(view, (230, 200, z))])
    assert np.array_equal(doc.label_map.array == 1, first)


def test_segment_merges_as_one_step_and_undo_restores(window, chest, qtbot, monkeypatch):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    z = window.view.cursor_xyz[2]
    panel.add_label("my nodule")
    nodule = window.view.active_label
    panel.tool_buttons["brush"].click()
    drag(qtbot, view, [widget_point(view, (240, 260, z))])
    before = doc.label_map.array.copy()
    window.segment_action.trigger()  # a drawn label is on screen: Segment asks first, in a window-modal box
    box = window.editing.segment_box
    assert box is not None and box.isVisible() and "my nodule (drawn or opened)" in box.text()
    assert not window.loader.busy  # nothing runs until the user answers
    box.checkBox().setChecked(True)  # "Lock this label first"
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        window.editing.segment_replace_button.click()
    assert doc.labels[nodule].locked
    after = doc.label_map.array
    assert np.array_equal(after == nodule, before == nodule)  # the locked label survived Segment
    assert {"body", "lungs", "bones"} <= {e.name for e in doc.labels.values()}
    assert doc.history.next_undo().startswith("Segment")
    window.segment_action.trigger()  # only the model's own labels and a locked one: nothing to lose, not asked
    assert window.editing.segment_box is None and window.loader.busy
    with qtbot.waitSignal(window.loader.failed, timeout=60_000):
        window.cancel_button.click()  # (running it again would only repeat the first result)
    doc.undo()
    assert np.array_equal(doc.label_map.array, before)


def test_unsaved_edits_are_not_lost_without_asking(window, chest, qtbot, monkeypatch, ct_dir):
    doc, panel = window.document, window.editing.panel
    view = axial(window)
    panel.tool_buttons["brush"].click()
    drag(qtbot, view, [widget_point(view, (200, 200, window.view.cursor_xyz[2]))])
    assert doc.unsaved
    monkeypatch.setattr(QMessageBox, "exec", lambda box: QMessageBox.StandardButton.Cancel)  # the user cancels
    window.opener.open_path(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    assert not window.loader.busy and doc.volume is chest
    window.close()
    assert window.isVisible() and window.editing.close_box.isVisible()  # closing asks first
    window.editing.close_box.done(QMessageBox.StandardButton.Discard)
    assert not window.isVisible() and not doc.unsaved


def test_recovery_offer_after_a_crash(qtbot, tmp_path, monkeypatch, ct_dir):
    from PySide6.QtCore import QStandardPaths

    from medseg.gui.common import app_settings
    from medseg.gui.editing.edit_session import journal_root
    from medseg.gui.shell.main_window import MainWindow
    from medseg.io import read_image

    QStandardPaths.setTestModeEnabled(True)
    monkeypatch.setattr(app_settings, "log_directory", lambda: tmp_path / "logs")
    app_settings.settings().clear()
    source = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    image = read_image(source)
    crashed = SegmentationDocument()  # a session that never closed (as after a kill -9)
    crashed.enable_autosave(journal_root())
    crashed.set_volume(image, source=str(source))
    crashed.new_label_map()
    crashed.apply(tools.dab(crashed.label_map, (24, 250, 250), 12.0, 3), "dab")
    crashed.apply(tools.dab(crashed.label_map, (30, 200, 300), 8.0, 4), "dab")
    expected = crashed.label_map.array.copy()
    crashed.close_journal(discard=False)  # its files stay, as a kill leaves them

    window = MainWindow()
    qtbot.addWidget(window)
    window.show()
    qtbot.waitUntil(lambda: window.editing.recovery_box is not None and window.editing.recovery_box.isVisible(), timeout=10_000)
    assert "(2 unsaved edits)" in window.editing.recovery_box.text()  # never saved: both
    recover = [b for b in window.editing.recovery_box.buttons() if b.text() == "Recover"]  # says what it does
    assert len(recover) == 1
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
        recover[0].click()
    qtbot.waitUntil(lambda: window.document.label_map is not None, timeout=10_000)
    assert np.array_equal(window.document.label_map.array, expected)
    assert window.document.unsaved
    window.document.mark_saved()
    window.close()


def test_segment_panel_shows_the_plan_for_this_series(window, chest, qtbot, monkeypatch, artifacts_dir):
    import re

    from medseg.model import backends
    from medseg.model.package import load_package, starter_model_path

    panel = window.segment_panel
    starter = load_package(starter_model_path())
    plan = starter.select(chest.spacing_zyx)
    text = panel.plan_label.toPlainText()
    assert plan.name in text and starter.name in panel.model_label.text()
    assert " × ".join(str(p) for p in plan.patch_size) in text
    assert f"{len(plan.strides)} stages" in text
    devices = [panel.device_box.itemData(i) for i in range(panel.device_box.count())]
    assert devices[0] == "auto" and "cpu" in devices
    window.grab().save(str(artifacts_dir / "gui_segment_plan_panel.png"))
    # The tiles announced are the tiles the engine then runs (counted as they reach the network).
    announced = int(re.search(r"(\d+) tiles at step 0.5", text).group(1))
    ran = []
    for runner in (backends.TorchRunner, backends.OnnxRunner):
        def counting(self, tiles, _call=runner.__call__):
            ran.append(int(tiles.shape[0]))
            return _call(self, tiles)
        monkeypatch.setattr(runner, "__call__", counting)
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        window.segment_action.trigger()
    assert announced == sum(ran) == chest.shape_zyx[0]  # the starter's 2D network: one tile per 5 mm slice


def test_segment_panel_says_which_configuration_and_why_and_lets_the_user_choose(window, chest, qtbot, artifacts_dir,
                                                                                  tmp_path):
    import sys
    from pathlib import Path

    from medseg.model.package import save_package
    from medseg.settings import SETTINGS

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
    from small_packages import starter_like_package  # 2d, 3d_thin, 3d_thick (random weights)

    model = starter_like_package()
    SETTINGS.segment_model = str(save_package(model, tmp_path / "three_configurations"))
    panel = window.segment_panel
    panel.refresh()
    box = panel.configuration_box
    assert box.isVisibleTo(window)
    assert [box.itemData(i) for i in range(box.count())] == [None, *model.configurations]
    # automatic: lung1's 5 mm slices over 0.57 mm pixels are thick-slice, so the thick 3D configuration
    text = panel.plan_label.toPlainText()
    assert text.splitlines()[0].startswith("3d_thick") and "is thick-slice" in text
    for name, plan in model.configurations.items():  # every configuration's target is listed beside the series'
        assert f"{name}: target {' × '.join(f'{s:.3g}' for s in plan.target_spacing_image_zyx)} mm" in text
    window.grab().save(str(artifacts_dir / "gui_segment_configuration_auto.png"))
    # the user's override is shown, said, and is what runs
    box.setCurrentIndex(box.findData("2d"))
    text = panel.plan_label.toPlainText()
    assert text.splitlines()[0].startswith("2d") and "chosen by you (the spacing would choose 3d_thick)" in text
    window.grab().save(str(artifacts_dir / "gui_segment_configuration_override.png"))
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.segment_action.trigger()
    assert blocker.args[0].configuration == "2d"
    assert "(2d, " in window.overlay_panel.source_label.text()
    box.setCurrentIndex(0)
    assert panel.configuration is None and panel.plan_label.toPlainText().splitlines()[0].startswith("3d_thick")
