"""Drives the app's 3D view in a real X window (run by tests/gui/test_view3d.py under Xvfb, xcb).

Not a test module itself: the GL context must come from Qt's xcb platform, and the rest of
the suite runs offscreen in its own process. Usage: ``view3d_probe.py CT OUT_DIR [segment|no-gl]``.
Writes ``OUT_DIR/result.json`` and PNGs; the test judges them.
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEventLoop, QPoint, QStandardPaths, Qt, QTimer
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QApplication


def _bricks_spanned(bricks, surface) -> int:
    """How many bricks a label's surface lies in: its vertices' sample cells, in bricks of the stated size."""
    from medseg.io.mesh import sampling_for

    sampling = sampling_for(bricks.geometry.spacing_zyx, surface.sample_mm, bricks.smoothing)
    cells_zyx = bricks.geometry.physical_to_index(surface.vertices)[:, ::-1] / np.asarray(sampling.step_zyx)
    return len({tuple(key) for key in np.floor(cells_zyx / bricks.brick_cells).astype(int)})


def wait_for(signal, timeout_ms: int) -> list:
    """Run the event loop until ``signal`` fires (its arguments) or the time is up."""
    loop, got = QEventLoop(), []
    signal.connect(lambda *args: (got.extend(args) or True) and loop.quit())
    QTimer.singleShot(timeout_ms, loop.quit)
    loop.exec()
    return got


def settle(ms: int = 300) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def blue_mask(image) -> np.ndarray:
    """Pixels of the starter's lungs colour (70, 150, 230), however lit or seen through the body."""
    from PySide6.QtGui import QImage

    image = image.convertToFormat(QImage.Format.Format_RGB888)
    w, h, stride = image.width(), image.height(), image.bytesPerLine()
    rgb = np.frombuffer(image.constBits(), np.uint8, count=stride * h).reshape(h, stride)[:, : w * 3]
    rgb = rgb.reshape(h, w, 3).astype(int)
    r, g, b = rgb[..., 0], rgb[..., 1], rgb[..., 2]
    return (b > r + 40) & (b > g + 10) & (b > 60)


def main() -> int:
    ct, out, mode = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    QStandardPaths.setTestModeEnabled(True)
    from medseg.gui.common import app_settings
    from medseg.gui.shell.main_window import MainWindow

    app_settings.settings().clear()
    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    window.set_layout("2x2")
    view3d = window.viewer.view3d
    result: dict = {"platform": app.platformName()}
    window.opener.open_path(str(ct))
    wait_for(window.loader.study_loaded, 120_000)
    settle()
    result["gl"] = view3d.ensure_gl()
    result["status"] = view3d.status.text()
    if mode == "no-gl":
        result.update(message=view3d.message.text(), message_visible=view3d.message.isVisible(),
                      slices_shown=window.viewer.views["axial"].isVisible())
        window.grab().save(str(out / "window_no_gl.png"))
    else:
        run_segment(window, view3d, out, result)
    out.joinpath("result.json").write_text(json.dumps(result))
    window.close()
    return 0


