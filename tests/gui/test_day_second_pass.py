"""A clinician's and a researcher's day, second pass (issue #42): each rough edge a new user met in a
real window, driven here through the real widgets (offscreen) and checked by what the user sees.

Screenshots go to test-artifacts/ (gui_day2_*.png)."""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pydicom
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtWidgets import QApplication, QMessageBox

TILT = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")


def _shot(widget, artifacts_dir: Path, name: str) -> Path:
    path = artifacts_dir / f"gui_day2_{name}.png"
    widget.grab().save(str(path))
    return path


def _point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def _drag(qtbot, view, points) -> None:
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    for p in points[1:]:
        qtbot.mouseMove(view, p)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])


# --- 9. the first paint of a study ---------------------------------------------------------------------------------
def test_the_first_paint_of_a_series_uses_its_own_window(driver, window, ct_dir, artifacts_dir, tmp_path):
    """#42.9: while the series loads, the views show it at the headers' window (not W 1 / L 0 from the
    not-yet-decoded voxels); a series without a window opens at the soft-tissue preset."""
    seen: list[tuple[float, float]] = []  # the window when the preview is up (the load job starts in the same
    # event-loop turn, before any paint), then at each later image change

    def note() -> None:
        seen.append((window.view.window_center, window.view.window_width))

    window.loader.busy_changed.connect(lambda: note() if window.loader.job is not None and
                                       window.loader.job.name == "load-series" else None)
    window.loader.study_loaded.connect(lambda _volume: note())
    folder = ct_dir.joinpath(*TILT)
    driver.open_series(folder)
    files = sorted(folder.glob("*.dcm"), key=lambda f: float(pydicom.dcmread(f, stop_before_pixels=True)
                                                               .ImagePositionPatient[2]))
    middle = pydicom.dcmread(files[(len(files) - 1) // 2], stop_before_pixels=True)
    header = (float(middle.WindowCenter), float(middle.WindowWidth))
    assert len(seen) == 2 and seen[0] == header and seen[1] == header, seen  # the preview, then the volume
    _shot(window, artifacts_dir, "first_paint_tilt")

    seen.clear()
    no_window = ct_dir / "dicom2nifti_testdata" / "missing_slice_ge_lightspeed16"
    assert all("WindowWidth" not in pydicom.dcmread(f, stop_before_pixels=True)
               for f in no_window.iterdir() if f.is_file() and not f.name.startswith("LICENSE"))
    driver.open_series(no_window)
    assert seen[0] == (40.0, 400.0) and seen[0][1] > 1, seen  # soft tissue, never W 1


# --- 10. raw stack <-> regular grid keeps how the study is looked at ------------------------------------------------
def test_switching_the_grid_keeps_window_zoom_and_the_point_looked_at(driver, window, ct_dir, qtbot, artifacts_dir):
    """#42.10: View ▸ Acquired slices and back keep window/level, each view's scale and centre, the crosshair."""
    volume = driver.open_series(ct_dir.joinpath(*TILT))
    view = window.viewer.views["axial"]
    window.view.set_window(300.0, 1500.0)  # bone, set by hand
    view.zoom, view.pan = 2.0, QPointF(40.0, -25.0)
    window.view.set_cursor((300, 220, 9))
    before_cursor = volume.index_to_physical(window.view.cursor_xyz)
    centre = QPointF(view.width() / 2, view.height() / 2)
    before_centre = volume.index_to_physical(view.widget_to_continuous(centre))
    before_scale = view.image_rect().width() / (volume.size_xyz[0] * volume.spacing_mm[0])
    for raw in (True, False):
        with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as loaded:
            assert window.raw_stack.switch(raw)
        other = loaded.args[0]
        assert ("raw_stack" in {f.kind for f in other.meta.findings}) == raw
        assert (window.view.window_center, window.view.window_width) == (300.0, 1500.0)
        scale = view.image_rect().width() / (other.size_xyz[0] * other.spacing_mm[0])
        assert scale == pytest.approx(before_scale, rel=1e-3)
        at_centre = other.index_to_physical(view.widget_to_continuous(centre))
        # the same patient point in the middle of the view (within a pixel and, across the plane, a slice)
        assert np.linalg.norm((at_centre - before_centre)[:2]) < 1.5 / scale + 1e-6
        cursor = other.index_to_physical(window.view.cursor_xyz)
        assert np.linalg.norm(cursor - before_cursor) < max(other.spacing_mm)
        _shot(window, artifacts_dir, f"grid_switch_{'raw' if raw else 'regular'}")


# --- 11. the localizer once -----------------------------------------------------------------------------------------
def test_a_series_and_its_localizer_report_the_localizer_once(driver, window, ct_dir, tmp_path, artifacts_dir):
    source = ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series"
    folder = tmp_path / "head"
    folder.mkdir()
    for path in [source / "S1000_I10", *source.glob("S2010_*")]:
        shutil.copy(path, folder / path.name)
    volume = driver.open_series(folder)
    assert volume.meta.series_description == "STD BRAIN 5MM"
    details = window.viewer.info_pane.text()
    banner = window.findings_banner.details
    for text in (details, banner):
        assert text.count("localizer") == 1, text
        assert "other image series" not in text and "other series" not in text, text
    window.details_dock.raise_()
    _shot(window, artifacts_dir, "localizer_once")


# --- 5. statistics size ---------------------------------------------------------------------------------------------
def test_statistics_size_counts_whole_voxels(driver, window, ct_dir, artifacts_dir, qtbot):
    """#42.5: a label over 7 slices of 5 mm reads 35 mm tall in the table (30 before); the header says why."""
    volume = driver.open_series(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series", "5MM")
    assert volume.spacing_mm[2] == pytest.approx(5.0)
    array = np.zeros(volume.shape_zyx, np.uint8)
    array[10:17, 200:240, 180:200] = 1  # 7 slices, 40 rows, 20 columns
    doc = window.document
    from medseg.edit.label_map import build_label_table

    doc.set_label_map(volume.with_array(array), build_label_table([1], {1: "tumour"}), description="test")
    panel = window.stats_panel
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh()
    column = panel.table.columnCount() - 1
    expected = [20 * volume.spacing_mm[0], 40 * volume.spacing_mm[1], 35.0]
    assert panel.table.item(0, column).text() == "×".join(f"{v:.1f}" for v in expected)
    assert "whole voxels" in panel.table.horizontalHeaderItem(column).toolTip()
    window.stats_dock.raise_()
    _shot(window, artifacts_dir, "stats_size")


# --- 6. the recovery offer ------------------------------------------------------------------------------------------
def test_recovery_counts_edits_as_the_undo_counter_and_is_modal_on_top(driver, window, ct_dir, qtbot, tmp_path,
                                                                       monkeypatch, artifacts_dir):
    """#42.6: three brush strokes (dozens of journal records) and an undo are '2 unsaved edits', the number the
    Edit panel's undo counter showed; the offer is application-modal and the active window."""
    from medseg.gui.shell.main_window import MainWindow

    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    panel, view = window.editing.panel, window.viewer.views["axial"]
    panel.tool_buttons["brush"].click()
    z = window.view.cursor_xyz[2]
    for y in (200, 260, 320):
        _drag(qtbot, view, [_point(view, (x, y, z)) for x in range(150, 320, 12)])
    window.document.undo()
    counter = panel.history_label.text()
    assert counter.startswith("Undo: 2 steps"), counter
    records = window.document.journal.records
    assert records > 10  # pieces of strokes, and the undo's inverse
    # the crash: this window never closes its journal; a new window starts in the same data folder
    monkeypatch.setattr(window.editing, "closing", lambda: None)
    window.document.journal.owner_lock.abandon()  # the kernel's part of a kill: its journal's lock goes
    second = MainWindow()
    qtbot.addWidget(second)
    second.resize(1200, 800)
    second.show()
    qtbot.waitUntil(lambda: second.editing.recovery_box is not None and second.editing.recovery_box.isVisible(),
                    timeout=10_000)
    box = second.editing.recovery_box
    assert "(2 unsaved edits)" in box.text(), box.text()  # never saved: the undo counter's 2 steps
    assert box.windowModality() == Qt.WindowModality.ApplicationModal
    assert QApplication.activeModalWidget() is box
    _shot(box, artifacts_dir, "recovery_offer")
    box.done(QMessageBox.StandardButton.Discard)
    second.close()


# --- 3. grow from seeds into a new label ------------------------------------------------------------------------
def test_grow_from_seeds_into_a_new_label_shows_seeds_and_preview_in_its_colour(driver, window, ct_dir, qtbot,
                                                                                 artifacts_dir):
    """#42.3: with no segmentation yet the label box reads '1 (new)': the seeds and the preview are drawn in
    the colour the label will get (they were black, and the preview invisible, until Apply)."""
    from medseg.core.labels import Label
    from medseg.io import read_image

    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd").array == 1
    x, y, z = (int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0))[::-1])
    panel, view = window.editing.panel, window.viewer.views["axial"]
    new = window.view.active_label
    assert window.document.label_map is None and new not in window.document.labels  # the Edit panel's "1 (new)"
    colour = Label(new).color  # what the table will give it at its first voxel
    panel.tool_buttons["grow-from-seeds"].click()
    panel.radius.setValue(2.0)
    window.view.set_cursor((x, y, z))
    runner, options = panel.grow_runner, panel.options
    with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
        options.widgets["seed_kind"].setCurrentText("structure")
        _drag(qtbot, view, [_point(view, (x, y, z))])
        options.widgets["seed_kind"].setCurrentText("background")
        ring = [_point(view, (x + 22 * np.cos(a), y + 22 * np.sin(a), z)) for a in np.linspace(0, 2 * np.pi, 48)]
        _drag(qtbot, view, ring)
    qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
    preview = window.view.tools.grow.preview
    assert preview is not None and preview.delta is not None and (preview.delta.new == new).sum() > 20
    image = view.render_slice()
    column, row = view.axes.index_to_pixel((x, y, z), window.document.volume.size_xyz)
    seed = image.pixelColor(int(round(column)), int(round(row)))
    assert (seed.red(), seed.green(), seed.blue()) == colour  # the seed, opaque, in the label's colour
    # a voxel the preview grows into (not a seed): tinted towards the label's colour, not grey
    grown = np.zeros(nodule.shape, bool)
    grown.reshape(-1)[preview.delta.global_index(nodule.shape)] = preview.delta.new == new
    seeds = window.view.tools.grow.seeds[z] != 0
    gz, gy, gx = np.argwhere(grown[z:z + 1] & ~seeds[None])[0] + (z, 0, 0)
    c, r = view.axes.index_to_pixel((int(gx), int(gy), int(gz)), window.document.volume.size_xyz)
    tinted = image.pixelColor(int(round(c)), int(round(r)))
    grey = window.document.volume.array[gz, gy, gx]
    assert len({tinted.red(), tinted.green(), tinted.blue()}) > 1, (tinted.getRgb(), grey)
    view.update()
    _shot(window, artifacts_dir, "grow_new_label_preview")
    options.buttons["seeds", "apply"].click()
    applied = window.document.label_map.array == new
    assert applied.sum() == (preview.delta.new == new).sum() and window.document.labels[new].color == colour


# --- 1. never point at a model a run did not produce; 0 structures is a warning; the built-in model --------------
def _model_that_finds_nothing(folder: Path) -> Path:
    """The starter's network with its output heads set to say 'background' everywhere (what a run stopped
    before it learned anything can leave): a model whose Segment finds 0 structures, by construction."""
    import torch

    from medseg.model.package import load_package, save_package, starter_model_path

    package = load_package(starter_model_path())
    for fold in (f for folds in package.weights.values() for f in folds):
        for key in [k for k in fold if k.startswith("decoder.seg_layers.")]:
            fold[key] = torch.zeros_like(fold[key])
            if key.endswith(".bias"):
                fold[key][0] = 10.0
    package.name = "blank-heads"
    return Path(save_package(package, folder))


def test_nothing_found_is_a_warning_and_the_built_in_model_is_in_the_menu(driver, window, ct_dir, qtbot, tmp_path,
                                                                         monkeypatch, artifacts_dir):
    from PySide6.QtWidgets import QFileDialog

    from medseg.model.package import load_package, starter_model_path

    monkeypatch.setattr(window.editing, "ask_before_segment", lambda _package, then: then("replace"))
    blank = _model_that_finds_nothing(tmp_path / "blank")
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    menu = next(m for m in window.menuBar().actions() if m.text() == "&Segmentation").menu()
    assert [a.text() for a in menu.actions()] == ["Segment", "Choose model…", "Models…", "Use the built-in model"]
    assert not window.builtin_model_action.isEnabled()  # it is the one in use
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(blank))
    window.choose_model_action.trigger()
    assert window.segmenting.model_path() == str(blank) and "blank-heads" in window.segment_panel.model_label.text()
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as done:
        window.segment_panel.run_button.click()
    assert not done.args[0].label_map.array.any()
    message = window.messages.current
    assert message.level == "warning" and "0 structures found" in message.text, message
    _shot(window, artifacts_dir, "segment_found_nothing")
    assert window.builtin_model_action.isEnabled()
    window.builtin_model_action.trigger()
    assert window.segmenting.model_path() is None
    assert load_package(starter_model_path()).name in window.segment_panel.model_label.text()
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as done:
        window.segment_panel.run_button.click()
    assert window.messages.current.level == "success" and "structures found" in window.messages.current.text


