"""Conditions GUI tests wait for (``qtbot.waitUntil``) instead of a fixed ``qtbot.wait(ms)``: a wait of
50 ms is enough on a quiet machine and not on a loaded one, and it says nothing about what the test
needed to have happened."""

from __future__ import annotations


def on_screen(widget) -> bool:
    """Shown and laid out: visible, and some of it not covered or clipped away."""
    return widget.isVisible() and widget.width() > 0 and widget.height() > 0 and not widget.visibleRegion().isEmpty()


def views_laid_out(viewer, layout: str) -> bool:
    """The slice views stand where ``layout`` puts them: "1x3" one row of three, "2x2" two rows and two columns
    (the 3D view the fourth cell), "single" one view filling the grid."""
    shown = [view for view in viewer.views.values() if view.isVisible()]
    rows = {view.y() for view in shown}
    columns = {view.x() for view in shown}
    if layout == "1x3":
        return len(shown) == 3 and len(rows) == 1 and len(columns) == 3
    if layout == "2x2":
        return len(shown) == 3 and len(rows) == 2 and len(columns) == 2 and viewer.view3d.isVisible()
    return len(shown) == 1 and shown[0].width() >= viewer.width() // 2 and shown[0].height() >= viewer.height() // 2