def run_segment(window, view3d, out: Path, result: dict) -> None:
    doc = window.document
    started = time.perf_counter()
    window.segmenting.segment()
    assert wait_for(window.loader.segmented, 900_000), "Segment did not finish"
    result["segment_s"] = time.perf_counter() - started
    started = time.perf_counter()
    view3d.wait_idle()
    result["mesh_after_segment_s"] = time.perf_counter() - started
    settle()
    values = {entry.name: value for value, entry in doc.labels.items()}
    result["labels"] = values
    lungs = values["lungs"]
    image = view3d.render_image()
    image.save(str(out / "view3d_lungs.png"))
    blue = blue_mask(image)
    half = blue.shape[1] // 2
    result["lung_pixels_left_half"] = int(blue[:, :half].sum())
    result["lung_pixels_right_half"] = int(blue[:, half:].sum())
    result["image_pixels"] = int(blue.size)
    window.grab().save(str(out / "window_2x2_3d.png"))

    doc.set_label_visible(lungs, False)
    settle()
    hidden = view3d.render_image()
    hidden.save(str(out / "view3d_lungs_hidden.png"))
    result["lung_pixels_hidden"] = int(blue_mask(hidden).sum())
    doc.set_label_visible(lungs, True)
    settle()

    # click on the lung on the screen's right: the patient's left in the anterior view
    ys, xs = np.nonzero(blue[:, half:])
    target = QPoint(int(np.median(xs)) + half, int(np.median(ys)))
    scale = view3d.gl_view.width() / image.width()  # the framebuffer may be in device pixels
    click = QPoint(round(target.x() * scale), round(target.y() * scale))
    QTest.mouseClick(view3d.gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, click)
    settle()
    cursor = window.view.cursor_xyz
    label_array = doc.label_map.array
    lung_x = np.nonzero(label_array == lungs)[2]
    result["picked_voxel"] = list(cursor)
    result["picked_label"] = int(label_array[cursor[2], cursor[1], cursor[0]])
    result["picked_lps"] = [float(v) for v in doc.volume.index_to_physical(cursor)]
    result["lungs_mean_lps_x"] = float(doc.volume.index_to_physical([float(lung_x.mean()), 0, 0])[0])

    # a drag turns the scene: the coarse copies are drawn meanwhile, the full surfaces after
    gl_view = view3d.gl_view
    centre = QPoint(gl_view.width() // 2, gl_view.height() // 2)
    azimuth = gl_view.opts["azimuth"]
    QTest.mousePress(gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre)
    QTest.mouseMove(gl_view, centre + QPoint(40, 0))
    QTest.mouseMove(gl_view, centre + QPoint(80, 0))
    result["while_turning"] = {"fine_shown": len(view3d.drawn()[0]), "coarse_shown": len(view3d.drawn()[1]),
                               "azimuth_change": gl_view.opts["azimuth"] - azimuth}
    QTest.mouseRelease(gl_view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, centre + QPoint(80, 0))
    result["after_turning"] = {"fine_shown": len(view3d.drawn()[0]), "coarse_shown": len(view3d.drawn()[1]),
                               "cursor_unchanged": list(window.view.cursor_xyz) == result["picked_voxel"]}
    view3d.save_screenshot(out / "saved_3d.png")

    # for the README: the slices at the picked point, the 3D view turned a little
    view3d.gl_view.set_camera(None, None, 18.0, -62.0)
    settle(500)
    window.grab().save(str(out / "window_2x2_3d_oblique.png"))
    view3d.set_standard_view("A")

    # a brush stroke of lungs into the body, away from the bones: only the touched labels re-mesh
    bricks = view3d.surface_bricks
    before = dict(bricks.meshings)
    bricks_before = {v: _bricks_spanned(bricks, bricks.surface(v)) for v in bricks.values}
    panel, axial = window.editing.panel, window.viewer.views["axial"]
    z = 24
    # a 60-voxel stroke (radius 5 mm ≈ 9 voxels) whose reach holds body and lungs but no bone
    row, x0 = next((y, x) for y in range(150, 400, 5) for x in range(100, 400, 10)
                   if set(np.unique(label_array[z - 1:z + 2, y - 12:y + 13, x - 12:x + 73]).tolist()) == {1, 2})
    window.view.set_cursor((x0, row, z))
    settle()
    panel.tool_buttons["brush"].click()
    panel.radius.setValue(5.0)
    window.view.set_active_label(lungs)
    points = []
    for x in range(x0, x0 + 61, 10):
        p = axial.index_to_widget((x, row, z))
        points.append(QPoint(round(p.x()), round(p.y())))
    box_values_before = np.unique(label_array[z, row - 12:row + 13, x0 - 12:x0 + 73]).tolist()
    QTest.mousePress(axial, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
    for p in points[1:]:
        QTest.mouseMove(axial, p)
    started = time.perf_counter()
    QTest.mouseRelease(axial, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])
    view3d.wait_idle()
    result["remesh_after_stroke_s"] = time.perf_counter() - started
    result["stroke_values_under_brush"] = box_values_before
    result["meshings_by_stroke"] = {str(v): bricks.meshings[v] - before.get(v, 0) for v in bricks.values}
    result["bricks_per_label"] = {str(v): n for v, n in bricks_before.items()}
    window.document.mark_saved()


if __name__ == "__main__":
    sys.exit(main())
