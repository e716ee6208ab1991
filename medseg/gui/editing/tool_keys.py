"""Tool and preset keys work wherever the focus is, except where text is being typed.

The keys are shortcuts of the main window (its actions: the tools, the window presets, the menus), so
Qt runs them whatever widget has the focus, unless that widget claims the key first (Qt's
ShortcutOverride): a text field does, for every printable key, which is what a user typing a label's
name wants. A number box claims every printable key too, letters included, although it can type none
of them: after a click into "Radius", B would neither select the brush nor type anything. Here a number
box claims only what it can type (digits, sign, decimal point): a letter in it is a tool key, a digit
is typed into the box.
"""

from __future__ import annotations

from PySide6.QtCore import QEvent, QObject, Qt
from PySide6.QtGui import QKeyEvent
from PySide6.QtWidgets import QAbstractSpinBox, QApplication, QWidget

# What a number box can type; any other printable key is left to the window's shortcuts.
NUMBER_TEXT = set("0123456789.,-+")
_COMMAND_MODIFIERS = Qt.KeyboardModifier.ControlModifier | Qt.KeyboardModifier.AltModifier | \
    Qt.KeyboardModifier.MetaModifier


def is_tool_key_in_number_box(widget: QObject, event: QKeyEvent) -> bool:
    """A printable key without Ctrl/Alt that a number box cannot type."""
    if not isinstance(widget, QAbstractSpinBox) or event.modifiers() & _COMMAND_MODIFIERS:
        return False
    text = event.text()
    return len(text) == 1 and text.isprintable() and not text.isspace() and text not in NUMBER_TEXT


class ToolKeys(QObject):
    """Follows the focus in ``window``: the number box that gets it claims only the keys it can type."""

    def __init__(self, window: QWidget) -> None:
        super().__init__(window)
        self.window = window
        app = QApplication.instance()
        assert isinstance(app, QApplication), "made by the GUI before any window"
        app.focusChanged.connect(self._on_focus_changed)  # dropped with this object (its slot's receiver)

    def _on_focus_changed(self, _old: QWidget | None, new: QWidget | None) -> None:
        box = new
        while box is not None and not isinstance(box, QAbstractSpinBox) and box is not self.window:
            box = box.parentWidget()  # the focus may be on the box's own line edit
        if isinstance(box, QAbstractSpinBox) and box.window() is self.window:
            box.installEventFilter(self)  # once: Qt keeps one entry per filter object

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:  # noqa: N802
        if isinstance(event, QKeyEvent) and event.type() == QEvent.Type.ShortcutOverride \
                and is_tool_key_in_number_box(watched, event):
            return True  # not claimed: the window's shortcut (a tool) runs
        return False


def install(window: QWidget) -> ToolKeys:
    return ToolKeys(window)
