"""A clinician's day without surprises (issue #25): each rough edge a new user met, driven through
the real widgets and checked by what the user sees."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt, QTimer
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QMenu
from qt_conditions import on_screen

from medseg.edit.label_map import build_label_table


def _wheel(widget, steps: int = -1, position: QPointF | None = None) -> None:
    """A real wheel event (one notch = 120) at ``position`` (default: the widget's centre)."""
    local = position if position is not None else QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(local, QPointF(widget.mapToGlobal(local.toPoint())), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _three_labels(window) -> None:
    """A segmentation of three labels on the open image (as Segment would leave it)."""
    doc = window.document
    array = np.zeros(doc.volume.shape_zyx, dtype=np.uint8)
    z = array.shape[0] // 2
    array[z, 10:20, 10:20] = 1
    array[z, 30:40, 30:40] = 2
    array[z, 50:60, 50:60] = 3
    doc.set_label_map(doc.volume.with_array(array), build_label_table([1, 2, 3], {1: "body", 2: "lungs", 3: "bones"}),
                      description="test labels")


def test_result_messages_stay_readable_beside_the_readout(driver, window, ct_dir, qtbot, artifacts_dir):
    """#25.1: a save/segment/open result is not painted over the slice/HU readout, and it stays."""
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    readout = window.position_label.text()
    assert "HU" in readout
    window.notify("tilt_seg.dcm: label values renumbered 3 → 2 (DICOM numbers segments 1..N)", "success")
    qtbot.waitUntil(lambda: on_screen(window.messages))
    message, position = window.messages.geometry(), window.position_label.geometry()
    assert window.messages.isVisible() and window.position_label.isVisible()
    assert not message.intersects(position), (message, position)
    assert window.position_label.text() == readout  # the readout is untouched
    # Hovering a menu item used to paint its status tip over the readout: now nothing covers it.
    file_menu = window.menuBar().findChildren(QMenu)[0]
    file_menu.popup(window.mapToGlobal(QPoint(10, 10)))
    qtbot.waitUntil(file_menu.isVisible)
    with qtbot.waitSignal(window.open_files_action.hovered):  # Qt sends the status tip as it emits this
        file_menu.setActiveAction(window.open_files_action)
    assert window.statusBar().currentMessage() == ""
    file_menu.close()
    # Time passes: every timer the status bar holds (where QStatusBar's own timed messages and any auto-hide
    # would live) fires now, instead of the test waiting out the old message's 8 s.
    timers = [timer for timer in window.statusBar().findChildren(QTimer) if timer.isActive()]
    for timer in timers:
        timer.timeout.emit()
    QApplication.processEvents()
    assert "renumbered 3 → 2" in window.messages.text()
    assert "renumbered 3 → 2" in window.messages.label.toolTip()  # the whole text, even when elided
    window.grab().save(str(artifacts_dir / "window_pass_message_area.png"))
    window.messages.dismiss_button.click()
    assert window.messages.text() == ""
    assert any("renumbered" in m.text for m in window.messages.history)  # History keeps it


def test_wheel_over_the_side_panel_scrolls_it_and_changes_no_value(driver, window, ct_dir, qtbot):
    """#25.2: scrolling the side panel over the active-label box scrolls; it never picks another label."""
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    _three_labels(window)
    window.resize(1400, 600)  # short enough that the side panel scrolls
    qtbot.waitUntil(lambda: window.side_scroll.verticalScrollBar().maximum() > 0)  # asserted below as well
    label_box = window.editing.panel.label_box
    label_box.setCurrentIndex(0)
    before = label_box.currentText()
    assert before.startswith("1")
    scroll_bar = window.side_scroll.verticalScrollBar()
    assert scroll_bar.maximum() > 0, "the side panel should need scrolling at this height"
    scroll_bar.setValue(0)
    window.side_scroll.ensureWidgetVisible(label_box)
    start = scroll_bar.value()
    assert start < scroll_bar.maximum()  # room to scroll down, so the check below can fail
    for _ in range(3):
        _wheel(label_box, steps=-1)
    assert label_box.currentText() == before
    assert scroll_bar.value() > start
    assert scroll_bar.value() != start
    # Once the user clicks into it (focus), the wheel changes its value as usual.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    label_box.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(label_box.hasFocus)
    _wheel(label_box, steps=-1)
    assert label_box.currentText() != before


def test_wheel_scrolling_updates_the_slice_and_hu_readout_at_once(driver, window, ct_dir, qtbot):
    """#25.5: the readout follows the slice under a mouse that did not move."""
    volume = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    view = window.viewer.views["axial"]
    centre = QPointF(view.width() / 2, view.height() / 2)
    from PySide6.QtGui import QMouseEvent

    move = QMouseEvent(QMouseEvent.Type.MouseMove, centre, QPointF(view.mapToGlobal(centre.toPoint())),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view, move)
    first = window.position_label.text()
    xyz0 = view.widget_to_index(centre)
    assert f"Axial slice {xyz0[2] + 1}/" in first
    _wheel(view, steps=3, position=centre)
    xyz1 = view.widget_to_index(centre)
    assert xyz1[2] != xyz0[2]
    text = window.position_label.text()
    assert f"Axial slice {xyz1[2] + 1}/" in text
    hu = float(volume.array[xyz1[2], xyz1[1], xyz1[0]])
    assert f"{hu:.0f} HU" in text


# --- #25.3: Save as keeps the file name and the format in step ---------------------------------------------
@pytest.mark.parametrize("name, suffix, expected", [
    ("segmentation.nii.gz", ".dcm", "segmentation.dcm"),      # was segmentation.nii.dcm
    ("tilt_seg.dcm", ".nii.gz", "tilt_seg.nii.gz"),
    ("liver.seg.dcm", ".nrrd", "liver.nrrd"),                  # a double extension is one unit
    ("segmentation.nii.dcm", ".dcm", "segmentation.dcm"),     # Qt's mangled name is repaired
    ("patient.v2", ".nii.gz", "patient.v2.nii.gz"),            # an unknown suffix is part of the name
    ("lungs", ".stl", "lungs.stl"),
])
def test_a_format_suffix_is_replaced_as_one_unit(name, suffix, expected):
    from medseg.gui.common.save_dialog import with_format_suffix

    assert with_format_suffix(name, suffix) == expected


def _pick_filter(dialog, name_filter: str) -> None:
    """Choose a filter in the dialog's file-type box as a user does (Qt reacts to 'activated')."""
    from PySide6.QtWidgets import QComboBox

    combo = dialog.findChild(QComboBox, "fileTypeCombo")
    index = combo.findText(name_filter)
    assert index >= 0, [combo.itemText(i) for i in range(combo.count())]
    combo.setCurrentIndex(index)
    combo.activated.emit(index)  # what QComboBox emits for a user's choice, in this order
    combo.textActivated.emit(name_filter)


def test_choosing_dicom_seg_in_save_as_renames_nii_gz_to_dcm_and_reopening_selects_its_filter(
        driver, window, ct_dir, qtbot, monkeypatch, tmp_path, artifacts_dir):
    import highdicom as hd
    from PySide6.QtWidgets import QLineEdit

    from medseg.gui.common import save_dialog
    from medseg.gui.study.segmentation_files import FILTERS

    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    _three_labels(window)
    seen = {}

    def user_saves_as_seg(dialog) -> int:
        name_box = dialog.findChild(QLineEdit, "fileNameEdit")
        seen["start_name"], seen["start_filter"] = name_box.text(), dialog.selectedNameFilter()
        seen["start_folder"] = dialog.directory().absolutePath()
        dialog.setDirectory(str(tmp_path))
        name_box.setText("segmentation.nii.gz")
        _pick_filter(dialog, "DICOM SEG (*.dcm)")
        seen["after_filter"] = name_box.text()
        dialog.grab().save(str(artifacts_dir / "window_pass_save_as_seg.png"))
        dialog.selectFile(str(tmp_path / name_box.text()))
        return 1

    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_saves_as_seg)
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000) as blocker:
        window.save_as_action.trigger()
    # The first Save as proposes a name from the study, beside the study, in NIfTI.
    assert seen["start_name"] == "image_seg.nii.gz" and seen["start_filter"] == "NIfTI label map (*.nii.gz)"
    assert seen["start_folder"] == str((ct_dir / "dcmqi_ct3slice_masks").resolve())
    assert seen["after_filter"] == "segmentation.dcm"
    written = tmp_path / "segmentation.dcm"
    assert blocker.args[0] == str(written) and not (tmp_path / "segmentation.nii.dcm").exists()
    assert hd.seg.segread(written).SOPClassUID == "1.2.840.10008.5.1.4.1.1.66.4"  # a real DICOM SEG
    # Reopening Save as starts from that file, with the DICOM SEG filter selected.
    dialog = save_dialog.SaveAsDialog(window, "Save segmentation as", written, list(FILTERS))
    assert dialog.selectedNameFilter() == "DICOM SEG (*.dcm)"
    assert dialog.findChild(QLineEdit, "fileNameEdit").text() == "segmentation.dcm"