def test_a_chosen_model_that_is_gone_is_forgotten_with_a_warning(qtbot, tmp_path):
    from medseg.gui.common import app_settings
    from medseg.gui.common.app_settings import KEPT
    from medseg.gui.segment.model_chooser import store_reference
    from medseg.gui.shell.main_window import MainWindow

    gone = _model_that_finds_nothing(tmp_path / "run" / "model")
    store_reference(str(gone))
    shutil.rmtree(gone)  # the run folder was cleaned up between two starts
    second = MainWindow()
    qtbot.addWidget(second)
    second.show()
    assert second.segmenting.model_path() is None and not app_settings.settings().value(KEPT["segment_model"])
    qtbot.waitUntil(lambda: second.messages.current is not None, timeout=5_000)
    assert second.messages.current.level == "warning" and "no longer there" in second.messages.current.text
    assert not second.builtin_model_action.isEnabled()
    second.close()


def test_use_this_model_is_off_after_a_run_stopped_before_its_first_checkpoint(driver, window, ct_dir, qtbot,
                                                                               tmp_path, artifacts_dir):
    """#42.1: the previous run's model was offered (and used) after a new run stopped before it wrote anything."""
    from medseg.edit.label_map import build_label_table
    from medseg.model.training.run_record import RunRecorder

    tab = window.train_tab
    panel, training = tab.dataset_panel, tab.training_panel
    panel.set_workspace(tmp_path / "workspace")
    # the previous run, reopened: its package is in its run folder, so it may be used
    previous = tmp_path / "workspace" / "runs" / "run-previous"
    package = _model_that_finds_nothing(previous / "model")
    recorder = RunRecorder(previous)
    recorder.record({"event": "done", "package": str(package), "seconds": 1.0, "device": "cpu", "best_epoch": None})
    recorder.close()
    training.open_run(str(previous))
    assert training.use_button.isEnabled()
    # a case (a labelled 3-slice CT) and a new run, stopped at once
    volume = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    array = (volume.array > 200).astype(np.uint8)
    window.document.set_label_map(volume.with_array(array), build_label_table([1], {1: "bones"}), description="test")
    panel.add_current_button.click()
    qtbot.waitUntil(lambda: panel.job is None and panel.training_set.entries
                    and panel.training_set.entries[0].info is not None, timeout=120_000)
    window.document.mark_saved()
    tab.pages.setCurrentWidget(training)
    training.form.refresh_labels()
    training.form.base_combo.setCurrentIndex(training.form.base_combo.findText("From scratch"))
    with qtbot.waitSignal(training.run_ended, timeout=300_000) as ended:
        training.start_button.click()
        assert not training.use_button.isEnabled()  # running: nothing to use yet
        training.stop_button.click()
    assert ended.args[0].get("cancelled")
    assert not any(r.get("event") == "checkpoint" for r in training.records)  # stopped before the first one
    assert training.package_path is None and not training.use_button.isEnabled()
    assert "has not written a model" in training.use_button.toolTip()
    training.use_model()  # even called directly, it points the Segment tab at nothing
    assert window.segmenting.model_path() is None
    window.tabs.setCurrentIndex(1)
    _shot(window, artifacts_dir, "train_stopped_before_checkpoint")


