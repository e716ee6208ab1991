"""Issue 52 (a clinician's day, third pass), the window's items: the report's file name, Size on a tilted
series, the training's time left, the Segment panel with a TotalSegmentator model at 1280 x 800, the plan's
engine once the app measured it, a ~100-structure result arriving, the 3D budget, the Segment list and the
Models dialog after a model was installed from the command line. Each drives the real widgets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QComboBox, QLineEdit
from qt_conditions import on_screen

from medseg.gui.common import save_dialog

TILT = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")


def _bones(driver, window, ct_dir):
    from medseg.edit.tools.threshold import threshold

    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    doc = window.document
    doc.new_label_map()
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "bone")


# --- item 7: Export report's name ----------------------------------------------------------------------------
def test_export_report_proposes_one_extension_and_html_replaces_it(driver, window, ct_dir, qtbot, tmp_path,
                                                                   monkeypatch, artifacts_dir):
    """It proposed "…_report.pdf.pdf", and "…report.pdf.html.html" after choosing HTML."""
    _bones(driver, window, ct_dir)
    window.document.mark_saved()
    names: list[str] = []

    def user_picks_html(dialog) -> int:
        dialog.resize(900, 600)
        dialog.show()
        name_box = dialog.findChild(QLineEdit, "fileNameEdit")
        names.append(name_box.text())
        types = dialog.findChild(QComboBox, "fileTypeCombo")
        types.setCurrentIndex(types.findText("HTML (*.html)"))
        types.activated.emit(types.currentIndex())  # as a click on the item
        names.append(name_box.text())
        dialog.grab().save(str(artifacts_dir / "issue52_report_dialog_html.png"))
        dialog.setDirectory(str(tmp_path))
        name_box.setText(names[-1])
        return 1

    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_picks_html)
    window.report_action.trigger()
    first, after = names
    assert first.endswith("_report.pdf") and first.count(".pdf") == 1, first
    assert after == first[: -len(".pdf")] + ".html", after
    written = list(tmp_path.glob("*_report*"))
    assert [p.name for p in written] == [after]
    assert written[0].read_text(encoding="utf-8").startswith("<html>")
    # said in the message area, not painted over the position readout by QStatusBar.showMessage
    assert window.messages.text() == f"Report written: {written[0]}"
    assert window.statusBar().currentMessage() == ""
    # another study: the last one's result leaves the message area (the day-3 walk saw it stay), History keeps it
    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    assert window.messages.text() == ""
    assert [m.text for m in window.messages.history][-1] == f"Report written: {written[0]}"


def test_statistics_export_names_switch_between_csv_and_json(driver, window, ct_dir, qtbot, monkeypatch):
    """The statistics' JSON name became "x.json.csv" when switched back to CSV."""
    _bones(driver, window, ct_dir)
    names: list[str] = []

    def user_switches(dialog) -> int:
        name_box = dialog.findChild(QLineEdit, "fileNameEdit")
        types = dialog.findChild(QComboBox, "fileTypeCombo")
        for text in ("JSON (*.json)", "CSV (*.csv)"):
            types.setCurrentIndex(types.findText(text))
            types.activated.emit(types.currentIndex())
            names.append(name_box.text())
        return 0

    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_switches)
    window.stats_panel.export_dialog()
    as_json, as_csv = names
    assert as_json.endswith("_statistics.json") and as_csv == as_json[: -len(".json")] + ".csv"