def test_results_default_beside_the_study_then_where_the_user_saved_last_never_into_medsegs_own_folders(
        window, tmp_path, monkeypatch):
    from medseg import app_dirs
    from medseg.gui.common import save_dialog

    study = tmp_path / "studies" / "CT_2026"
    study.mkdir(parents=True)
    assert save_dialog.results_folder(str(study)) == study.parent  # nothing saved yet: beside the study
    monkeypatch.setenv("MEDSEG_CACHE_DIR", str(tmp_path / "cache"))
    cached = app_dirs.cache_dir() / "pacs" / "1.2.3"  # a series retrieved from a PACS
    cached.mkdir(parents=True)
    save_dialog.remember_results_folder(tmp_path / "results" / "x.dcm")
    (tmp_path / "results").mkdir()
    assert save_dialog.results_folder(str(study)) == tmp_path / "results"  # issue 42: the last folder is remembered
    assert save_dialog.results_folder(str(cached)) == tmp_path / "results"  # not the cache
    assert save_dialog.results_folder(None) == tmp_path / "results"  # no study: where the user saved last
    (tmp_path / "results").rmdir()  # gone since: beside the study again
    assert save_dialog.results_folder(str(study)) == study.parent


def test_medseg_keeps_its_own_files_in_one_data_folder_that_medseg_data_dir_moves(window, tmp_path, monkeypatch):
    """#25.14: sessions, logs and the training workspace in $MEDSEG_DATA_DIR (never medseg/medseg)."""
    from medseg import app_dirs
    from medseg.edit.journal import default_root
    from medseg.gui.common import app_settings
    from medseg.gui.editing.edit_session import journal_root
    from medseg.gui.train.tab import default_workspace

    monkeypatch.setenv("MEDSEG_DATA_DIR", str(tmp_path / "elsewhere"))
    assert journal_root() == default_root() == tmp_path / "elsewhere" / "sessions"
    assert app_settings.log_directory() == tmp_path / "elsewhere" / "logs"
    assert default_workspace() == tmp_path / "elsewhere" / "training"
    monkeypatch.delenv("MEDSEG_DATA_DIR")
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "xdg"))
    monkeypatch.setattr(app_dirs.sys, "platform", "linux")  # XDG is Linux's rule, whatever runs the test
    assert app_dirs.data_dir() == tmp_path / "xdg" / "medseg"  # one "medseg", not two


