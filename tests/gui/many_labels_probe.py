"""Drives the app with TotalSegmentator's 117 structures in a real X window (run by test_many_labels_window.py).

Not a test module itself: the 3D view needs Qt's xcb platform and an OpenGL context (Mesa llvmpipe
under Xvfb), and the rest of the suite runs offscreen. Usage:
``many_labels_probe.py SERIES LABELS.nii.gz OUT_DIR``. Writes ``OUT_DIR/result.json`` and PNGs; the
test judges them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QPoint, QStandardPaths, Qt
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication
from view3d_probe import settle, wait_for


def visible_items(view3d, values) -> int:
    """How many of ``values`` the 3D view's next frame draws (in full or from their coarse copies)."""
    full, coarse = view3d.drawn()
    return len(set(values) & (set(full) | set(coarse)))


def colour_pixels(image, color, tolerance: int = 60) -> np.ndarray:
    """Pixels of a structure's colour however it is lit (the headlight scales it from 0.3 to 1.25 of itself)."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    rgb = np.frombuffer(image.constBits(), np.uint8, count=stride * h).reshape(h, stride)[:, : w * 3]
    rgb = rgb.reshape(h, w, 3).astype(float)
    target = np.asarray(color, float)
    brightness = rgb.sum(axis=2) / max(target.sum(), 1.0)
    return (np.abs(rgb - target[None, None] * brightness[..., None]).max(axis=2) < tolerance / 4) & (brightness > 0.25)


def main() -> int:
    series, labels_path, out = Path(sys.argv[1]), Path(sys.argv[2]), Path(sys.argv[3])
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    QStandardPaths.setTestModeEnabled(True)
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow

    app_settings.settings().clear()
    window = MainWindow()
    window.resize(1600, 1000)
    window.show()
    window.set_layout("2x2")
    view3d = window.viewer.view3d
    result: dict = {"platform": app.platformName()}
    window.opener.open_path(str(series), auto_load=True)
    wait_for(window.loader.study_loaded, 120_000)
    settle()
    result["gl"] = view3d.ensure_gl()
    result["renderer"] = view3d.status.text()
    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")
    started = time.perf_counter()
    window.segmentation_files.open(labels_path)
    wait_for(window.segmentation_files.opened, 120_000)
    view3d.wait_idle(300_000)
    settle(500)
    result["first_full_set_s"] = time.perf_counter() - started
    doc = window.document
    result["labels"] = len(doc.labels)
    result["surfaces"] = len(view3d.surfaces)
    result["triangles"] = sum(s.n_triangles for s in view3d.surfaces.values())
    result["status_after_open"], result["status_tip"] = view3d.status.text(), view3d.status.toolTip()
    finest = min(doc.volume.spacing_mm)
    result["sampled_coarser"] = sum(s.sample_mm > finest * 1.01 for s in view3d.surfaces.values())
    panel = window.overlay_panel.labels
    window.side_scroll.ensureWidgetVisible(panel.tree)
    liver = next(v for v, e in doc.labels.items() if e.name == "liver")
    panel.jump_to(liver)
    view3d.gl_view.set_camera(None, None, 18.0, -62.0)
    settle(800)
    window.grab().save(str(out / "window_117.png"))
    view3d.set_standard_view("A")
    settle(500)

    # hiding the ribs group: its rows, its overlay and its surfaces, without meshing anything again
    ribs = [v for v, e in doc.labels.items() if e.group == "ribs"]
    meshings = dict(view3d.surface_bricks.meshings)
    uploads = view3d.scene.uploads
    result["ribs"] = len(ribs)
    result["ribs_surfaces_shown_before"] = visible_items(view3d, ribs)
    group = panel.proxy.mapFromSource(panel.model.group_index("ribs"))
    panel.tree.setFocus()
    panel.tree.setCurrentIndex(group)
    started = time.perf_counter()
    QTest.keyClick(panel.tree, Qt.Key.Key_Space)
    result["toggle_handled_s"] = time.perf_counter() - started
    result["coarse_while_settling"] = len(view3d.drawn()[1])
    settle(800)  # the full surfaces come back once the changes stop
    result["ribs_hidden_in_table"] = sum(not doc.labels[v].visible for v in ribs)
    result["others_hidden"] = sum(not e.visible for v, e in doc.labels.items() if v not in ribs)
    result["ribs_surfaces_shown_after"] = visible_items(view3d, ribs)
    result["other_surfaces_shown_after"] = visible_items(view3d, [v for v in view3d.surfaces if v not in ribs])
    result["meshed_again"] = sum(view3d.surface_bricks.meshings[v] - meshings.get(v, 0) for v in meshings)
    view3d.gl_view.repaint()  # the full surfaces drawn again, the ribs left out
    result["uploaded_again"] = view3d.scene.uploads - uploads
    view3d.render_image().save(str(out / "view3d_ribs_hidden.png"))
    QTest.keyClick(panel.tree, Qt.Key.Key_Space)
    settle()

    # a click on the liver in the 3D view names it and selects its row
    solo = [liver]
    doc.show_only(solo)
    settle()
    image = view3d.render_image()
    image.save(str(out / "view3d_liver.png"))
    mask = colour_pixels(image, doc.labels[liver].color)
    ys, xs = np.nonzero(mask)
    result["liver_pixels"] = int(mask.sum())
    doc.set_all_labels_visible(True)
    settle()
    if len(xs):
        scale = view3d.gl_view.width() / image.width()
        target = QPoint(round(float(np.median(xs)) * scale), round(float(np.median(ys)) * scale))
        QTest.mouseClick(view3d.gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, target)
        settle()
        result["picked_value"] = view3d.picked_value
        result["picked_status"] = view3d.status.text()
        current = panel.model.value_at(panel.proxy.mapToSource(panel.tree.currentIndex()))
        result["selected_row_value"] = current
    result["liver"] = liver

    # rotation: frames drawn while the mouse turns the scene (the coarse copies)
    gl_view = view3d.gl_view
    centre = QPoint(gl_view.width() // 2, gl_view.height() // 2)
    QTest.mousePress(gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre)
    QTest.mouseMove(gl_view, centre + QPoint(10, 0))
    times = []
    for step in range(20):
        QTest.mouseMove(gl_view, centre + QPoint(12 + 4 * step, 0))
        started = time.perf_counter()
        gl_view.repaint()
        app.processEvents()
        times.append(time.perf_counter() - started)
    QTest.mouseRelease(gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre + QPoint(92, 0))
    result["turning_frame_ms_median"] = float(np.median(times) * 1000)
    result["coarse_triangles"] = sum(s.n_triangles for s in view3d.coarse_surfaces.values())
    settle()
    window.document.mark_saved()
    out.joinpath("result.json").write_text(json.dumps(result))
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