# --- item 4: Size on a tilted series ---------------------------------------------------------------------------
def test_size_on_a_tilted_series_is_along_the_image_axes(driver, window, ct_dir, qtbot, artifacts_dir):
    """A label brushed on one slice of the +18.5° tilted head: its Size z is one slice's spacing along the
    slice normal (the patient-axis box made it 9-15 mm on a 2.4 mm slice), x and y the voxels' extent; the
    header's tooltip says which axes."""
    from medseg.gui.labels.stats_panel import COLUMNS

    image = driver.open_series(ct_dir.joinpath(*TILT))
    assert abs(np.asarray(image.direction)[2, 2]) < 0.96  # really tilted
    doc, panel, stats = window.document, window.editing.panel, window.stats_panel
    panel.add_label("lesion")
    value = window.view.active_label
    panel.tool_buttons["brush"].click()
    view = window.viewer.views["axial"]
    z = window.view.cursor_xyz[2]
    points = [view.index_to_widget((x, 300, z)) for x in (230, 250, 270, 290)]
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                     QPoint(round(points[0].x()), round(points[0].y())))
    for point in points[1:]:
        qtbot.mouseMove(view, QPoint(round(point.x()), round(point.y())))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier,
                       QPoint(round(points[-1].x()), round(points[-1].y())))
    zz, yy, xx = np.nonzero(doc.label_map.array == value)
    assert set(zz.tolist()) == {z}  # one slice
    with qtbot.waitSignal(stats.counted, timeout=60_000):
        stats.refresh_button.click()
    row = next(r for r in range(stats.table.rowCount()) if stats.table.item(r, 0).text().endswith("lesion"))
    column = COLUMNS.index("Size x×y×z (mm)")
    shown = [float(v) for v in stats.table.item(row, column).text().split("×")]
    sx, sy, sz = image.spacing_mm
    expected = [(xx.max() - xx.min() + 1) * sx, (yy.max() - yy.min() + 1) * sy, sz]
    assert np.allclose(shown, expected, atol=0.051), (shown, expected)
    assert shown[2] == round(sz, 1)  # one slice's spacing along the slice normal
    tip = stats.table.horizontalHeaderItem(column).toolTip()
    assert "image's own axes" in tip and "tilted" in tip and "slice normal" in tip
    window.stats_dock.show()
    window.stats_dock.raise_()
    window.grab().save(str(artifacts_dir / "issue52_size_on_tilted_series.png"))


# --- item 12: training time left ------------------------------------------------------------------------------
def test_training_time_left_reads_as_a_duration(window, monkeypatch):
    """"ETA 17:44" read like a clock time: the tab says "about 17 min 44 s left"."""
    from medseg.gui.train import run_panel

    training = window.train_tab.training_panel
    clock = {"now": 1000.0}
    monkeypatch.setattr(run_panel, "time", SimpleNamespace(monotonic=lambda: clock["now"]))
    record = {"event": "iteration", "total_steps": 1001, "loss": 0.5, "learning_rate": 1e-3}
    training.on_record({**record, "step": 0})  # the first iteration: the clock starts
    clock["now"] += 100 * 1.064  # 100 more iterations, 1.064 s each; 900 to go: 957.6 s
    training.on_record({**record, "step": 100})
    text = training.eta_label.text()
    assert text.endswith("about 15 min 58 s left"), text
    assert ":" not in text.split("lr")[1]
    clock["now"] += 3 * 3600  # 110 iterations in 10906.4 s, 890 to go: 88242 s
    training.on_record({**record, "step": 110})
    assert training.eta_label.text().endswith("about 24 h 30 min left")  # hours: no seconds


# --- item 6 (issue 51 since): the plan says which engine runs, measured by the app while idle --------------------
@pytest.fixture
def cpu_only(fake_machine, monkeypatch, tmp_path):
    """A machine with no GPU (the device box's "auto" is the CPU), whose engines are measured (the suite pins
    PyTorch: tests/conftest.py) into a store of this test's own (the cache folder is shared)."""
    from medseg.model import cpu_runtime

    fake_machine(cuda=0, providers=("CPUExecutionProvider",), openvino=False)
    monkeypatch.delenv("MEDSEG_CPU_ENGINE")
    monkeypatch.setattr(cpu_runtime, "_store_path", lambda: tmp_path / "cpu_engines.json")
    for wanted in cpu_runtime.scheduled():  # what another test's plans asked for
        cpu_runtime.unschedule(*wanted)