# --- #25.4: progress in words, never a stuck 0 % --------------------------------------------------------------
def test_a_running_job_is_shown_in_words_and_as_busy_until_it_reports_progress(window, qtbot):
    import threading

    from medseg.gui.common.jobs import Job

    started, release = threading.Event(), threading.Event()

    def work(progress=None, cancel=None):
        started.set()
        release.wait(30)
        from medseg.progress import report

        report(progress, 0.3, "")  # a fraction with no text of its own
        release.clear()
        release.wait(30)
        return 1

    job = Job("save-segmentation", work, window)
    job.start()
    qtbot.waitUntil(started.is_set)
    qtbot.waitUntil(window.job_status.progress_bar.isVisible)
    status = window.job_status
    assert status.progress_text.text() == "Saving the segmentation"  # not the job id "save-segmentation"
    assert status.progress_bar.maximum() == 0  # busy, not "0 %"
    release.set()
    qtbot.waitUntil(lambda: status.progress_bar.maximum() == 1000, timeout=10_000)
    assert status.progress_bar.value() == 300
    with qtbot.waitSignal(job.finished_ok, timeout=30_000):
        release.set()
    qtbot.waitUntil(lambda: not status.progress_bar.isVisible())


def test_model_export_reports_its_stages(tmp_path):
    """The export used to sit at 0 % for half a minute: it now says what it is doing, in order."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
    from small_packages import starter_like_package

    from medseg.core.volume import Volume
    from medseg.model.export_formats import export_model

    package = starter_like_package()
    ct = Volume(np.random.default_rng(0).normal(0, 300, (6, 48, 48)).astype(np.float32), (1.0, 1.0, 3.0))
    heard = []
    export_model(package, "onnx", tmp_path / "m.onnx", ct, "noise", configuration="2d", progress=heard.append)
    assert [p.stage for p in heard] == ["export", "parity", "write"]
    assert [p.fraction for p in heard] == sorted(p.fraction for p in heard) and heard[-1].fraction == 1.0
    assert (tmp_path / "m.onnx").is_file()


def test_pacs_test_connection_leaves_no_stale_progress_bar(window, qtbot, tmp_path):
    from medseg.io.pacs import PacsServer, PacsSettings, save_settings

    save_settings(PacsSettings(servers=[PacsServer("nowhere", host="127.0.0.1", port=9, called_aet="NOBODY",
                                                   timeout_s=3.0)]))
    window.pacs_action.trigger()
    dialog = window.opener.pacs_dialog
    qtbot.waitExposed(dialog)
    assert not dialog.progress.isVisible()  # nothing runs: no "0 %"
    dialog.servers.server_list.setCurrentRow(0)
    with qtbot.waitSignal(dialog.job_finished, timeout=60_000) as blocker:
        qtbot.mouseClick(dialog.servers.test_button, Qt.MouseButton.LeftButton)
    assert blocker.args == ["echo", False]  # nothing listens on port 9
    assert not dialog.progress.isVisible()
    dialog.close()


# --- #25.6 and 7: clinical words, and bad inputs that say which file and why ------------------------------------
MACHINE_WORDS = ("gantry_tilt", "variable_spacing", "regularize", "raw-stack", "reasons", "[", "_")


def test_the_tilted_head_is_explained_in_clinical_words_in_the_banner_details_and_the_seg(
        driver, window, ct_dir, qtbot, monkeypatch, tmp_path, artifacts_dir):
    import pydicom

    from medseg.gui.common import save_dialog

    driver.open_series(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    banner = window.findings_banner
    assert banner.isVisible()
    first_line = banner.label.text()
    assert first_line.startswith("Because the acquired slices are tilted 18.5° and unevenly spaced, the images are "
                                 "shown on a regular grid of 37 slices"), first_line
    assert window.raw_stack.button.isVisible() and window.raw_stack.button.text() == "Show acquired slices"
    for text in (first_line, banner.details, window.viewer.info_pane.text()):
        assert not [w for w in MACHINE_WORDS if w in text], text
    assert "The gantry was tilted 18.5° for this scan." in banner.details
    window.grab().save(str(artifacts_dir / "window_pass_tilt_banner.png"))
    _three_labels(window)
    out = tmp_path / "tilt_seg.dcm"
    monkeypatch.setattr(save_dialog, "ask_save_path_with_option",
                        lambda *a, **k: (str(out), "DICOM SEG (*.dcm)", False))
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000):
        window.save_as_action.trigger()
    comments = pydicom.dcmread(out, stop_before_pixels=True).ImageComments
    assert "tilted 18.5°" in comments and not [w for w in MACHINE_WORDS if w in comments], comments


def test_other_series_and_skipped_files_are_reported_on_the_first_load(driver, window, ct_dir, tmp_path):
    """The banner used to leave them out until a grid switch (the browser path lost the scan's findings)."""
    import shutil

    source = ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series"
    folder = tmp_path / "philips"
    shutil.copytree(source, folder)
    (folder / "notes.dcm").write_text("not an image")
    volume = driver.open_series(folder, "1")
    kinds = {f.kind for f in volume.meta.findings}
    assert {"series_chosen", "localizer_excluded", "non_image_skipped"} <= kinds, kinds
    details = window.findings_banner.details
    assert "other image series is in the same place" in details and "notes.dcm" in details


def test_an_empty_folder_and_a_folder_of_non_images_say_so(driver, window, tmp_path, artifacts_dir):
    empty = tmp_path / "empty study"
    empty.mkdir()
    browser = driver.open_folder(empty)
    assert browser.status.text() == "The folder empty study is empty: it holds no files."
    browser.close()
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "report.dcm").write_text("Dear colleague, ...")
    browser = driver.open_folder(junk)
    assert browser.status.text().startswith("No CT image in junk: report.dcm is not one (not a DICOM file")
    (junk / "scan.txt").write_text("x")
    browser.close()
    browser = driver.open_folder(junk)
    assert browser.status.text() == "No CT images in junk: its 2 files are not DICOM images (see below)."
    assert browser.skipped_label.text() == "2 files skipped: not CT images."
    assert not browser.skipped_list.isVisible()
    browser.skipped_button.click()
    assert browser.skipped_list.isVisible()
    listed = browser.skipped_list.toPlainText().splitlines()
    assert sorted(line.split(":")[0] for line in listed) == ["report.dcm", "scan.txt"]
    browser.grab().save(str(artifacts_dir / "window_pass_junk_folder.png"))
    browser.close()


