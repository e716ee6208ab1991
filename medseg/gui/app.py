"""Start the desktop app: ``run_gui(path)`` (``medseg`` / ``medseg gui``) and the demo."""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path

log = logging.getLogger(__name__)


def display_available() -> bool:
    """False when Qt would abort for lack of a display (stack-notes §2.2)."""
    if os.environ.get("QT_QPA_PLATFORM"):
        return True
    if sys.platform.startswith("linux"):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True


def _application():
    from PySide6.QtWidgets import QApplication

    from medseg.gui.common.app_settings import APPLICATION, ORGANIZATION
    from medseg.gui.shell.platform_check import ensure_platform

    app = QApplication.instance()
    if app is None:
        # Qt aborts the process when its platform plugin cannot load; say why instead.
        platform = ensure_platform()
        log.info("Qt platform: %s", platform or "default")
        app = QApplication(sys.argv[:1])
    app.setOrganizationName(ORGANIZATION)
    app.setApplicationName(APPLICATION)
    return app


def run_gui(path: str | None = None, demo: bool = False, screenshot: str | None = None,
            quit_after: float | None = None, labels: str | None = None) -> int:
    """Show the main window (optionally opening ``path`` or the demo) and run the event loop.

    ``labels``: a segmentation file (label map or DICOM SEG) to open over the study once it is shown.

    ``screenshot``: save a PNG of the window once the study is shown (and quit when
    ``quit_after`` is not given). ``quit_after``: close after that many seconds.
    """
    from medseg.gui.shell.platform_check import ensure_platform

    # Before any Qt library loads: a missing system library is named, not an ImportError or abort.
    ensure_platform()
    from PySide6.QtCore import QTimer

    from medseg.gui.common.app_settings import setup_logging
    from medseg.gui.shell.main_window import MainWindow

    app = _application()
    log_path = setup_logging()
    log.info("medseg GUI starting (log %s)", log_path)
    from medseg.gui.shell.unix_signals import SignalCloser

    window = MainWindow()
    if app.platformName() == "offscreen":
        # No real screen: the offscreen platform's is a fictional 800 x 800, and 92 % of it
        # is narrower than the side panel needs; render a clinician's window size instead.
        window.resize(1400, 900)
    window.show()
    closer = SignalCloser(window)
    state = {"code": 0}

    def save_screenshot() -> None:
        if screenshot:
            app.processEvents()
            Path(screenshot).parent.mkdir(parents=True, exist_ok=True)
            window.grab().save(str(screenshot))
            print(f"screenshot saved to {screenshot}", flush=True)
            from medseg.gui.viewer.gl_support import gl_support

            support = gl_support()  # the installers' smoke test reads this line
            # What the pane shows (its status line: surfaces and triangles) when it draws at all.
            shown = window.viewer.view3d.status.text().removeprefix("3D · ")
            print(f"3D view: OpenGL {support.version} on {support.renderer}; {shown}" if support.available
                  else f"3D view: unavailable: {support.problem}", flush=True)
        if quit_after is None and screenshot:
            window.close()

    def on_failed(error) -> None:
        if screenshot or quit_after is not None:
            print(f"medseg: error: {error}", file=sys.stderr)
            state["code"] = 1
            save_screenshot()

    def after_study(_volume) -> None:
        if labels and not state.get("labels_opened"):
            state["labels_opened"] = True
            if not window.segmentation_files.open(labels):
                on_failed(f"cannot open {labels} over this study")
            return
        when_planned(save_screenshot)

    def when_planned(then) -> None:
        """``then`` once the Segment panel shows its plan (it waits for the AI runtime's import), and the
        window has painted: a screenshot taken before showed a panel the screen no longer did."""
        panel = window.segment_panel
        if panel.runtime_ready:
            QTimer.singleShot(300, then)
        else:
            panel.runtime_prepared.connect(lambda: QTimer.singleShot(300, then))

    def after_labels(_opened) -> None:
        # The screenshot shows the 3D surfaces too: wait until the meshing worker has them.
        window.viewer.view3d.wait_idle(120_000)
        when_planned(save_screenshot)

    window.loader.study_loaded.connect(after_study)
    window.segmentation_files.opened.connect(after_labels)
    window.segmentation_files.failed.connect(on_failed)
    window.loader.failed.connect(on_failed)
    window.error_shown.connect(lambda _m: None)
    # Opening starts after the first paint: the window appears at once, and the I/O stack
    # (pydicom, SimpleITK, scipy) is imported while it is already on screen.
    if demo:
        QTimer.singleShot(0, window.opener.open_demo)
    elif path:
        QTimer.singleShot(0, lambda: window.opener.open_path(path, auto_load=True))
    elif screenshot:
        QTimer.singleShot(500, save_screenshot)
    if quit_after is not None:
        QTimer.singleShot(int(quit_after * 1000), window.close)
    app.exec()
    closer.restore()
    # Tear the widgets down while Python is still fully alive: letting the interpreter's
    # final garbage collection destroy Qt objects crashed PySide6 6.12 once in our runs (kept for 6.11).
    window.deleteLater()
    app.processEvents()
    # the last reference (the callbacks above hold the same cell, typed MainWindow for them; none runs after exec)
    window = None  # type: ignore[assignment]
    import gc

    gc.collect()
    return state["code"]