def test_the_app_measures_the_engine_while_idle_and_the_plan_says_so(cpu_only, window, driver, ct_dir, qtbot,
                                                                      artifacts_dir):
    """Issue 52 item 6 showed a plan that lagged behind the first run's measurement; issue 51 moved the
    measurement out of the run. The plan says the default runs and why; the app, idle, measures the model in
    a job of its own and the plan then names the measured engine with its date."""
    from datetime import date

    from medseg.model import cpu_runtime

    panel = window.segment_panel
    window.idle_measurer.idle_ms = 10**9  # not idle yet: the plan before any measurement
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    qtbot.waitUntil(lambda: "engine:" in panel.plan_label.toPlainText(), timeout=60_000)
    assert panel.device == "auto"
    plan = panel.plan_label.toPlainText()
    assert "not measured on this computer yet: the default, PyTorch, runs at once" in plan, plan
    assert window.idle_measurer.job is None and not cpu_runtime._read_store()
    window.idle_measurer.idle_ms = 0  # idle now: the test waits for the job, not for the user
    qtbot.waitUntil(lambda: bool(cpu_runtime._read_store()) and not cpu_runtime.scheduled()
                    and window.idle_measurer.job is None, timeout=120_000)
    (record,) = cpu_runtime._read_store().values()  # what the idle job measured, as stored on disk
    assert record["measured"] and set(record["seconds"]) == {"cpu", "onnx-cpu"}
    assert record["measured_on"] == date.today().isoformat()
    qtbot.waitUntil(lambda: f"engine: {record['engine']} ({record['reason']})" in panel.plan_label.toPlainText(),
                    timeout=10_000)
    assert cpu_runtime.scheduled() == []
    bar = panel.plan_label.verticalScrollBar()
    bar.setValue(bar.maximum())  # the plan's last lines: where it runs, on which engine
    panel.grab().save(str(artifacts_dir / "issue51_plan_after_idle_measurement.png"))


# --- item 3: the Segment side panel with a TotalSegmentator model at 1280 x 800 -----------------------------------
@pytest.fixture(scope="module")
def ts_model(tmp_path_factory) -> Path:
    """A converted TotalSegmentator task (random weights in its exact layout: tests/model/ts_fixture.py)."""
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
    from ts_fixture import make_totalseg_weights

    from medseg.model.totalseg import import_totalsegmentator_task

    root = tmp_path_factory.mktemp("ts-window")
    weights = make_totalseg_weights(root / "weights", [291, 292, 293, 294, 295, 297, 298])
    return import_totalsegmentator_task(weights, root / "model")


def _ts_study(driver, window, ct_dir, tmp_path):
    """TotalSegmentator's example series with all 117 structures, opened with TotalSegmentator's names."""
    import SimpleITK as sitk
    from many_labels_data import all_117

    folder = ct_dir / "totalsegmentator"
    image = driver.open_series(folder / "example_ct_dicom")
    grid = sitk.Image([int(n) for n in image.size_xyz], sitk.sitkUInt8)
    grid.SetSpacing([float(s) for s in image.spacing_mm])
    grid.SetOrigin([float(o) for o in image.origin_mm])
    grid.SetDirection([float(d) for d in np.asarray(image.direction).ravel()])
    placed = sitk.Resample(sitk.ReadImage(str(folder / "example_seg_dicom.nii.gz")), grid, sitk.Transform(),
                           sitk.sitkNearestNeighbor, 0)
    written = sitk.GetImageFromArray(all_117(sitk.GetArrayFromImage(placed)))
    written.CopyInformation(grid)
    sitk.WriteImage(written, str(tmp_path / "total.nii.gz"))
    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")
    driver.open_segmentation(tmp_path / "total.nii.gz")
    return image


def _inside(widget, area) -> bool:
    """``widget`` lies across ``area``'s width, not past its right edge (the side panel scrolls down, not across)."""
    left = widget.mapTo(widget.window(), QPoint(0, 0)).x()
    area_left = area.mapTo(area.window(), QPoint(0, 0)).x()
    return area_left <= left and left + widget.width() <= area_left + area.width()


