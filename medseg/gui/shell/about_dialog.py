"""Help ▸ About: versions, the kind of build, the device check (what ``medseg devices`` prints) and
the third-party licences."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtGui import QFont, QGuiApplication
from PySide6.QtWidgets import (
    QDialog,
    QDialogButtonBox,
    QGroupBox,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from medseg.gui.shell.app_shell import versions_text


class AboutDialog(QDialog):
    """Probes the devices when opened (imports torch: about a second the first time)."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        from medseg.model.devices import probe, report_lines

        self.setWindowTitle("About medseg")
        self.report = probe()
        heading = QLabel("<b>medseg</b> — desktop CT segmentation. Apache-2.0; includes third-party software "
                         "under its own licences.<br>Not a medical device: for research use.", self)
        versions = QLabel(versions_text(), self)
        versions.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.devices_text = QPlainTextEdit("\n".join(report_lines(self.report)), self)
        self.devices_text.setReadOnly(True)
        self.devices_text.setFont(QFont("monospace"))
        self.devices_text.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        box = QGroupBox("Devices", self)
        box_layout = QVBoxLayout(box)
        box_layout.addWidget(self.devices_text)
        buttons = QDialogButtonBox(QDialogButtonBox.StandardButton.Ok, self)
        copy = QPushButton("Copy", self)
        copy.setToolTip("Copy versions and devices (for a support request)")
        copy.clicked.connect(self.copy_to_clipboard)
        buttons.addButton(copy, QDialogButtonBox.ButtonRole.ActionRole)
        licences = QPushButton("Third-party licences…", self)
        licences.setToolTip("The software medseg includes, with the texts of its licences")
        licences.clicked.connect(self.show_licences)
        buttons.addButton(licences, QDialogButtonBox.ButtonRole.ActionRole)
        buttons.accepted.connect(self.accept)
        layout = QVBoxLayout(self)
        for widget in (heading, versions, box, buttons):
            layout.addWidget(widget)
        self.resize(640, 520)

    def text(self) -> str:
        return versions_text() + "\n\n" + self.devices_text.toPlainText()

    def copy_to_clipboard(self) -> None:
        QGuiApplication.clipboard().setText(self.text())

    def show_licences(self) -> None:
        from medseg.gui.shell.licences_dialog import LicencesDialog

        self.licences = LicencesDialog(self)
        self.licences.show()