# --- #25.8: the unsaved-segmentation question offers Save, in plain words -------------------------------------
def test_opening_another_image_with_unsaved_edits_offers_save_and_saves_first(
        driver, window, ct_dir, qtbot, monkeypatch, tmp_path, artifacts_dir):
    from PySide6.QtWidgets import QMessageBox

    from medseg.edit.tools.brush import stroke
    from medseg.gui.common import save_dialog

    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    doc = window.document
    doc.new_label_map()
    doc.add_label("lesion", value=1)
    doc.apply(stroke(doc.label_map, [(1, 200, 200)], 6.0, 1, image=doc.volume), "brush")
    doc.apply(stroke(doc.label_map, [(1, 260, 260)], 6.0, 1, image=doc.volume), "brush")
    assert doc.unsaved
    seen = {}
    out = tmp_path / "lesion.nii.gz"
    monkeypatch.setattr(save_dialog, "ask_save_path_with_option",
                        lambda *a, **k: (str(out), "NIfTI label map (*.nii.gz)", False))

    def user_presses_save(box):
        seen["text"] = box.text()
        seen["buttons"] = [b.text() for b in box.buttons()]
        box.show()
        QApplication.processEvents()
        box.grab().save(str(artifacts_dir / "window_pass_unsaved_question.png"))
        box.hide()
        return QMessageBox.StandardButton.Save

    monkeypatch.setattr(QMessageBox, "exec", user_presses_save)
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
        window.opener.open_path(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    assert seen["text"] == "The segmentation has 2 unsaved edits (the last: brush). Save it before you open another image?"
    assert sorted(seen["buttons"]) == sorted(["Save", "Don't save", "Cancel"])
    assert out.is_file()  # saved before the other image replaced it
    import SimpleITK as sitk

    assert int(sitk.GetArrayFromImage(sitk.ReadImage(str(out))).astype(bool).sum()) > 0


def test_nothing_unsaved_is_worded_as_such_not_as_zero_steps(window):
    window.document.history.clear()
    assert window.editing.unsaved_text() == "The segmentation has not been saved yet."


# --- #25.9: every operation says what it changed, and why when it changed nothing -------------------------------
def _click(qtbot, view, xyz) -> None:
    point = view.index_to_widget(xyz)
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(round(point.x()),
                                                                                              round(point.y())))


