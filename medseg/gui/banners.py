"""Non-blocking banners at the top of the viewer: geometry findings, synthetic demo."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMessageBox, QPushButton, QWidget

from medseg.core.volume import GeometryFinding


class Banner(QFrame):
    """A coloured strip with a message, an optional Details… button and a close button."""

    def __init__(self, style: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(f"Banner {{ {style} border-radius: 3px; }} QLabel {{ color: black; }}")
        self.label = QLabel(self)
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.details_button = QPushButton("Details…", self)
        self.details_button.clicked.connect(self._show_details)
        close = QPushButton("✕", self)
        close.setFlat(True)
        close.setFixedWidth(28)
        close.setToolTip("Hide")
        close.clicked.connect(self.hide)
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        layout.addWidget(self.label, 1)
        layout.addWidget(self.details_button)
        layout.addWidget(close)
        self.details = ""
        self.details_box: QMessageBox | None = None
        self.hide()

    def add_button(self, button: QPushButton) -> None:
        """An action offered in the strip (e.g. "Show acquired slices"), before Details…; the caller shows/hides it."""
        layout = self.layout()
        layout.insertWidget(layout.indexOf(self.details_button), button)

    def show_message(self, text: str, details: str = "") -> None:
        self.label.setText(text)
        self.details = details
        self.details_button.setVisible(bool(details))
        self.show()

    def _show_details(self) -> None:
        self.details_box = QMessageBox(QMessageBox.Icon.Information, "Details", self.details, QMessageBox.StandardButton.Ok, self)
        self.details_box.open()  # non-blocking


def join_messages(messages: list[str]) -> str:
    """Sentences joined without doubled punctuation ("a.; b." reads badly)."""
    return " ".join(m.strip() if m.strip().endswith((".", "!", "?")) else m.strip() + "." for m in messages if m.strip())


def findings_text(findings: list[GeometryFinding]) -> tuple[str, str]:
    """(one line for the banner, the full details)."""
    if not findings:
        return "", ""
    summary = "Geometry: " + join_messages([f.message for f in findings[:3]])
    if len(findings) > 3:
        summary += f" (and {len(findings) - 3} more)"
    details = "\n\n".join(
        f.message + ("\n" + "\n".join(f"  {k}: {v}" for k, v in f.details.items()) if f.details else "") for f in findings
    )
    return summary, details
