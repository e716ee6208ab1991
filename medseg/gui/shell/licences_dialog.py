"""Help ▸ About ▸ Third-party licences: the software medseg includes and the texts of its licences."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


class LicencesDialog(QDialog):
    """Shows the bundle's THIRD_PARTY_LICENSES.txt, or the same list made from the installed
    packages when medseg runs from a checkout (medseg.third_party)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from medseg.third_party import bundled_notice, third_party_text

        self.setWindowTitle("Third-party licences")
        QGuiApplication.setOverrideCursor(Qt.CursorShape.WaitCursor)
        try:
            text = third_party_text()
        finally:
            QGuiApplication.restoreOverrideCursor()
        notice = bundled_notice()
        source = f"From {notice}" if notice else "From the installed packages' metadata"
        intro = QLabel("medseg is licensed under Apache-2.0 and includes the software below under its own licences. "
                       f"{source}.", self)
        intro.setWordWrap(True)
        self.text = QPlainTextEdit(text, self)
        self.text.setReadOnly(True)
        self.text.setFont(QFont("monospace"))
        self.text.setLineWrapMode(QPlainTextEdit.LineWrapMode.NoWrap)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (intro, self.text, buttons):
            layout.addWidget(widget)
        self.resize(820, 640)