def test_operations_say_what_they_changed_in_ml_and_whose_voxels_they_took(driver, window, ct_dir, qtbot,
                                                                          artifacts_dir):
    volume = driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    doc, panel = window.document, window.editing.panel
    z = volume.shape_zyx[0] // 2
    array = np.zeros(volume.shape_zyx, dtype=np.uint8)
    array[z - 2:z + 3, 150:350, 150:350] = 1  # "body"
    array[z - 2:z + 3, 230:270, 140:180] = 2  # "bones", across the body's edge
    doc.set_label_map(volume.with_array(array), build_label_table([1, 2], {1: "body", 2: "bones"}))
    window.view.set_active_label(2)
    assert "2 bones" in panel.operations_target.text()  # said next to the buttons
    voxel_ml = float(np.prod(volume.spacing_mm)) / 1000
    panel.setting_boxes["margin_mm"].setValue(2.0)
    before = doc.label_map.array.copy()
    panel.operation_buttons["grow"].click()
    after = doc.label_map.array
    gained = (after == 2) & (before != 2)
    from_body, from_background = int((gained & (before == 1)).sum()), int((gained & (before == 0)).sum())
    assert from_body > 0 and from_background > 0  # into body and into background
    text = window.messages.text()
    assert text == (f"Grow 2 mm on bones: bones +{gained.sum() * voxel_ml:.1f} ml (from body "
                    f"{from_body * voxel_ml:.1f} ml, background {from_background * voxel_ml:.1f} ml)"), text
    before = after.copy()
    panel.operation_buttons["shrink"].click()
    lost = int(((before == 2) & (doc.label_map.array != 2)).sum())
    assert window.messages.text() == f"Shrink 2 mm on bones: bones −{lost * voxel_ml:.1f} ml (to background)"
    window.grab().save(str(artifacts_dir / "window_pass_operation_message.png"))


