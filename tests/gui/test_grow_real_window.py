"""Grow from seeds in a REAL window (Xvfb, Qt's xcb plugin): seeds painted with synthetic mouse events on the
axial view of lung1, the preview grown in the worker, Apply; the screen is then read back from the X server."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import numpy as np
import pytest
from PySide6.QtGui import QImage
from test_real_window import _as_array, _x_env, x_display  # noqa: F401 - the module's Xvfb fixture

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/xcb is the Linux desktop")

_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    from PySide6.QtCore import QEventLoop, QPoint, Qt, QTimer
    from PySide6.QtGui import QGuiApplication
    from PySide6.QtTest import QTest
    from PySide6.QtWidgets import QApplication
    from medseg.gui.shell.main_window import MainWindow
    from medseg.io import read_image

    image_path, label_path, shot = sys.argv[1:4]
    app = QApplication(["medseg"])
    assert app.platformName() == "xcb", app.platformName()

    def wait_for(signal, done, timeout_s):
        # run the event loop until done(), woken by the signal (never by the clock), or fail at the timeout
        loop, timer = QEventLoop(), QTimer()
        timer.setSingleShot(True)
        timer.timeout.connect(loop.quit)
        signal.connect(loop.quit)
        timer.start(int(timeout_s * 1000))
        while not done() and timer.isActive():
            loop.exec()
        signal.disconnect(loop.quit)
        assert done(), f"not done after {timeout_s} s"

    def on_screen():
        # paint the whole window now and wait until the X server has it (what a grab reads)
        window.repaint()
        app.sync()

    window = MainWindow()
    window.resize(1400, 900)
    window.show()
    loaded = []
    window.loader.study_loaded.connect(loaded.append)
    window.opener.open_path(image_path, auto_load=True)
    wait_for(window.loader.study_loaded, lambda: bool(loaded), 180)
    nodule = read_image(label_path).array == 1
    doc, panel = window.document, window.editing.panel
    doc.new_label_map()
    panel.add_label("nodule")  # the Edit panel's Add: the new label becomes the active one
    panel.tool_buttons["grow-from-seeds"].click()
    panel.radius.setValue(2.0)
    view = window.viewer.views["axial"]
    cx, cy, cz = (int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0))[::-1])

    def at(x, y, z):
        p = view.index_to_widget((x, y, z))
        return QPoint(round(p.x()), round(p.y()))

    for kind in ("structure", "background"):
        panel.options.widgets["seed_kind"].setCurrentText(kind)
        for z in (cz - 1, cz, cz + 1):
            window.view.set_cursor((cx, cy, z))
            app.processEvents()
            if kind == "structure":
                points = [at(cx, cy, z)]
            else:
                points = [at(cx + 22 * np.cos(a), cy + 22 * np.sin(a), z) for a in np.linspace(0, 2 * np.pi, 40)]
            QTest.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[0])
            for p in points[1:]:
                QTest.mouseMove(view, p)
                app.processEvents()
            QTest.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, points[-1])
            app.processEvents()
    grow = window.view.tools.grow
    wait_for(panel.grow_runner.preview_shown,
             lambda: not panel.grow_runner.busy() and not grow.pending() and grow.preview is not None, 120)
    on_screen()
    preview = QGuiApplication.primaryScreen().grabWindow(0)  # the root window, as the X server holds it
    preview.save(shot + ".preview.png")
    assert panel.options.run("seeds", "apply")
    grown = doc.label_map.array == window.view.active_label
    dice = 2 * (grown & nodule).sum() / (grown.sum() + nodule.sum())
    on_screen()
    QGuiApplication.primaryScreen().grabWindow(0).save(shot)
    print(f"grown in a real window: Dice {dice:.4f}, undo steps {doc.history.depth}", flush=True)
    doc.mark_saved()
    window.close()
""")


def test_grow_from_seeds_in_a_real_window(x_display, ct_dir, tmp_path, artifacts_dir):
    shot = artifacts_dir / "real_window_grow_seeds.png"
    result = subprocess.run([sys.executable, "-c", _SCRIPT, str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"),
                             str(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd"), str(shot)],
                            env=_x_env(x_display, tmp_path), capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    line = next(line for line in result.stdout.splitlines() if line.startswith("grown in a real window"))
    dice = float(line.split("Dice ")[1].split(",")[0])
    assert dice >= 0.70 and "undo steps 1" in line
    screen = _as_array(QImage(str(shot)))
    preview = _as_array(QImage(str(shot) + ".preview.png"))
    # background seeds are drawn cyan (0, 229, 255) over the CT while the preview is on screen; after Apply they go
    cyan = lambda rgb: np.all(rgb == (0, 229, 255), axis=-1).sum()  # noqa: E731
    assert cyan(preview) > 50 and cyan(screen) == 0
    assert len(np.unique(screen[..., 0])) > 100, "no CT greyscale on the screen"