def test_segment_panel_with_a_totalsegmentator_model_fits_its_dock_at_1280_by_800(
        ts_model, window, driver, ct_dir, qtbot, tmp_path, monkeypatch, artifacts_dir):
    """The panel was 515 px wide in a 426 px dock (no horizontal scroll bar): the longest configuration's text
    and a structure subset's names set its width, and the model and configuration boxes, the plan and the label
    table's ml column were cut at the dock's edge. With the longest texts, at 1280 x 800 and 1600 x 1000: the
    panel fits, long texts are elided with the whole text in the tooltip, the plan wraps, the label buttons
    and the ml figures are whole."""
    from PySide6.QtWidgets import QFileDialog

    from medseg.gui.labels.label_tree import VOLUME

    _ts_study(driver, window, ct_dir, tmp_path)
    panel = window.segment_panel
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(ts_model))
    window.choose_model_action.trigger()
    assert panel.model_label.text() == "Model: <b>totalsegmentator/total</b>"
    # the longest texts: the longest configuration, 27 structures named in the button
    box = panel.configuration_box
    longest = max(range(box.count()), key=lambda i: len(box.itemText(i)))
    box.setCurrentIndex(longest)
    picked = tuple(sorted(e.name for e in window.document.labels.values() if e.group == "ribs"))
    panel._set_structures(picked)
    from PySide6.QtWidgets import QPushButton

    for width, height in ((1280, 800), (1600, 1000)):
        window.resize(width, height)
        qtbot.waitUntil(lambda: window.width() == width)
        scroll, side = window.side_scroll, window.side_scroll.widget()
        qtbot.waitUntil(lambda: side.width() <= scroll.viewport().width())  # the panel never passes its dock
        window.grab().save(str(artifacts_dir / f"issue52_segment_panel_ts_{width}.png"))
        for name in ("model_chooser", "device_box", "configuration_box", "structures_button", "plan_label",
                     "run_button"):
            assert _inside(getattr(panel, name), scroll.viewport()), name
        # long texts are elided, each whole in its tooltip
        assert box.currentText() in box.toolTip() and box.itemData(longest, Qt.ItemDataRole.ToolTipRole) == \
            box.itemText(longest)
        button = panel.structures_button
        assert button.text().startswith("Structures: 26 of 117 (costal_cartilages, ") and button.text() in button.toolTip()
        assert button.fontMetrics().horizontalAdvance(button.elided_text()) <= button.width()
        # the plan wraps inside its box (no horizontal scroll bar)
        assert panel.plan_label.horizontalScrollBar().maximum() == 0
        # the Edit panel's label buttons are never slivers: as wide as their text asks
        edit = window.editing.panel
        for text in ("Add", "Delete", "Merge into"):
            (label_button,) = [b for b in edit.findChildren(QPushButton) if b.text() == text]
            assert label_button.width() >= label_button.sizeHint().width(), (text, label_button.width())
            assert _inside(label_button, scroll.viewport()), text
        # the label table's ml column holds its largest figure whole, inside the dock
        labels = window.overlay_panel.labels
        tree = labels.tree
        scroll.ensureWidgetVisible(tree)
        qtbot.waitUntil(lambda: on_screen(tree))
        figures = [labels.proxy.index(r, VOLUME, labels.proxy.index(g, 0)).data()
                   for g in range(labels.proxy.rowCount()) for r in range(labels.proxy.rowCount(labels.proxy.index(g, 0)))]
        widest = max(tree.fontMetrics().horizontalAdvance(text) for text in figures if text)
        assert tree.columnWidth(VOLUME) >= widest + 2 * 1, (tree.columnWidth(VOLUME), widest)
        assert tree.header().sectionViewportPosition(VOLUME) + tree.columnWidth(VOLUME) <= tree.viewport().width()
        assert _inside(tree, scroll.viewport())
        scroll.grab().save(str(artifacts_dir / f"issue52_side_panel_label_table_{width}.png"))
        scroll.verticalScrollBar().setValue(0)