def test_a_2d_fill_that_floods_the_background_warns_and_an_hu_fill_outside_its_range_says_why(
        driver, window, ct_dir, qtbot):
    volume = driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    doc, panel = window.document, window.editing.panel
    view = window.viewer.views["axial"]
    z = window.view.cursor_xyz[2]
    panel.tool_buttons["fill"].click()
    _click(qtbot, view, (5, 5, z))  # outside the patient, on background: floods the slice's background
    assert doc.label_map.array[z, 5, 5] == window.view.active_label
    assert window.messages.current.level == "warning"
    assert window.messages.text().startswith("Fill reached the edge of the image: it filled the background")
    doc.undo()
    panel.fill_by_hu.setChecked(True)
    panel.hu_masked.setChecked(True)
    panel.hu_low.setValue(100)
    panel.hu_high.setValue(300)
    point = view.index_to_widget((5, 5, z))
    x, y, _ = view.widget_to_index(QPointF(round(point.x()), round(point.y())))  # the voxel the click lands on
    air = float(volume.array[z, y, x])
    depth = doc.history.depth
    _click(qtbot, view, (5, 5, z))
    assert doc.history.depth == depth  # nothing was filled...
    assert window.messages.text() == (f"Fill: the clicked voxel is {air:.0f} HU, outside the range 100 to 300 HU, "
                                      "so nothing was filled.")  # ...and it says why


