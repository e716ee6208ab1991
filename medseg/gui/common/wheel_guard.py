"""The mouse wheel scrolls the panel it is over; it changes a value only in a widget that has focus.

Qt's combo boxes, spin boxes and sliders take every wheel turn that passes over them: scrolling
down the side panel after Segment changed the active label from "1 body" to "3 bones" without
the user noticing. One application-wide filter (installed once, by the main window) gives such
widgets "strong" focus (a click or Tab, never the wheel) and passes the wheel of an unfocused one
on to its parent, so the panel scrolls instead.
"""

from __future__ import annotations

from typing import TypeGuard

from PySide6.QtCore import QCoreApplication, QEvent, QObject, Qt
from PySide6.QtWidgets import QAbstractSlider, QAbstractSpinBox, QApplication, QComboBox, QScrollBar, QWidget

GUARDED = (QComboBox, QAbstractSpinBox, QAbstractSlider)


def _guarded(widget: QObject) -> TypeGuard[QWidget]:
    return isinstance(widget, GUARDED) and not isinstance(widget, QScrollBar)  # a scroll bar is how panels scroll


class WheelGuard(QObject):
    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        kind = event.type()
        if kind == QEvent.Type.Polish and _guarded(watched):
            if watched.focusPolicy() & Qt.FocusPolicy.WheelFocus == Qt.FocusPolicy.WheelFocus:
                watched.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        elif kind == QEvent.Type.Wheel and _guarded(watched) and not watched.hasFocus():
            pass_to_ancestors(watched, event)
            return True
        return False


def pass_to_ancestors(widget: QWidget, event: QEvent) -> None:
    """Offer a wheel event to each ancestor of ``widget`` until one (the scroll area) takes it.

    Qt propagates only spontaneous wheel events to parents, and this one must not reach the widget
    itself (a value box, a plot that would zoom)."""
    ancestor = widget.parentWidget()
    while ancestor is not None:
        event.ignore()
        QCoreApplication.sendEvent(ancestor, event)
        if event.isAccepted() or ancestor.isWindow():
            break
        ancestor = ancestor.parentWidget()


_installed: WheelGuard | None = None


def install() -> None:
    """Install the guard on the running QApplication (once per process)."""
    global _installed
    app = QApplication.instance()
    if _installed is None and app is not None:
        _installed = WheelGuard(app)
        app.installEventFilter(_installed)
