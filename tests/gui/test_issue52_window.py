"""Issue 52 (a clinician's day, third pass), the window's items: the report's file name, Size on a tilted
series, the training's time left, the Segment panel with a TotalSegmentator model at 1280 x 800, the plan's
engine after the first CPU run, a ~100-structure result arriving, the 3D budget, the Segment list and the
Models dialog after a model was installed from the command line. Each drives the real widgets."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QComboBox, QLineEdit

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


# --- item 6: the plan after the first CPU run ------------------------------------------------------------------
@pytest.fixture
def cpu_only(fake_machine, monkeypatch, tmp_path):
    """A machine with no GPU (the device box's "auto" is the CPU), whose engines are measured (the suite pins
    PyTorch: tests/conftest.py) into a store of this test's own (the cache folder is shared)."""
    from medseg.model import cpu_runtime

    fake_machine(cuda=0, providers=("CPUExecutionProvider",), openvino=False)
    monkeypatch.delenv("MEDSEG_CPU_ENGINE")
    monkeypatch.setattr(cpu_runtime, "_store_path", lambda: tmp_path / "cpu_engines.json")


def test_the_plan_names_the_measured_engine_once_the_first_cpu_run_measured_it(cpu_only, window, driver, ct_dir,
                                                                                 qtbot, artifacts_dir):
    """The plan said "engine: PyTorch (until the first CPU run measures it…)" after that run had measured
    and chosen another engine; it now shows the stored measurement as soon as the result arrives."""
    from medseg.model import cpu_runtime

    panel = window.segment_panel
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    qtbot.waitUntil(lambda: "engine:" in panel.plan_label.toPlainText(), timeout=60_000)
    assert panel.device == "auto"
    assert "until the first CPU run measures it against ONNX Runtime" in panel.plan_label.toPlainText()
    assert cpu_runtime._read_store() == {}
    with qtbot.waitSignal(window.loader.segmented, timeout=600_000):
        panel.run_button.click()
    (record,) = cpu_runtime._read_store().values()  # what the run measured, as stored on disk
    assert record["measured"] and set(record["seconds"]) == {"cpu", "onnx-cpu"}
    plan = panel.plan_label.toPlainText()
    assert "until the first CPU run" not in plan
    assert f"engine: {record['engine']} ({record['reason']})" in plan
    window.grab().save(str(artifacts_dir / "issue52_plan_after_first_cpu_run.png"))
