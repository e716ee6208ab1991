"""A clinician's first hour, run in a REAL window (started by tests/gui/test_real_window_walkthrough.py).

Usage: python walkthrough_script.py SERIES_FOLDER OUT_FOLDER  (DISPLAY must name an X server; no
QT_QPA_PLATFORM). Opens the series, segments it, paints with the brush, grows the label, saves a
DICOM SEG, opens it again, and quits — driving the real widgets with QTest — and grabs the whole X
screen (the root window, through the xcb plugin) after each step. Writes OUT/steps.json with what
each step showed, for the test to check.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEventLoop, QPoint, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication


def main(series: Path, out: Path) -> int:
    app = QApplication(sys.argv[:1])
    assert app.platformName() == "xcb", app.platformName()
    from medseg.gui.common import save_dialog
    from medseg.gui.shell.main_window import MainWindow

    window = MainWindow()
    window.show()
    steps: list[dict] = []

    def wait(ms: int) -> None:
        loop = QEventLoop()
        QTimer.singleShot(ms, loop.quit)
        loop.exec()

    def until(condition, timeout_s: float, what: str) -> None:
        deadline = time.monotonic() + timeout_s
        while not condition():
            if time.monotonic() > deadline:
                raise SystemExit(f"timed out waiting for: {what}")
            wait(50)

    def step(name: str, **facts) -> None:
        wait(300)  # let the X server draw what Qt sent
        shot = out / f"walk_{len(steps):02d}_{name}.png"
        app.primaryScreen().grabWindow(0).save(str(shot))
        steps.append({"step": name, "screenshot": str(shot), "readout": window.position_label.text(),
                      "message": window.messages.text(), "title": window.windowTitle(),
                      "window": [window.width(), window.height()], **facts})
        print(f"step {name}", flush=True)

    until(lambda: window.isVisible() and window.width() > 1000, 30, "the window on screen")
    step("start")

    # 1. Open the series (File ▸ Open DICOM folder…: the folder dialog answered).
    window.opener.open_path(str(series), auto_load=True)
    until(lambda: window.document.volume is not None and not window.loader.busy, 240, "the series")
    view = window.viewer.views["axial"]
    centre = QPoint(view.width() // 2, view.height() // 2)
    QTest.mouseMove(view, centre)
    step("opened", banner=window.findings_banner.label.text() if window.findings_banner.isVisible() else "")

    # 2. Segment with the built-in model (the Segment panel's button, clicked).
    segmented: list = []
    window.loader.segmented.connect(segmented.append)
    button = window.segment_panel.run_button
    window.side_scroll.ensureWidgetVisible(button)
    QTest.mouseClick(button, Qt.MouseButton.LeftButton)
    until(lambda: bool(segmented), 600, "Segment")
    labels = {value: entry.name for value, entry in window.document.labels.items()}
    step("segmented", labels=labels, segment_result=window.segment_panel.result_label.text(),
         segment_result_visible=window.segment_panel.result_label.isVisible())

    # 3. Paint a lesion with the brush (B), then grow it 2 mm.
    doc, panel = window.document, window.editing.panel
    panel.add_label("lesion")
    lesion = window.view.active_label
    QTest.mouseClick(panel.tool_buttons["brush"], Qt.MouseButton.LeftButton)
    panel.radius.setValue(6.0)
    QTest.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre)
    for dx in range(0, 40, 4):
        QTest.mouseMove(view, centre + QPoint(dx, dx // 2))
    QTest.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre + QPoint(36, 18))
    painted = int((doc.label_map.array == lesion).sum())
    panel.setting_boxes["margin_mm"].setValue(2.0)
    panel.operation_buttons["grow"].click()
    grown = int((doc.label_map.array == lesion).sum())
    step("edited", lesion=lesion, painted_voxels=painted, grown_voxels=grown)

    # 4. Save as DICOM SEG (the dialog answered with a name), then open it again onto the image.
    seg = out / "walkthrough_seg.dcm"
    save_dialog.ask_save_path_with_option = lambda *a, **k: (str(seg), "DICOM SEG (*.dcm)", False)
    saved: list = []
    window.segmentation_files.saved.connect(saved.append)
    window.save_as_action.trigger()  # File ▸ Save segmentation as…
    until(lambda: bool(saved), 240, "the SEG save")
    before = doc.label_map.array.copy()
    step("saved", seg=str(seg), unsaved_after_save=doc.unsaved)
    opened: list = []
    window.segmentation_files.opened.connect(opened.append)
    window.segmentation_files.open(seg)
    until(lambda: bool(opened), 240, "the SEG to open")
    after = doc.label_map.array
    # The same partition of the voxels (a SEG numbers its segments 1..N: values may be renumbered).
    pairs = np.unique(np.stack([before.ravel(), after.ravel()]), axis=1)
    same = pairs.shape[1] == len(np.unique(before)) == len(np.unique(after))
    step("reopened", same_voxels=same, labels_after=len(doc.labels))

    # 5. Quit: nothing unsaved, so no question.
    window.close()
    wait(300)
    steps.append({"step": "quit", "visible_after_close": window.isVisible()})
    (out / "steps.json").write_text(json.dumps(steps, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(Path(sys.argv[1]), Path(sys.argv[2])))