# --- #25.12 and 13: the preset the user chose; a complete shortcut list -------------------------------------------
def test_the_chosen_preset_is_shown_even_when_the_header_window_has_the_same_values(driver, window, ct_dir, qtbot):
    volume = driver.open_series(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    volume.meta.window_center, volume.meta.window_width = 40.0, 80.0  # a head CT whose header window is Brain's
    window.preset_actions["Auto (header)"].trigger()
    box = window.window_panel.preset_box
    assert box.currentData() == "Auto (header)"
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # shortcuts reach the active window only
    qtbot.keyClick(window.viewer.views["axial"], Qt.Key.Key_4)
    assert (window.view.window_center, window.view.window_width) == (40.0, 80.0)
    assert box.currentData() == "Brain"  # was "Auto (header) [0]"
    window.window_panel.width_box.setValue(120)  # by hand: no preset any more
    window.window_panel.width_box.editingFinished.emit()
    qtbot.waitUntil(lambda: window.view.window_width == 120.0)
    assert box.currentIndex() == 0 and box.currentText() == "(custom)"


def test_f1_lists_every_shortcut_the_window_has(window, qtbot):
    from PySide6.QtGui import QAction, QKeySequence

    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    qtbot.keyClick(window, Qt.Key.Key_F1)
    qtbot.waitUntil(lambda: window.help.dialog is not None and window.help.dialog.isVisible())
    text = window.help.dialog.text()
    for what, keys in (("Undo", "Ctrl+Z"), ("Redo", "Ctrl+Shift+Z"), ("Segment", "Ctrl+G"),
                       ("Save segmentation", "Ctrl+S"), ("Pick the label under the mouse", "Ctrl + left click"),
                       ("Brush tool", "B")):
        assert what in text and f"<b>{keys}</b>" in text, what
    for action in window.findChildren(QAction):
        keys = action.shortcut().toString(QKeySequence.SequenceFormat.NativeText)
        if keys:
            assert f"<b>{keys}</b>" in text, (action.text(), keys)
    window.help.dialog.close()


# --- #25.11: the statistics dock ----------------------------------------------------------------------------------
def test_double_clicking_a_statistics_row_shows_that_labels_largest_cross_section(driver, window, ct_dir, qtbot,
                                                                                   tmp_path, monkeypatch):
    import csv

    from medseg.gui.common import save_dialog

    volume = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")  # GE, with a patient name and UIDs
    assert volume.meta.series_uid and volume.meta.patient_name
    doc, panel = window.document, window.stats_panel
    array = np.zeros(volume.shape_zyx, dtype=np.uint8)
    array[0:2, 100:140, 100:140] = 1
    for z, r in ((0, 5), (1, 20), (2, 9)):  # label 2: largest on slice 1
        array[z, 300 - r:300 + r, 200 - r:200 + r] = 2
    doc.set_label_map(volume.with_array(array), build_label_table([1, 2], {1: "body", 2: "tumour"}))
    window.view.set_active_label(1)
    qtbot.waitUntil(lambda: panel.table.rowCount() == 2)
    assert panel.table.height() >= 5 * panel.table.verticalHeader().defaultSectionSize()  # more than two rows
    row = next(r for r in range(2) if panel.table.item(r, 0).text().endswith("tumour"))
    panel.table.cellDoubleClicked.emit(row, 0)
    assert window.view.active_label == 2
    x, y, z = window.view.cursor_xyz
    assert z == 1 and array[z, y, x] == 2
    out = tmp_path / "stats.csv"
    monkeypatch.setattr(save_dialog, "ask_save_path", lambda *a, **k: (str(out), "CSV (*.csv)"))
    panel.export_button.click()
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0])[:2] == ["series_uid", "series_description"] and "patient_name" not in rows[0]
    assert rows[0]["series_uid"] == volume.meta.series_uid
    panel.patient_name_box.setChecked(True)
    panel.export_button.click()
    assert list(csv.DictReader(out.open()))[0]["patient_name"] == volume.meta.patient_name


# --- #25.15: the first window fills most of the screen, later ones come back where they were ------------------------
def test_the_first_window_fills_most_of_the_screen_and_the_next_restores_it(qtbot, tmp_path):
    from PySide6.QtCore import QStandardPaths

    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow

    QStandardPaths.setTestModeEnabled(True)
    app_settings.settings().clear()
    first = MainWindow()
    qtbot.addWidget(first)
    first.show()
    qtbot.waitExposed(first)
    area = first.screen().availableGeometry()
    qtbot.waitUntil(lambda: first.placement.placed)  # placed after its first layout pass
    frame = first.geometry()
    assert area.contains(frame)
    assert frame.width() >= 0.85 * area.width() and frame.height() >= 0.85 * area.height()
    plan = first.segment_panel.plan_label
    assert plan.verticalScrollBar().maximum() == 0  # the plan box shows its whole text, no inner scrolling
    # the user makes it smaller (on the offscreen platform's 800 x 800 screen the width may
    # already be the window's least)
    smaller = (min(frame.width(), first.minimumSizeHint().width() + 10), first.minimumSizeHint().height() + 40)
    assert smaller[0] <= frame.width() and smaller[1] < frame.height()
    first.resize(*smaller)
    qtbot.waitUntil(lambda: (first.width(), first.height()) == smaller)
    first.close()
    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    qtbot.waitExposed(second)
    qtbot.waitUntil(lambda: (second.width(), second.height()) == smaller)
    second.close()


