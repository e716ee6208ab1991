"""A clinician's day, third pass (issue #52's check) in a REAL window — a walk to look at, not a test module.

    python tests/gui/walkthrough_day3_script.py OUT WIDTHxHEIGHT

starts a private Xvfb screen of that size and runs the app (Qt's xcb plugin, real widgets driven with
QTest, dialogs answered by clicking their buttons) three times in it, sharing one data folder:

1. ``walk``: open TotalSegmentator's example CT (DICOM), Segment with the built-in starter, brush a lesion,
   choose a TotalSegmentator model (its layout, small random weights: tests/model/ts_fixture.py) and its
   ``3mm`` (``--fast``) configuration, Segment over the labels and answer *Replace*, undo, Segment again and
   answer *Add new labels only*, save DICOM SEG and NIfTI, open the SEG again, export the report; open the
   tilted GE head series and read Size; an Interactive AI box and lasso on lung1's tumour crop;
2. ``crash``: brush twice, Ctrl+S, brush once more, then die by SIGKILL;
3. ``recover``: start again, the recovery offer (its count), recover, the undo counter, Undo.

The whole X screen is grabbed after each step into OUT (walk_NN_step.png); OUT/steps.json says what each
step showed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE.parent / "model")]
from walkthrough_day2_script import Walk, x_session  # noqa: E402

DATA = HERE.parents[2] / "shared" / "data" / "ct"


def run(out: Path, size: str) -> int:
    server, env = x_session(out, size)
    try:
        for phase in os.environ.get("WALK_PHASES", "walk,crash,recover").split(","):
            started = time.monotonic()
            done = subprocess.run([sys.executable, __file__, phase, str(out)], env=env, timeout=5400)
            print(f"phase {phase}: exit {done.returncode} after {time.monotonic() - started:.0f} s", flush=True)
            if done.returncode != (-signal.SIGKILL if phase == "crash" else 0):
                return 1
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


def answer(w: Walk, button_text: str, record: list) -> None:
    """Click the button of the next message box that shows (as the user would), after grabbing the screen."""
    from PySide6.QtCore import QTimer
    from PySide6.QtWidgets import QMessageBox

    def look() -> None:
        boxes = [b for b in w.app.topLevelWidgets() if isinstance(b, QMessageBox) and b.isVisible()]
        if not boxes:
            QTimer.singleShot(50, look)
            return
        box = boxes[0]
        record.append(box.text() + " | " + box.informativeText())
        w.app.primaryScreen().grabWindow(0).save(str(w.out / f"walk_{len(w.steps):02d}_box_{button_text[:8]}.png"))
        next(b for b in box.buttons() if b.text().startswith(button_text)).click()

    QTimer.singleShot(100, look)


def labels_of(doc) -> dict[int, str]:
    return {v: e.name for v, e in sorted(doc.labels.items())}


def brush(w: Walk, view, x: int, y: int, z: int, length: int = 40) -> None:
    w.drag(view, [w.point(view, (x + dx, y, z)) for dx in range(0, length, 4)])


def segment(w: Walk, reply: str | None, what: str) -> list:
    window = w.window
    done: list = []
    window.loader.segmented.connect(done.append)
    asked: list = []
    if reply:
        answer(w, reply, asked)
    w.click(window.segment_panel.run_button)
    w.until(lambda: bool(done), 3600, what)
    window.loader.segmented.disconnect(done.append)
    w.wait(500)
    return asked


def walk(out: Path) -> int:
    from PySide6.QtWidgets import QFileDialog, QLineEdit
    from ts_fixture import make_totalseg_weights

    from medseg.gui.common import save_dialog
    from medseg.model.totalseg import import_totalsegmentator_task

    w = Walk(out, "walk")
    window = w.window
    w.until(lambda: window.isVisible() and window.placement.placed, 30, "the window")
    w.step("start")
    doc, panel = window.document, window.editing.panel
    view = window.viewer.views["axial"]

    # 1. TotalSegmentator's example CT (DICOM), the starter, a lesion by hand
    window.opener.open_path(str(DATA / "totalsegmentator" / "example_ct_dicom"), auto_load=True)
    w.until(lambda: doc.volume is not None and not window.loader.busy, 300, "the series")
    w.step("opened_abdomen")
    segment(w, None, "the starter")
    z = doc.volume.shape_zyx[0] // 2
    x, y = doc.volume.size_xyz[0] // 2, doc.volume.size_xyz[1] // 2
    window.view.set_cursor((x, y, z))
    panel.add_label("lesion")
    w.click(panel.tool_buttons["brush"])
    panel.radius.setValue(6.0)
    brush(w, view, x - 20, y, z)
    w.step("starter_and_lesion", labels=labels_of(doc), undo=panel.history_label.text())

    # 2. a TotalSegmentator model (its layout, small random weights), --fast, over these labels
    weights = make_totalseg_weights(out / "ts-weights", [297])
    model = import_totalsegmentator_task(weights, out / "ts-fast")
    QFileDialog.getExistingDirectory = staticmethod(lambda *a, **k: str(model))
    window.choose_model_action.trigger()
    segment_panel = window.segment_panel
    w.until(lambda: segment_panel.configuration_box.count() > 1, 120, "the model's configurations")
    segment_panel.configuration_box.setCurrentIndex(segment_panel.configuration_box.findData("3mm"))
    w.wait(300)
    window.side_scroll.ensureWidgetVisible(segment_panel.run_button)
    w.step("totalseg_chosen", plan=segment_panel.plan_label.toPlainText(),
           panel_width=segment_panel.width(), scroll_width=window.side_scroll.viewport().width())
    asked = segment(w, "Replace", "TotalSegmentator, replace")
    w.step("totalseg_replaced_at_once", stats_rows=window.stats_panel.table.rowCount())
    counted: list = []
    window.stats_panel.counted.connect(lambda: counted.append(True))
    w.until(lambda: bool(counted), 120, "the statistics")
    w.step("totalseg_replaced", asked=asked, labels=labels_of(doc),
           stats_rows=window.stats_panel.table.rowCount(), undo=panel.history_label.text())
    window.editing.undo()
    w.wait(300)
    w.step("undone", labels=labels_of(doc))
    asked = segment(w, "Add new labels only", "TotalSegmentator, add")
    w.step("totalseg_added", asked=asked, labels=labels_of(doc), notes=window.document.notes[-3:]
           if hasattr(window.document, "notes") else None)

    # 3. save SEG and NIfTI, open the SEG again, the report
    saved: list = []
    window.segmentation_files.saved.connect(saved.append)
    asking = save_dialog.ask_save_path_with_option
    for name, kind in (("day3_seg.dcm", "DICOM SEG (*.dcm)"), ("day3_seg.nii.gz", "NIfTI (*.nii.gz)")):
        target = out / name
        save_dialog.ask_save_path_with_option = lambda *a, t=target, k=kind, **kw: (str(t), k, False)
        before = len(saved)
        window.save_as_action.trigger()
        w.until(lambda b=before: len(saved) > b, 600, f"saving {name}")
        w.step(f"saved_{name.replace('.', '_')}", exists=target.is_file(), unsaved=doc.unsaved)
    before_values = labels_of(doc)
    opened: list = []
    window.segmentation_files.opened.connect(opened.append)
    window.segmentation_files.open(out / "day3_seg.dcm")
    w.until(lambda: bool(opened), 600, "the SEG to open")
    w.step("reopened_seg", same_labels=labels_of(doc) == before_values, labels=labels_of(doc))
    names: list = []

    def pick_report(dialog) -> int:
        dialog.resize(900, 600)
        dialog.show()
        w.wait(300)
        w.app.primaryScreen().grabWindow(0).save(str(out / f"walk_{len(w.steps):02d}_report_dialog.png"))
        box = dialog.findChild(QLineEdit, "fileNameEdit")
        names.append(box.text())
        dialog.setDirectory(str(out))
        box.setText(str(out / Path(box.text()).name))
        dialog.hide()
        return 1

    save_dialog.ask_save_path_with_option = asking  # the real dialog, answered by the user
    save_dialog.SaveAsDialog.exec = pick_report
    window.report_action.trigger()
    w.until(lambda: bool(list(out.glob("*_report*"))), 300, "the report")
    w.step("report", proposed=names, written=[p.name for p in out.glob("*_report*")])

    # 4. the tilted head series: Size along the image's axes
    window.document.mark_saved()
    abdomen = doc.volume
    window.opener.open_path(str(DATA / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing"), auto_load=True)
    w.until(lambda: doc.volume is not abdomen and not window.loader.busy, 300, "the tilted series")
    doc.new_label_map()
    panel.add_label("one slice")
    zt = doc.volume.shape_zyx[0] // 2
    xt, yt = doc.volume.size_xyz[0] // 2, doc.volume.size_xyz[1] // 2
    window.view.set_cursor((xt, yt, zt))
    w.click(panel.tool_buttons["brush"])
    brush(w, view, xt - 20, yt, zt)
    counted.clear()
    window.stats_panel.refresh()
    w.until(lambda: bool(counted), 120, "the statistics")
    table = window.stats_panel.table
    headers = [table.horizontalHeaderItem(c) for c in range(table.columnCount())]
    size_column = next(c for c, h in enumerate(headers) if h and h.text().startswith("Size"))
    w.step("tilted_size", size=table.item(0, size_column).text(), size_tooltip=headers[size_column].toolTip(),
           spacing=doc.volume.spacing_zyx)
    doc.mark_saved()

    # 5. Interactive AI: a box and a lasso on lung1's tumour
    import SimpleITK as sitk
    from interactive_fixture import make_nninteractive_folder

    from medseg.settings import SETTINGS

    lung = DATA / "pyradiomics_lung1"
    crop = out / "lung1_crop.nrrd"
    sitk.WriteImage(sitk.ReadImage(str(lung / "lung1_image.nrrd"))[170:266, 312:408, 16:48], str(crop))
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(lung / "lung1_label.nrrd"))[170:266, 312:408, 16:48]) == 1
    folder = make_nninteractive_folder(out / "hub", patch_size=(80,) * 3, base_features=4, max_features=32,
                                       name="nnInteractive_v1.0")
    SETTINGS.interactive_model = str(folder)
    window.opener.open_path(str(crop), auto_load=True)
    w.until(lambda: doc.volume is not None and doc.volume.shape_zyx == tumour.shape and not window.loader.busy,
            300, "the lung crop")
    doc.new_label_map()
    panel.add_label("tumour")
    zl = int(np.argmax(tumour.sum(axis=(1, 2))))
    ys, xs = np.nonzero(tumour[zl])
    yl, xl = int(round(ys.mean())), int(round(xs.mean()))
    window.view.set_cursor((xl, yl, zl))
    runner, options = panel.prompt_runner, panel.prompt_options
    w.click(panel.tool_buttons["prompt"])
    shown: list = []
    runner.preview_shown.connect(lambda: shown.append(1))
    options.kind.setCurrentText("box")
    w.drag(view, [w.point(view, (xl - 10 + i, yl - 10 + i, zl)) for i in range(0, 21, 2)])
    w.wait(300)
    w.step("box_drawn_while_computing", progress=window.progress_text.text())
    w.until(lambda: bool(shown), 600, "the box's object")
    w.step("box_preview", prompts=[p.describe() for p in window.view.tools.prompt.prompts])
    options.kind.setCurrentText("lasso")
    outline = [(xl + 4, yl - 5), (xl + 9, yl), (xl + 4, yl + 5), (xl - 1, yl), (xl + 4, yl - 5)]
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    points = [w.point(view, (px, py, zl)) for px, py in outline]
    QTest.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, points[0])
    for p in points[1:]:
        QTest.mouseMove(view, p)
        w.wait(5)
    QTest.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier, points[-1])
    w.wait(300)
    w.step("lasso_drawn_while_computing", progress=window.progress_text.text())
    w.until(lambda: len(shown) >= 2, 600, "the lasso's object")
    w.step("lasso_preview", prompts=[p.describe() for p in window.view.tools.prompt.prompts])
    doc.mark_saved()
    window.close()
    return 0


def crash(out: Path) -> int:
    from PySide6.QtCore import Qt
    from PySide6.QtTest import QTest

    w = Walk(out, "recover" if (out / "steps.json").is_file() else "walk")  # keeps the walk's steps, if any
    window = w.window
    w.until(lambda: window.isVisible() and window.placement.placed, 30, "the window")
    doc, panel, view = window.document, window.editing.panel, window.viewer.views["axial"]
    window.opener.open_path(str(DATA / "totalsegmentator" / "example_ct_dicom"), auto_load=True)
    w.until(lambda: doc.volume is not None and not window.loader.busy, 300, "the series")
    doc.new_label_map()
    panel.add_label("lesion")
    z = doc.volume.shape_zyx[0] // 2
    x, y = doc.volume.size_xyz[0] // 2, doc.volume.size_xyz[1] // 2
    window.view.set_cursor((x, y, z))
    w.click(panel.tool_buttons["brush"])
    brush(w, view, x - 40, y - 20, z)
    brush(w, view, x - 40, y, z)
    from medseg.gui.common import save_dialog

    save_dialog.ask_save_path_with_option = lambda *a, **kw: (str(out / "crash_seg.nii.gz"), "NIfTI (*.nii.gz)", False)
    saved: list = []
    window.segmentation_files.saved.connect(saved.append)
    window.activateWindow()
    w.until(lambda: w.app.activeWindow() is window, 30, "the window to be active")
    QTest.keyClick(w.app.focusWidget() or window, Qt.Key.Key_S, Qt.KeyboardModifier.ControlModifier)
    w.until(lambda: bool(saved), 300, "Ctrl+S")
    brush(w, view, x - 40, y + 20, z)
    w.step("before_kill", undo=panel.history_label.text(), unsaved=doc.unsaved,
           voxels=int((doc.label_map.array > 0).sum()))
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def recover(out: Path) -> int:
    from PySide6.QtWidgets import QMessageBox

    w = Walk(out, "recover")
    window = w.window
    w.until(lambda: window.editing.recovery_box is not None and window.editing.recovery_box.isVisible(), 60,
            "the recovery offer")
    box = window.editing.recovery_box
    w.step("recovery_offer", text=box.text(), informative=box.informativeText())
    loaded: list = []
    window.loader.study_loaded.connect(loaded.append)
    box.done(QMessageBox.StandardButton.Yes)
    doc, panel = window.document, window.editing.panel
    w.until(lambda: bool(loaded) and doc.label_map is not None, 600, "the recovered study")
    w.wait(500)
    voxels = int((doc.label_map.array > 0).sum())
    w.step("recovered", undo=panel.history_label.text(), unsaved=doc.unsaved, voxels=voxels,
           message=window.messages.text())
    window.editing.undo()
    w.wait(300)
    w.step("recovered_undo", undo=panel.history_label.text(), voxels=int((doc.label_map.array > 0).sum()))
    doc.mark_saved()
    window.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] in ("walk", "crash", "recover"):
        sys.exit({"walk": walk, "crash": crash, "recover": recover}[sys.argv[1]](Path(sys.argv[2])))
    sys.exit(run(Path(sys.argv[1]), sys.argv[2]))