# --- 14. the F1 sheet fits the screen ---------------------------------------------------------------------------
def test_the_shortcut_sheet_fits_on_the_screen(window, qtbot, artifacts_dir):
    import html

    from medseg.gui.shell.app_shell import shortcut_rows

    window.help.show_shortcuts()
    sheet = window.help.dialog
    qtbot.waitExposed(sheet)
    area = sheet.screen().availableGeometry()
    assert sheet.frameGeometry().height() <= area.height(), (sheet.frameGeometry(), area)
    rows = shortcut_rows(window)
    assert len(rows) > 30 and all(f"<b>{html.escape(keys)}</b>" in sheet.text() for _what, keys in rows)
    shown = sheet.sheet.toPlainText()
    assert "Ctrl + wheel" in shown and "Window/level" in shown
    _shot(sheet, artifacts_dir, "shortcuts_sheet")
    sheet.close()


# --- 15. the side panel keeps its width from one start to the next ---------------------------------------------
def test_the_side_panel_does_not_widen_after_a_model_is_chosen(window, qtbot, tmp_path, artifacts_dir):
    """#42.15: after "Use this model" (a run folder's long path), every later start had a side panel 200 px
    wider and smaller views."""
    from medseg.gui.segment.model_chooser import store_reference
    from medseg.gui.shell.main_window import MainWindow
    from medseg.model.package import starter_model_path

    def widths(main) -> tuple[int, int]:
        main.resize(1600, 1000)
        qtbot.waitUntil(lambda: main.width() == 1600 and main.viewer.width() + main.side_scroll.width() > 1500,
                        timeout=5_000)
        return main.side_scroll.width(), main.viewer.width()

    built_in = widths(window)
    run = tmp_path / "training" / "runs" / "run-20250101-120000" / "a-rather-long-training-set-name" / "model-stopped"
    shutil.copytree(starter_model_path(), run)
    store_reference(str(run))
    later = MainWindow()  # the next start
    qtbot.addWidget(later)
    later.show()
    qtbot.waitUntil(lambda: later.placement.placed, timeout=5_000)  # where the last start left it, then sized as the first
    assert later.segmenting.model_path() == str(run)
    assert widths(later) == built_in
    assert later.segment_panel.model_label.text() == "Model: a-rather-long-training-set-name/model-stopped"
    assert str(run) in later.segment_panel.model_label.toolTip()
    _shot(later, artifacts_dir, "side_panel_after_model_chosen")
    later.close()


