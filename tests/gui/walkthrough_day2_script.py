"""A clinician's and a researcher's day in a REAL window (issue #42's check), not a test module.

    python tests/gui/walkthrough_day2_script.py SERIES OUT WIDTHxHEIGHT

starts a private Xvfb screen of that size, and runs the app (Qt's xcb plugin, real widgets driven
with QTest) twice in it, sharing one data folder:

1. ``walk``: open the tilted series, Segment, grow from seeds into a new label, a one-slice brush
   label in 3D, save DICOM SEG and NIfTI, open the SEG again, the F1 sheet, the Train & Export tab
   (fine-tune a new label keeping the base labels, Use this model, Segment with it, export ONNX),
   then paint once more and die by SIGKILL;
2. ``recover``: start again, the recovery offer (is it on top?), recover.

The whole X screen is grabbed after each step into OUT (walk_NN_step.png) and OUT/steps.json says
what each step showed. Look at the pictures.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np


def _start_xvfb(size: str) -> tuple[subprocess.Popen, str]:
    read_fd, write_fd = os.pipe()
    server = subprocess.Popen([shutil.which("Xvfb"), "-displayfd", str(write_fd), "-screen", "0", f"{size}x24",
                               "-nolisten", "tcp"], pass_fds=(write_fd,), stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE)
    os.close(write_fd)
    written = b""
    while not written.endswith(b"\n"):
        ready, _, _ = select.select([read_fd], [], [], 30)
        assert ready, "Xvfb did not start"
        written += os.read(read_fd, 32)
    os.close(read_fd)
    return server, f":{written.decode().strip()}"


def x_session(out: Path, size: str) -> tuple[subprocess.Popen, dict[str, str]]:
    """A private X screen and the environment of an app on it with a fresh home under ``out`` (shared by the
    phases of one walk)."""
    out.mkdir(parents=True, exist_ok=True)
    home = out / "home"
    shutil.rmtree(home, ignore_errors=True)
    server, display = _start_xvfb(size)
    env = {k: v for k, v in os.environ.items() if k not in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE")}
    env.update(DISPLAY=display, XDG_CONFIG_HOME=str(home / "config"), XDG_DATA_HOME=str(home / "data"),
               MEDSEG_DATA_DIR=str(home / "medseg-data"), MEDSEG_CONFIG_DIR=str(home / "medseg-config"))
    return server, env


def run(series: Path, out: Path, size: str) -> int:
    server, env = x_session(out, size)
    try:
        for phase in ("walk", "recover"):
            started = time.monotonic()
            done = subprocess.run([sys.executable, __file__, phase, str(series), str(out)], env=env, timeout=5400)
            print(f"phase {phase}: exit {done.returncode} after {time.monotonic() - started:.0f} s", flush=True)
            if phase == "walk" and done.returncode != -signal.SIGKILL:
                return 1
    finally:
        server.terminate()
        server.wait(timeout=30)
    return 0


# --- inside the app -------------------------------------------------------------------------------------------
class Walk:
    def __init__(self, out: Path, phase: str) -> None:
        from PySide6.QtWidgets import QApplication

        self.app = QApplication(sys.argv[:1])
        assert self.app.platformName() == "xcb", self.app.platformName()
        from medseg.gui.shell.main_window import MainWindow

        self.out, self.phase = out, phase
        self.steps_file = out / "steps.json"
        self.steps: list[dict] = json.loads(self.steps_file.read_text()) if phase == "recover" else []
        self.window = MainWindow()
        self.window.show()

    def wait(self, ms: int) -> None:
        from PySide6.QtCore import QEventLoop, QTimer

        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(self, condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                self.step(f"TIMEOUT_{what.replace(' ', '_')}")
                raise SystemExit(f"timed out waiting for: {what}")
            self.wait(50)

    def step(self, name: str, **facts) -> None:
        self.wait(400)  # let the X server draw what Qt sent
        shot = self.out / f"walk_{len(self.steps):02d}_{name}.png"
        self.app.primaryScreen().grabWindow(0).save(str(shot))
        window = self.window
        self.steps.append({"step": name, "screenshot": str(shot), "message": window.messages.text(),
                           "message_level": window.messages.current.level if window.messages.current else "",
                           "readout": window.position_label.text(), "window": [window.width(), window.height()],
                           "side_panel": window.side_scroll.width(), "views": window.viewer.width(), **facts})
        self.steps_file.write_text(json.dumps(self.steps, indent=1, default=str))
        print(f"step {name}: {window.messages.text()}", flush=True)

    def click(self, widget) -> None:
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest

        QTest.mouseClick(widget, Qt.MouseButton.LeftButton)

    def drag(self, view, points) -> None:
        from PySide6.QtCore import Qt
        from PySide6.QtTest import QTest

        QTest.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
        for point in points[1:]:
            QTest.mouseMove(view, point)
            self.wait(5)
        QTest.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])

    def point(self, view, xyz):
        from PySide6.QtCore import QPoint

        p = view.index_to_widget(xyz)
        return QPoint(round(p.x()), round(p.y()))


def walk(series: Path, out: Path) -> int:
    from PySide6.QtWidgets import QApplication, QMessageBox

    from medseg.gui.common import save_dialog

    w = Walk(out, "walk")
    window, app = w.window, w.app
    w.until(lambda: window.isVisible() and window.placement.placed, 30, "the window")
    w.step("start", recovery_offered=window.editing.recovery_box is not None)

    # 1. open the tilted series: the first paint at its own window
    first: list = []
    window.loader.busy_changed.connect(lambda: first.append((window.view.window_center, window.view.window_width))
                                       if window.loader.busy and not first else None)
    window.opener.open_path(str(series), auto_load=True)
    w.until(lambda: window.document.volume is not None and not window.loader.busy, 300, "the series")
    w.step("opened", first_window=first[:1], window_after=(window.view.window_center, window.view.window_width),
           banner=window.findings_banner.label.text() if window.findings_banner.isVisible() else "",
           details=window.viewer.info_pane.text())

    # 2. Segment with the built-in model
    segmented: list = []
    window.loader.segmented.connect(segmented.append)
    window.side_scroll.ensureWidgetVisible(window.segment_panel.run_button)
    w.click(window.segment_panel.run_button)
    w.until(lambda: bool(segmented), 3600, "Segment")
    w.step("segmented", labels={v: e.name for v, e in window.document.labels.items()},
           seconds=segmented[0].seconds)

    # 3. grow from seeds into a new label (not in the table yet: "N (new)")
    doc, view, panel = window.document, window.viewer.views["axial"], window.editing.panel
    new = doc.label_map.next_free_value()
    window.view.set_active_label(new)
    z = doc.volume.shape_zyx[0] // 2
    x, y = doc.volume.size_xyz[0] // 2, doc.volume.size_xyz[1] // 2
    window.view.set_cursor((x, y, z))
    w.click(panel.tool_buttons["grow-from-seeds"])
    panel.radius.setValue(3.0)
    options = panel.options
    runner = panel.grow_runner
    shown: list = []
    runner.preview_shown.connect(lambda: shown.append(1))
    options.widgets["seed_kind"].setCurrentText("structure")
    w.drag(view, [w.point(view, (x + dx, y, z)) for dx in range(-8, 9, 4)])
    options.widgets["seed_kind"].setCurrentText("background")
    w.drag(view, [w.point(view, (x + 60 * np.cos(a), y + 60 * np.sin(a), z)) for a in np.linspace(0, 2 * np.pi, 40)])
    w.until(lambda: bool(shown) and not runner.busy(), 300, "the grow preview")
    preview = window.view.tools.grow.preview
    w.step("grow_preview", new_label=new, in_table=new in doc.labels,
           preview_voxels=int((preview.delta.new == new).sum()) if preview and preview.delta is not None else 0)
    w.click(options.buttons["seeds", "apply"])
    w.step("grow_applied", grown=int((doc.label_map.array == new).sum()), colour=list(doc.labels[new].color))

    # 4. a label drawn on one slice, in 3D
    panel.add_label("one slice")
    thin = window.view.active_label
    w.click(panel.tool_buttons["brush"])
    panel.radius.setValue(8.0)
    w.drag(view, [w.point(view, (x - 40 + dx, y - 40, z)) for dx in range(0, 60, 5)])
    window.set_layout("2x2")
    view3d = window.viewer.view3d
    w.until(lambda: thin in view3d.surfaces or "no OpenGL" in view3d.status.text(), 300, "the 3D surfaces")
    w.wait(1500)
    w.step("three_d", status=view3d.status.text(), one_slice_surface=thin in view3d.surfaces,
           slices_of_label=int(np.unique(np.nonzero(doc.label_map.array == thin)[0]).size))

    # 5. save DICOM SEG and NIfTI (the dialogs answered), open the SEG again
    saved: list = []
    window.segmentation_files.saved.connect(saved.append)
    for name, kind in (("walk_seg.dcm", "DICOM SEG (*.dcm)"), ("walk_seg.nii.gz", "NIfTI (*.nii.gz)")):
        target = out / name
        save_dialog.ask_save_path_with_option = lambda *a, t=target, k=kind, **kw: (str(t), k, False)
        before = len(saved)
        window.save_as_action.trigger()
        w.until(lambda b=before: len(saved) > b, 600, f"saving {name}")
        w.step(f"saved_{name.split('.')[-1] if 'nii' not in name else 'nifti'}", path=str(target),
               exists=target.is_file(), unsaved=doc.unsaved)
    opened: list = []
    window.segmentation_files.opened.connect(opened.append)
    window.segmentation_files.open(out / "walk_seg.dcm")
    w.until(lambda: bool(opened), 600, "the SEG to open")
    w.step("reopened", labels={v: e.name for v, e in doc.labels.items()})
    counted: list = []
    window.stats_panel.counted.connect(lambda: counted.append(True))
    window.stats_panel.refresh()
    w.until(lambda: bool(counted), 120, "the statistics to be counted")
    window.stats_dock.raise_()
    w.step("statistics", rows=[window.stats_panel.table.item(r, window.stats_panel.table.columnCount() - 1).text()
                               for r in range(window.stats_panel.table.rowCount())])

    # 6. F1
    window.help.show_shortcuts()
    w.wait(300)
    sheet = window.help.dialog
    w.step("shortcuts", sheet=[sheet.frameGeometry().height(), sheet.screen().availableGeometry().height()])
    sheet.close()

    # 7. acquired slices and back: window, zoom and point kept
    window.view.set_window(80.0, 200.0)
    view.zoom = 1.6
    w.step("before_raw_switch", window_level=(window.view.window_center, window.view.window_width))
    loaded: list = []
    window.loader.study_loaded.connect(loaded.append)
    if window.raw_stack.switch(True):
        w.until(lambda: bool(loaded), 300, "the acquired slices")
        w.step("raw_stack", window_level=(window.view.window_center, window.view.window_width), zoom=view.zoom)
        loaded.clear()
        window.raw_stack.switch(False)
        w.until(lambda: bool(loaded), 300, "the regular grid")

    # 8. Train & Export: fine-tune a new label (keeping the base labels), use it, export it
    from PySide6.QtCore import QTimer

    tab = window.train_tab
    dataset, training, export = tab.dataset_panel, tab.training_panel, tab.export_panel
    window.tabs.setCurrentIndex(1)
    tab.pages.setCurrentWidget(dataset)
    dataset.set_workspace(out / "workspace")
    # the case: the series with only the new label (drawn by hand), as the user had it
    only_new = doc.volume.with_array((doc.label_map.array == new).astype(np.uint8))
    from medseg.edit.label_map import build_label_table

    doc.set_label_map(only_new, build_label_table([1], {1: "lesion"}), description="lesion only")
    w.click(dataset.add_current_button)
    w.until(lambda: dataset.job is None and dataset.training_set.entries
            and dataset.training_set.entries[0].info is not None, 600, "the case")
    doc.mark_saved()
    w.step("train_dataset")
    tab.pages.setCurrentWidget(training)
    training.form.refresh_labels()
    training.form.epochs.setValue(1)
    training.form.iterations.setValue(4)
    training.form.batch_size.setValue(2)
    asked: list = []

    def keep() -> None:
        box = QApplication.activeModalWidget()
        if not isinstance(box, QMessageBox):
            QTimer.singleShot(50, keep)
            return
        asked.append(box.text())
        app.primaryScreen().grabWindow(0).save(str(out / f"walk_{len(w.steps):02d}_keep_question.png"))
        next(b for b in box.buttons() if b.text().startswith("Keep")).click()

    ended: list = []
    training.run_ended.connect(ended.append)
    QTimer.singleShot(0, keep)
    w.click(training.start_button)
    w.until(lambda: any(r.get("event") == "preparing" for r in training.records), 600, "preparing")
    w.step("train_preparing", eta=training.eta_label.text(), progress=training.progress.text())
    w.until(lambda: bool(ended), 3600, "the run")
    w.step("train_done", ended=ended[0].get("event"), asked=asked, log=training.log_pane.toPlainText()[-1500:])
    w.click(training.use_button)
    window.tabs.setCurrentIndex(0)
    segmented.clear()
    window.editing.ask_before_segment = lambda _package, then: then("replace")
    w.click(window.segment_panel.run_button)
    w.until(lambda: bool(segmented), 3600, "Segment with the new model")
    w.step("segmented_new_model", model=segmented[0].model.name,
           found={n: round(ml, 1) for n, ml in segmented[0].volumes_ml.items()})
    window.tabs.setCurrentIndex(1)
    tab.pages.setCurrentWidget(export)
    exported: list = []
    export.exported.connect(exported.append)
    export.failed.connect(exported.append)
    row = export.models.index(ended[0]["package"]) if ended[0].get("package") in export.models else 0
    export.model_list.setCurrentRow(row)
    export.format_combo.setCurrentIndex(0)
    export.export_selected(str(out / "walk_model.onnx"))
    w.until(lambda: bool(exported), 1800, "the export")
    w.step("exported", models=[export.model_list.item(i).text() for i in range(export.model_list.count())],
           parity=export.parity_label.text())

    # 9. an edit, then the machine dies (kill -9): the next start offers to recover it
    window.tabs.setCurrentIndex(0)
    window.set_layout("1x3")
    w.click(panel.tool_buttons["brush"])
    for dy in (0, 30, 60):
        w.drag(view, [w.point(view, (x - 80 + dx, y + dy, z)) for dx in range(0, 100, 5)])
    w.step("before_kill", undo_counter=panel.history_label.text())
    os.kill(os.getpid(), signal.SIGKILL)
    return 0


def recover(series: Path, out: Path) -> int:
    from PySide6.QtGui import QImage

    w = Walk(out, "recover")
    window = w.window
    w.until(lambda: window.editing.recovery_box is not None and window.editing.recovery_box.isVisible(), 60,
            "the recovery offer")
    box = window.editing.recovery_box
    w.wait(500)
    screen = w.app.primaryScreen().grabWindow(0).toImage().convertToFormat(QImage.Format.Format_RGB32)
    own = box.grab().toImage().convertToFormat(QImage.Format.Format_RGB32)
    top_left = box.mapToGlobal(box.rect().topLeft())
    region = screen.copy(top_left.x(), top_left.y(), own.width(), own.height())

    def pixels(image):
        data = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * image.height())
        return data.reshape(image.height(), image.bytesPerLine())[:, : image.width() * 4]

    same = float((pixels(region) == pixels(own)).mean()) if region.size() == own.size() else 0.0
    w.step("recovery_offer", text=box.text(), on_top_share=round(same, 3),
           modality=str(box.windowModality()), active_modal=w.app.activeModalWidget() is box)
    loaded: list = []
    window.loader.study_loaded.connect(loaded.append)
    from PySide6.QtWidgets import QMessageBox

    box.done(QMessageBox.StandardButton.Yes)
    w.until(lambda: bool(loaded) and window.document.label_map is not None, 600, "the recovered study")
    w.step("recovered", labels={v: e.name for v, e in window.document.labels.items()}, unsaved=window.document.unsaved)
    window.document.mark_saved()
    window.close()
    return 0


if __name__ == "__main__":
    if sys.argv[1] in ("walk", "recover"):
        sys.exit({"walk": walk, "recover": recover}[sys.argv[1]](Path(sys.argv[2]), Path(sys.argv[3])))
    sys.exit(run(Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]))