# --- item 9: a ~100-structure result arriving ----------------------------------------------------------------------
def test_a_117_structure_result_is_merged_coloured_counted_and_meshed_off_the_gui_thread(
        ts_model, window, driver, ct_dir, qtbot, monkeypatch, artifacts_dir):
    """The window froze 5-13 s when a TotalSegmentator result arrived. The heavy steps — the merge, the new
    labels' colours, the statistics, the 3D meshing — run in workers (the thread each ran on is recorded), and
    the GUI thread's handler of the result only writes it and fills the table: no colour is chosen, nothing
    counted or meshed there (before: a distinct colour for each of 117 placeholders, 2 s, on the GUI thread)."""
    import threading

    from many_labels_data import all_117

    from medseg.core.volume import Volume
    from medseg.edit import label_map as label_map_module
    from medseg.gui.labels import stats_panel
    from medseg.io.surface_bricks import SurfaceBricks
    from medseg.workflows import edit_operations
    from medseg.workflows.models import open_model
    from medseg.workflows.segment import SegmentedStudy

    card = open_model(ts_model).card
    assert len(card.labels) == 117
    image = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    hu = np.asarray(image.array)
    body = np.zeros(hu.shape, np.uint8)
    body[hu > -300], body[(hu > -950) & (hu < -400)], body[hu > 250] = 1, 2, 3
    values = sorted(card.labels)
    split = all_117(body, 117)
    lut = np.zeros(256, np.uint16)
    lut[1:118] = values
    labels = lut[split].astype(np.uint8 if max(values) < 256 else np.uint16)
    ran: dict[str, list[bool]] = {}  # step -> on the GUI thread, each time it ran

    def record(step, function):
        def wrapped(*args, **kwargs):
            ran.setdefault(step, []).append(threading.current_thread() is threading.main_thread())
            return function(*args, **kwargs)
        return wrapped

    def segment_image(img, _values, progress=None, cancel=None):
        result = Volume(labels, img.spacing_mm, img.origin_mm, img.direction.copy())
        return SegmentedStudy(img, result, dict(card.labels), card, "cpu", "", 0.1,
                              {card.labels[v].name: 1.0 for v in card.labels})

    monkeypatch.setattr(edit_operations, "segment_image", segment_image)
    monkeypatch.setattr(edit_operations, "prepare_segment", record("merge", edit_operations.prepare_segment))
    monkeypatch.setattr(label_map_module, "distinct_color", record("colour", label_map_module.distinct_color))
    monkeypatch.setattr(stats_panel, "label_statistics", record("statistics", stats_panel.label_statistics))
    for method in ("rebuild", "update"):
        monkeypatch.setattr(SurfaceBricks, method, record("3D meshing", getattr(SurfaceBricks, method)))
    window.viewer.view3d.mesher.enabled = True  # offscreen has no GL view: mesh as the 3D pane would
    in_handler: dict[str, list[bool]] = {}
    arrive = window.loader._on_segmented

    def handler(done):
        before = {step: len(calls) for step, calls in ran.items()}
        arrive(done)
        in_handler.update({step: calls[before.get(step, 0):] for step, calls in ran.items()})

    monkeypatch.setattr(window.loader, "_on_segmented", handler)
    stats = window.stats_panel
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        window.segment_action.trigger()
    qtbot.waitUntil(lambda: stats.table.rowCount() == 117 and stats._job is None, timeout=120_000)
    assert window.viewer.view3d.wait_idle(300_000)
    doc = window.document
    assert {v: e.name for v, e in doc.labels.items()} == {v: e.name for v, e in card.labels.items()}
    np.testing.assert_array_equal(doc.label_map.array, labels)
    assert ran["merge"] == [False] and ran["statistics"] and not any(ran["statistics"])
    assert ran["3D meshing"] and not any(ran["3D meshing"])
    # the handler only wrote the result and filled the table: nothing merged, counted or meshed there, and no
    # colour chosen but the active label's preview in the new, empty table (the model's colours came with it)
    assert not any(True in in_handler.get(step, []) for step in ("merge", "statistics", "3D meshing")), in_handler
    assert in_handler.get("colour", []).count(True) <= 1, len(in_handler["colour"])
    assert window.overlay_panel.labels.proxy.rowCount() > 0
    window.grab().save(str(artifacts_dir / "issue52_117_structures_arrived.png"))
