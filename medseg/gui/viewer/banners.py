"""Non-blocking banners at the top of the viewer: geometry findings, synthetic demo."""

from __future__ import annotations

import logging

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QMessageBox, QPushButton, QWidget

from medseg.core.volume import GeometryFinding
from medseg.gui.common.messages import join_messages

log = logging.getLogger(__name__)


class Banner(QFrame):
    """A coloured strip with a message, an optional Details… button and a close button."""

    def __init__(self, style: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setStyleSheet(f"Banner {{ {style} border-radius: 3px; }} QLabel {{ color: black; }}")
        self.label = QLabel(self)
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # findings quote files' text: never as markup
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
        assert isinstance(layout, QHBoxLayout), "the strip's own layout, made in __init__"
        layout.insertWidget(layout.indexOf(self.details_button), button)

    def show_message(self, text: str, details: str = "") -> None:
        self.label.setText(text)
        self.details = details
        self.details_button.setVisible(bool(details))
        self.show()

    def _show_details(self) -> None:
        self.details_box = QMessageBox(QMessageBox.Icon.Information, "Details", self.details, QMessageBox.StandardButton.Ok, self)
        self.details_box.setTextFormat(Qt.TextFormat.PlainText)
        self.details_box.open()  # non-blocking


# The finding a clinician must read first (the one the banner's first line shows); the rest are
# one click away in Details. "regularized" names its causes (tilt, gaps), so it goes before them.
BANNER_ORDER = ("regularized", "raw_stack", "duplicate_positions", "non_finite_voxels", "series_split",
                "spacing_override", "negative_spacing", "no_pixel_spacing", "orientation_assumed", "no_orientation",
                "no_position", "gantry_tilt", "missing_slices", "variable_spacing", "single_slice")


def findings_text(findings: list[GeometryFinding]) -> tuple[str, str]:
    """(a short first line for the banner, every finding in full for Details). Both in clinical
    words: the findings' machine kinds and numbers stay in the log and in ``--json``."""
    if not findings:
        return "", ""
    ranked = sorted(findings, key=lambda f: BANNER_ORDER.index(f.kind) if f.kind in BANNER_ORDER else len(BANNER_ORDER))
    summary = join_messages([ranked[0].message])
    if len(ranked) > 1:
        summary += f"  ({len(ranked) - 1} more: Details…)"
    details = "\n\n".join(f.message for f in ranked)
    log.info("geometry findings: %s", ", ".join(f.kind for f in ranked))
    return summary, details