# --- 17. Cancel while the image is being prepared ----------------------------------------------------------------
def test_cancel_while_preparing_the_image_stops_the_preparation(driver, window, ct_dir, qtbot):
    """#42.17: the status bar's Cancel, pressed while Segment says 'preparing the image', ends the job from
    inside the resampling (tests/model/test_cancel_preprocess.py shows where; benchmarks/bench_cancel.py how
    soon) and leaves the document as it was."""
    from PySide6.QtCore import QTimer

    from medseg.errors import Cancelled

    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    stages: list[str] = []

    def on_progress(_fraction: float, text: str) -> None:
        stages.append(text)
        if text == "preparing the image":
            QTimer.singleShot(0, window.cancel_button.click)

    window.loader.progressed.connect(on_progress)
    with qtbot.waitSignal(window.loader.failed, timeout=300_000) as failed:
        window.segment_action.trigger()
    assert isinstance(failed.args[0], Cancelled)
    assert "preparing the image" in stages and not any("tile" in s for s in stages), stages
    assert window.document.label_map is None and window.document.history.depth == 0
    assert window.messages.text().startswith("Cancelled")


# --- 16. Train & Export ------------------------------------------------------------------------------------------
def _wheel_at(widget, modifiers=Qt.KeyboardModifier.NoModifier, steps: int = -2) -> None:
    from PySide6.QtGui import QWheelEvent

    local = QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(local, QPointF(widget.mapToGlobal(local.toPoint())), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, modifiers, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


@pytest.mark.parametrize("size", [(1600, 1000), (1280, 800)])
def test_train_tab_has_the_height_the_wheel_scrolls_and_models_say_what_they_are(window, qtbot, artifacts_dir, size):
    """#42.16: the Segment tab's docks leave with it (the log had two lines); the wheel over a plot scrolls
    the page (Ctrl + wheel zooms it); a model is listed by name, date, base model, labels and Dice."""
    from medseg.model.package import load_package, starter_model_path

    window.resize(*size)
    window.stats_dock.raise_()
    train = window.tabs.widget(1)
    window.tabs.setCurrentWidget(train)
    qtbot.waitUntil(lambda: not window.stats_dock.isVisible() and not window.details_dock.isVisible(), timeout=5_000)
    training = window.train_tab.training_panel
    window.train_tab.pages.setCurrentWidget(training)
    QApplication.processEvents()
    _shot(window, artifacts_dir, f"train_tab_{size[0]}x{size[1]}")
    log = training.log_pane
    lines = log.viewport().height() // log.fontMetrics().lineSpacing()
    assert lines >= 8, lines
    # the wheel over a plot: the page scrolls (where there is a page to scroll), the plot keeps its range
    plot = training.curves.plots["loss"]
    bar = train.verticalScrollBar()
    # a page taller than the tab, whatever this machine's fonts make of it: there is always a page to scroll
    page_minimum = train.widget().minimumHeight()
    train.widget().setMinimumHeight(train.viewport().height() + 400)
    qtbot.waitUntil(lambda: bar.maximum() > 0)
    bar.setValue(0)
    before = plot.getViewBox().viewRange()
    _wheel_at(plot.viewport())
    assert plot.getViewBox().viewRange() == before
    assert bar.value() > 0
    _wheel_at(plot.viewport(), Qt.KeyboardModifier.ControlModifier)
    assert plot.getViewBox().viewRange() != before  # Ctrl + wheel zooms
    train.widget().setMinimumHeight(page_minimum)
    # the models, by what they are
    export = window.train_tab.export_panel
    export.add_model("")
    line = export.model_list.item(0).text()
    starter = load_package(starter_model_path())
    weights = starter.provenance["weights"]  # "best (epoch 40, mean Dice 0.7821)"
    assert line.startswith(f"{starter.name} (built in) · ")
    assert "body, lungs, bones" in line and "from scratch" in line
    assert f"best mean Dice {float(weights.split('mean Dice ')[1].rstrip(')')):.3f}" in line
    assert "models" in export.model_list.item(0).toolTip()  # the path, in the tooltip
    window.train_tab.pages.setCurrentWidget(export)
    _shot(window, artifacts_dir, f"train_models_{size[0]}x{size[1]}")
    window.tabs.setCurrentIndex(0)
    qtbot.waitUntil(lambda: window.stats_dock.isVisible(), timeout=5_000)  # back, and in front as before


def test_start_shows_preparing_the_dataset_with_progress(driver, window, ct_dir, qtbot, tmp_path):
    """#42.16: between Start and the first point the tab says what it prepares, case by case, with progress
    (it said 'starting…' for up to a minute)."""
    from medseg.edit.label_map import build_label_table

    tab = window.train_tab
    panel, training = tab.dataset_panel, tab.training_panel
    panel.set_workspace(tmp_path / "workspace")
    volume = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    window.document.set_label_map(volume.with_array((volume.array > 200).astype(np.uint8)),
                                  build_label_table([1], {1: "bones"}), description="test")
    panel.add_current_button.click()
    qtbot.waitUntil(lambda: panel.job is None and panel.training_set.entries[0].info is not None, timeout=120_000)
    window.document.mark_saved()
    tab.pages.setCurrentWidget(training)
    training.form.refresh_labels()
    training.form.base_combo.setCurrentIndex(training.form.base_combo.findText("From scratch"))  # nothing to ask about
    training.form.epochs.setValue(1)
    training.form.iterations.setValue(2)
    training.form.batch_size.setValue(2)
    seen: list[tuple[str, str, int, str]] = []  # (event, eta text, progress value, progress format)
    training.start_button.clicked.connect(lambda: training.runner.record.connect(
        lambda r: seen.append((r["event"], training.eta_label.text(), training.progress.value(),
                               training.progress.format()))))
    with qtbot.waitSignal(training.run_ended, timeout=600_000):
        training.start_button.click()
    preparing = [s for s in seen if s[0] == "preparing"]
    first_iteration = next(i for i, s in enumerate(seen) if s[0] == "iteration")
    assert preparing and all(seen.index(s) < first_iteration for s in preparing)
    texts = [s[1] for s in preparing]
    assert texts[0].startswith("preparing the dataset (1/") and "loading" in texts[0]
    assert any("resampling" in t for t in texts) and "building the network" in texts[-1]
    values = [s[2] for s in preparing]
    assert values == sorted(values) and values[-1] > 0
    assert all(s[3].startswith("preparing the dataset") for s in preparing)
    assert seen[first_iteration][3] == "%p%"
    assert "preparing (+" in training.log_pane.toPlainText()  # each step in the log, timed from Start


# --- 2. keep the model's other labels --------------------------------------------------------------------------
def test_a_new_label_fine_tune_can_keep_the_base_models_labels(driver, window, ct_dir, qtbot, tmp_path, monkeypatch,
                                                               artifacts_dir):
    """#42.2: fine-tuning the starter on a case that holds only a new label offered no way to keep body,
    lungs and bones. 'Keep the model's other labels' fine-tunes with them as targets (the starter's own rule
    labeller where the case lacks them), so the new model segments all four."""
    import json

    from PySide6.QtCore import QTimer

    from medseg.edit.label_map import build_label_table
    from medseg.model.datasets import open_dataset
    from medseg.model.package import load_package
    from medseg.model.rule_labels import STARTER_LABELS, rule_label_map

    monkeypatch.setattr(window.editing, "ask_before_segment", lambda _package, then: then("replace"))
    tab = window.train_tab
    panel, training = tab.dataset_panel, tab.training_panel
    panel.set_workspace(tmp_path / "workspace")
    volume = driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    tumour = np.zeros(volume.shape_zyx, np.uint8)
    tumour[1, 250:280, 200:240] = 1
    window.document.set_label_map(volume.with_array(tumour), build_label_table([1], {1: "tumour"}), description="test")
    panel.add_current_button.click()
    qtbot.waitUntil(lambda: panel.job is None and panel.training_set.entries[0].info is not None, timeout=120_000)
    window.document.mark_saved()
    tab.pages.setCurrentWidget(training)
    training.form.refresh_labels()
    assert [training.form.labels_list.item(r).text() for r in range(training.form.labels_list.count())] == ["tumour"]
    training.form.epochs.setValue(1)
    training.form.iterations.setValue(2)
    training.form.batch_size.setValue(2)
    asked: list[str] = []

    def answer() -> None:  # the question before Start, answered as a user would: Keep
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(20, answer)
            return
        asked.append(box.text() + "\n" + box.informativeText())
        _shot(box, artifacts_dir, "keep_base_labels_question")
        next(b for b in box.buttons() if b.text() == "Keep the model's other labels").click()

    QTimer.singleShot(0, answer)
    with qtbot.waitSignal(training.run_ended, timeout=600_000) as ended:
        training.start_button.click()
    assert "also segments body, lungs, bones" in asked[0] and "rule-based labeller" in asked[0]
    assert ended.args[0]["event"] == "done", ended.args[0]
    package = load_package(ended.args[0]["package"])
    assert sorted(n for v, n in package.names.items() if v) == ["body", "bones", "lungs", "tumour"]
    assert package.provenance["kept_base_labels"]["labels"] == ["body", "lungs", "bones"]
    assert "keeping the base model's body, lungs, bones" in training.log_pane.toPlainText()
    # what it trained on: the case's tumour over the starter's own targets (its rule labeller) for the rest
    manifest = json.loads(panel.training_set.manifest_path.read_text())
    assert manifest["cases"][0]["label_rule"] == "starter"
    dataset = open_dataset(panel.training_set.manifest_path)
    case = dataset.load(dataset.specs[0])
    names = dataset.labels
    rules = rule_label_map(case.image).array
    target = case.label_map.array
    inside = tumour.astype(bool)
    assert np.all(target[inside] == next(v for v, n in names.items() if n == "tumour"))
    for value, name in STARTER_LABELS.items():
        if value:
            index = next(v for v, n in names.items() if n == name)
            assert np.array_equal(target[~inside] == index, rules[~inside] == value), name
    # and the Segment tab segments with it: the base labels are still there
    training.use_button.click()
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as segmented:
        window.segment_action.trigger()
    found = {name for name, ml in segmented.args[0].volumes_ml.items() if ml > 0}
    assert "body" in found, segmented.args[0].volumes_ml
    _shot(window, artifacts_dir, "segment_with_kept_labels")