# --- #25.16: the PACS dialog says whether the form is saved -----------------------------------------------------
def test_the_pacs_form_says_whether_it_is_a_new_a_changed_or_a_saved_server(window, qtbot, artifacts_dir):
    from medseg.io.pacs import load_settings

    window.pacs_action.trigger()  # no server configured yet
    dialog = window.opener.pacs_dialog
    qtbot.waitExposed(dialog)
    assert dialog.servers.form_state() == "new" and "A new server, not saved" in dialog.servers.form_state_label.text()
    assert dialog.servers.save_button.isEnabled() and dialog.servers.add_button.text() == "New server"
    dialog.grab().save(str(artifacts_dir / "window_pass_pacs_new_server.png"))
    qtbot.keyClicks(dialog.servers.form.name, "x")  # typing into a new form keeps it "new"
    dialog.servers.form.name.setText("hospital")
    dialog.servers.form.name.textEdited.emit("hospital")
    qtbot.mouseClick(dialog.servers.save_button, Qt.MouseButton.LeftButton)
    assert [s.name for s in load_settings().servers] == ["hospital"]
    assert dialog.servers.form_state() == "saved" and not dialog.servers.save_button.isEnabled()
    assert dialog.servers.form_state_label.text() == "<b>hospital</b>, as saved."
    qtbot.keyClicks(dialog.servers.form.url, "/x")  # the user edits the saved server
    assert dialog.servers.form_state() == "changed" and "not saved" in dialog.servers.form_state_label.text()
    assert dialog.servers.save_button.isEnabled()
    dialog.close()


# --- #25.10: Train & Export -----------------------------------------------------------------------------------------
def test_training_only_some_of_the_base_models_labels_is_questioned_before_start(window, qtbot, monkeypatch):
    from PySide6.QtWidgets import QMessageBox

    from medseg.gui.train.label_set_question import confirm_label_set
    from medseg.gui.train.run_settings import RunSettings

    training = window.train_tab.training_panel
    asked = []

    def user_cancels(box):
        asked.append(box.text())
        return QMessageBox.StandardButton.Cancel

    monkeypatch.setattr(QMessageBox, "exec", user_cancels)
    assert not confirm_label_set(RunSettings(base="starter", labels=["body", "liver"]), training)
    assert asked == ["The base model medseg-starter-body-lungs-bones also segments lungs, bones. This run trains "
                     "only body, liver, so the new model will not segment them any more (new: liver). Keep them, or start "
                     "without them?"]
    assert confirm_label_set(RunSettings(base="starter", labels=["body", "lungs", "bones", "liver"]), training)
    assert confirm_label_set(RunSettings(base=None, labels=["liver"]), training)  # from scratch: nothing to lose
    assert len(asked) == 1


def test_a_case_added_from_a_file_is_named_after_the_file_never_the_patient(driver, window, ct_dir, tmp_path):

    from medseg.gui.train.tab import case_name

    volume = driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    assert case_name(volume, window.document.image_source) == "lung1_image"  # was "case"
    volume.meta.patient_name = "Lung^One"
    assert case_name(volume, str(tmp_path / "lung1_scan.nrrd")) == "case"  # the file is named after the patient
    volume.meta.series_description = "CT Thorax 5mm"
    assert case_name(volume, window.document.image_source) == "CT Thorax 5mm"
