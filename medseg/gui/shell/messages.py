"""Where the window tells the user what just happened: a message area that stays until dismissed.

Qt's ``QStatusBar.showMessage`` paints a temporary message *over* the status bar's normal
widgets — here the slice / HU readout — and takes it away after a few seconds, so the result of
a save, an open or a Segment could neither be read nor found again. Results go here instead: a
widget of its own in the status bar (its geometry never overlaps the readout), holding the
newest message until the user dismisses it or a newer one arrives, with the last messages one
click away (History) and every message in the log file.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontMetrics
from PySide6.QtWidgets import QHBoxLayout, QLabel, QMenu, QSizePolicy, QToolButton, QWidget

log = logging.getLogger(__name__)

HISTORY_SIZE = 30
LEVEL_STYLES = {
    "info": "",
    "success": "color: #1b5e20;",
    "warning": "color: #8a5300; font-weight: bold;",
    "error": "color: #b00020; font-weight: bold;",
}


@dataclass(frozen=True)
class Message:
    text: str
    level: str  # "info", "success", "warning" or "error"
    at: float  # time.time() when it was shown

    def stamped(self) -> str:
        return f"{time.strftime('%H:%M:%S', time.localtime(self.at))}  {self.text}"


class MessageArea(QWidget):
    """The newest message (elided to fit; the whole text in its tooltip), ✕ and a History menu."""

    changed = Signal(str)  # the text now shown ("" once dismissed)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.history: list[Message] = []
        self.current: Message | None = None
        self.label = QLabel(self)
        self.label.setObjectName("message-text")
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.label.setMinimumWidth(120)
        self.dismiss_button = QToolButton(self)
        self.dismiss_button.setText("✕")
        self.dismiss_button.setToolTip("Dismiss this message (History keeps it)")
        self.dismiss_button.setAutoRaise(True)
        self.dismiss_button.clicked.connect(self.dismiss)
        self.history_button = QToolButton(self)
        self.history_button.setText("Messages")
        self.history_button.setToolTip("The last messages of this session (they are in the log file too)")
        self.history_button.setAutoRaise(True)
        self.history_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        self.history_menu = QMenu(self)
        self.history_menu.aboutToShow.connect(self._fill_history)
        self.history_button.setMenu(self.history_menu)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(6, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.dismiss_button)
        layout.addWidget(self.history_button)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Preferred)
        self._sync()

    def show_message(self, text: str, level: str = "info", log_text: str | None = None) -> None:
        """Show ``text`` until dismissed or replaced. The log gets ``log_text`` when given: callers
        pass a version without file or patient names (logs never hold patient data)."""
        message = Message(text.strip(), level if level in LEVEL_STYLES else "info", time.time())
        self.current = message
        self.history = [*self.history, message][-HISTORY_SIZE:]
        (log.warning if level in ("warning", "error") else log.info)("message: %s", log_text or text)
        self._sync()

    def dismiss(self) -> None:
        self.current = None
        self._sync()

    def text(self) -> str:
        return self.current.text if self.current else ""

    def _sync(self) -> None:
        message = self.current
        self.dismiss_button.setVisible(message is not None)
        self.history_button.setEnabled(bool(self.history))
        if message is None:
            self.label.setText("")
            self.label.setToolTip("")
            self.changed.emit("")
            return
        self.label.setStyleSheet(LEVEL_STYLES[message.level])
        self.label.setToolTip(message.stamped())
        self._elide()
        self.changed.emit(message.text)

    def _elide(self) -> None:
        if self.current is None:
            return
        width = max(40, self.label.width())
        self.label.setText(QFontMetrics(self.label.font()).elidedText(self.current.text, Qt.TextElideMode.ElideRight,
                                                                       width))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._elide()

    def _fill_history(self) -> None:
        self.history_menu.clear()
        for message in reversed(self.history):
            action = self.history_menu.addAction(message.stamped())
            action.triggered.connect(lambda _=False, m=message: self._reshow(m))
        if not self.history:
            self.history_menu.addAction("No messages yet.").setEnabled(False)

    def _reshow(self, message: Message) -> None:
        self.current = message
        self._sync()
