"""The bottom docks keep their share of the window's height, so the views keep theirs (issue #42.15).

Qt keeps a dock's height in pixels when the window changes size: on a 1280 × 800 laptop the label statistics
took 230 of 800 px and left the slice views half the window. Here the docks start at ``share`` of the height
and keep the share the user leaves them at: drag the separator, and that becomes the share.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtWidgets import QDockWidget, QMainWindow, QTabWidget

BOTTOM_DOCK_SHARE = 0.25  # of the window's height: four label rows at 800 px, six at 1000


class DockShare(QObject):
    """Watches the window's resizes: the docks' area is set to ``share`` of the new height, after taking the
    share the user dragged it to since (Qt keeps the area's pixels through a resize, so a changed area is a drag,
    unless a dock's least height held it up)."""

    def __init__(self, window: QMainWindow, docks: tuple[QDockWidget, ...], share: float = BOTTOM_DOCK_SHARE) -> None:
        super().__init__(window)
        self.window, self.docks, self.share = window, docks, share
        self._height: int | None = None  # the height last given: another one since is the user's drag
        self._window_height = 0  # the window's height then
        window.installEventFilter(self)
        for dock in docks:
            dock.installEventFilter(self)

    def _shown(self) -> QDockWidget | None:
        return next((dock for dock in self.docks if dock.isVisible() and not dock.isFloating()), None)

    def eventFilter(self, watched, event) -> bool:  # noqa: N802
        if event.type() == QEvent.Type.Resize and watched is self.window:
            dock = self._shown()
            old = event.oldSize().height()
            if dock is not None and self._height is not None and old > 0 and self._moved(dock):
                self.share = self.area(dock) / old  # the user moved the separator since (Qt kept its pixels)
            self.apply()
        elif event.type() == QEvent.Type.Show and watched in self.docks and self.window.height() != self._window_height:
            self.apply()  # back from another tab, where the window changed size
        return False

    def _moved(self, dock: QDockWidget) -> bool:
        """Whether the docks' area is not the height last given (nor held at the least height of a dock in it)."""
        assert self._height is not None, "eventFilter asks only once apply() gave a height"
        area = self.area(dock)
        least = max(d.minimumSizeHint().height() for d in self.docks if d.toggleViewAction().isChecked())
        held = area > self._height and dock.height() <= least + 2
        return abs(area - self._height) > 2 and not held

    def area(self, dock: QDockWidget) -> int:
        """The height of the docks' area (what resizeDocks sizes): the dock and the tab bar of tabified docks."""
        bar = self.window.statusBar()
        bottom = bar.geometry().top() if bar.isVisible() else self.window.height()
        return bottom - dock.geometry().top()

    def apply(self) -> None:
        dock = self._shown()
        if dock is None or self.window.height() <= 0:
            return
        self._height, self._window_height = round(self.share * self.window.height()), self.window.height()
        self.window.resizeDocks([dock], [self._height], Qt.Orientation.Vertical)


class DocksOfFirstTab(QObject):
    """The label statistics and study details belong to the Segment tab: on Train & Export they took a third of
    the height and left its log two lines; they come back as they were (the one raised of the tabified docks too)."""

    def __init__(self, tabs: QTabWidget, docks: tuple[QDockWidget, ...]) -> None:
        super().__init__(tabs)
        self.docks = docks
        self._put_away: list[QDockWidget] = []  # the docks shown on the first tab, while another one is shown
        self._raised: QDockWidget | None = None
        tabs.currentChanged.connect(self._on_tab_changed)

    def _on_tab_changed(self, index: int) -> None:
        if index != 0:
            if not self._put_away:
                raised = [d for d in self.docks if d.isVisible()]  # the tab shown of the two tabified docks
                self._put_away = [d for d in self.docks if d.toggleViewAction().isChecked()]
                self._raised = raised[0] if raised else None
                for dock in self._put_away:
                    dock.hide()
            return
        for dock in self._put_away:
            dock.show()
        if self._put_away and self._raised is not None:
            self._raised.raise_()
        self._put_away = []
