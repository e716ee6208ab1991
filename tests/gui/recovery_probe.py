"""The recovery offer in a REAL window (run by tests/gui/test_recovery_real_window.py under Xvfb, xcb; not a
test module). Usage: ``recovery_probe.py CT OUT_DIR``. Leaves an autosaved session open (as a kill -9
does), starts the window (2 × 2 layout: its 3D view's OpenGL surface remakes the native window), waits for
the offer and grabs the X screen; writes OUT_DIR/result.json with how much of the box the screen shows."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import numpy as np
from PySide6.QtCore import QEventLoop, QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication


def wait(ms: int) -> None:
    loop = QEventLoop()
    QTimer.singleShot(ms, loop.quit)
    loop.exec()


def pixels(image: QImage) -> np.ndarray:
    image = image.convertToFormat(QImage.Format.Format_RGB32)
    data = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * image.height())
    return data.reshape(image.height(), image.bytesPerLine())[:, : image.width() * 4].copy()


def main() -> int:
    ct, out = Path(sys.argv[1]), Path(sys.argv[2])
    out.mkdir(parents=True, exist_ok=True)
    app = QApplication(sys.argv[:1])
    from medseg.edit import tools
    from medseg.edit.document import SegmentationDocument
    from medseg.gui.editing.edit_session import journal_root
    from medseg.gui.shell.main_window import MainWindow
    from medseg.io import read_image

    crashed = SegmentationDocument()  # never closed: what a kill -9 leaves
    crashed.enable_autosave(journal_root())
    crashed.set_volume(read_image(ct), source=str(ct))
    crashed.new_label_map()
    crashed.apply(tools.dab(crashed.label_map, (24, 250, 250), 12.0, 3), "dab")
    crashed.journal.owner_lock.abandon()  # the kernel's part of a kill: its journal's lock goes
    window = MainWindow()
    window.set_layout("2x2")
    window.show()
    deadline = time.monotonic() + 60
    while (window.editing.recovery_box is None or not window.editing.recovery_box.isVisible()) \
            and time.monotonic() < deadline:
        wait(50)
    box = window.editing.recovery_box
    wait(1500)  # the 3D view's surface made, the window mapped again
    screen = app.primaryScreen().grabWindow(0)
    screen.save(str(out / "recovery_offer_screen.png"))
    own = box.grab().toImage()
    corner = box.mapToGlobal(box.rect().topLeft())
    shown = screen.toImage().copy(corner.x(), corner.y(), own.width(), own.height())
    same = float((pixels(shown) == pixels(own)).mean()) if shown.size() == own.size() else 0.0
    (out / "result.json").write_text(json.dumps({
        "platform": app.platformName(), "box_shown_share": same, "text": box.text(),
        "modal": app.activeModalWidget() is box, "gl_status": window.viewer.view3d.status.text()}))
    window.document.mark_saved()
    window.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
