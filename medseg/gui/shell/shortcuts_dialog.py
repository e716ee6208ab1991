"""Help ▸ Keyboard and mouse (F1): every shortcut and mouse gesture, on one screen.

The list grew past what a message box can show: at 1600 × 1000 it ran off the bottom of the
screen with its OK button. Here the rows stand in two columns side by side, the sheet is never
taller than most of the screen it opens on, and what does not fit scrolls inside it.
"""

from __future__ import annotations

import html

from PySide6.QtGui import QTextDocument
from PySide6.QtWidgets import QApplication, QDialog, QDialogButtonBox, QTextBrowser, QVBoxLayout, QWidget

SCREEN_SHARE = 0.85  # of the available height: the sheet and its Close button stay on the screen


class ShortcutsDialog(QDialog):
    def __init__(self, rows: list[tuple[str, str]], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Keyboard and mouse")
        self.rows = rows
        half = (len(rows) + 1) // 2
        cell = "<td>{}</td><td><b>{}</b></td>"
        lines = []
        for left, right in zip(rows[:half], [*rows[half:], ("", "")]):
            lines.append("<tr>" + cell.format(*map(html.escape, left)) + "<td width=24></td>"
                         + cell.format(*map(html.escape, right)) + "</tr>")
        self.html = f"<table cellspacing=4>{''.join(lines)}</table>"
        self.sheet = QTextBrowser(self)
        self.sheet.setHtml(self.html)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addWidget(self.sheet)
        layout.addWidget(buttons)
        self._fit()

    def _fit(self) -> None:
        measure = QTextDocument()  # the browser's own document is laid out to its (not yet known) width
        measure.setDefaultFont(self.sheet.font())
        measure.setHtml(self.sheet.toHtml())
        parent = self.parentWidget()
        screen = (parent.screen() if parent is not None else None) or QApplication.primaryScreen()
        area = screen.availableGeometry()
        width = min(int(measure.idealWidth()) + 60, int(area.width() * 0.95))
        measure.setTextWidth(width - 60)
        wanted = int(measure.size().height()) + 100  # the sheet, the margins and the Close button
        self.resize(width, min(wanted, int(area.height() * SCREEN_SHARE)))
        self.setMaximumHeight(int(area.height() * SCREEN_SHARE))

    def text(self) -> str:
        """The sheet as rich text (as a message box's text(): the keys in <b>…</b>)."""
        return self.html
