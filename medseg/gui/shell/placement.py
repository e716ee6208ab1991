"""Where the window opens and what it remembers: its geometry, the layout, the overlay's opacity."""

from __future__ import annotations

from PySide6.QtCore import QByteArray, QObject, Qt, QTimer
from PySide6.QtWidgets import QApplication, QMainWindow

from medseg.gui.common import app_settings
from medseg.gui.common.view_state import ViewState
from medseg.gui.viewer.layout import LAYOUTS, ViewerPanel


class WindowPlacement(QObject):
    def __init__(self, window: QMainWindow, viewer: ViewerPanel, view: ViewState) -> None:
        super().__init__(window)
        self.window, self.viewer, self.view = window, viewer, view
        self.placed = False  # True once the first show has put the window where it belongs
        self._first_placement = True
        self._saved_geometry: QByteArray | None = None

    def restore(self) -> None:
        # Placed once shown: the first layout pass widens a window sized before it (to the toolbar's width).
        self._saved_geometry, layout, opacity = app_settings.load_placement()
        self.viewer.choose_layout(layout if layout in LAYOUTS else "2x2")  # 2x2: the biggest views on a wide screen
        self.view.set_overlay_opacity(opacity)

    def shown(self) -> None:
        """The window's showEvent: the first one places it (unless a caller sized it: that is kept)."""
        if self._first_placement:
            self._first_placement = False
            if not self.window.testAttribute(Qt.WidgetAttribute.WA_Resized):
                QTimer.singleShot(0, self._place)

    def save(self) -> None:
        app_settings.save_placement(self.window.saveGeometry(),
                                    self.viewer.layout_name if self.viewer.layout_name != "single" else "1x3",
                                    self.view.overlay_opacity)

    def _place(self) -> None:
        """Where the user left the window last time, else most of the screen."""
        if self._saved_geometry is None or not self.window.restoreGeometry(self._saved_geometry):
            self._fill_most_of_the_screen()
        self.placed = True

    def _fill_most_of_the_screen(self) -> None:
        """The first start: 92 % of the screen, centred (a clinician's 1600 x 1000 screen is not 1014 x 874)."""
        window = self.window
        screen = window.screen() or QApplication.primaryScreen()
        if screen is None:
            window.resize(1400, 900)
            return
        area = screen.availableGeometry()
        # The window system's frame comes on top of the size given here; on a small screen the
        # window takes as little as it needs and stays on the screen where it can.
        frame_w = window.frameGeometry().width() - window.width()
        frame_h = window.frameGeometry().height() - window.height()
        least = window.minimumSizeHint()
        width = max(least.width(), min(int(area.width() * 0.92), area.width() - frame_w))
        height = max(least.height(), min(int(area.height() * 0.92), area.height() - frame_h))
        window.resize(width, height)
        window.move(area.x() + max(0, (area.width() - width - frame_w) // 2),
                    area.y() + max(0, (area.height() - height - frame_h) // 2))
