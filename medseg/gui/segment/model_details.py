"""What the Models window says about one model: its details (structures, configurations, download, licence,
citation), its size, and its licence in full before it is installed."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


def size_text(entry) -> str:
    if entry.builtin:
        return "built in"
    if not entry.downloadable:
        return "from the publisher"
    return f"{entry.size / 2**20:.0f} MB" if entry.size is not None else "told by the server"


class LicenceDialog(QDialog):
    """The licence of one model, shown in full before it is installed: Accept installs, Cancel does nothing."""

    def __init__(self, entry, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle(f"Licence of {entry.id}")
        licence = entry.licence
        intro = QLabel(f"<b>{html.escape(entry.title)}</b> is licensed: {html.escape(licence.summary)}.<br>"
                       f"<a href='{html.escape(licence.url)}'>{html.escape(licence.url)}</a><br>"
                       "It is installed only if you accept these terms:", self)
        intro.setOpenExternalLinks(True)
        intro.setWordWrap(True)
        self.terms = QPlainTextEdit(licence.terms, self)
        self.terms.setReadOnly(True)
        self.terms.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.buttons = QDialogButtonBox(self)
        self.accept_button = self.buttons.addButton("Accept and install", QDialogButtonBox.ButtonRole.AcceptRole)
        self.buttons.addButton(QDialogButtonBox.StandardButton.Cancel)
        self.buttons.accepted.connect(self.accept)
        self.buttons.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        for widget in (intro, self.terms, self.buttons):
            layout.addWidget(widget)
        self.resize(560, 360)


def details_html(entry, record) -> str:
    """``entry`` (a catalogue entry) and ``record`` (its installation, or None) as the details pane shows them."""
    from medseg.catalogue.entries import SUPPORT_STATES

    e = html.escape
    licence = entry.licence
    parts = [f"<h3>{e(entry.title)}</h3><p>{e(entry.id)} · {e(entry.publisher)} · version {e(entry.version)} · "
             f"{e(entry.modality)}</p>"]
    if entry.description:
        parts.append(f"<p>{e(entry.description)}</p>")
    parts.append(f"<p><b>medseg runs it:</b> {e(entry.support)} — {e(SUPPORT_STATES[entry.support])}"
                 + (f"; {e(entry.support_note)}" if entry.support_note else "") + "</p>")
    if record is not None:
        parts.append(f"<p><b>Installed</b> {e(record.version)} in {e(str(record.version_folder))}"
                     f"{' (system-wide, read-only)' if record.read_only else ''}</p>")
    configurations = ", ".join(
        f"{c.name} ({' × '.join(f'{s:g}' for s in c.spacing_mm)} mm)" if c.spacing_mm else c.name
        for c in entry.configurations)
    parts.append(f"<p><b>Configurations:</b> {e(configurations)}</p>")
    if entry.files:
        checksum = "SHA-256 published" if entry.checksums_published else (
            "no published checksum: medseg records the hash of what it downloads, and Verify checks it later")
        parts.append(f"<p><b>Download:</b> {len(entry.files)} file(s), {e(size_text(entry))}; {e(checksum)}</p>")
    parts.append(f"<p><b>Licence:</b> {e(licence.summary)} — <a href='{e(licence.url)}'>{e(licence.url)}</a>"
                 f"<br>{e(licence.terms)}</p>")
    if entry.citation:
        parts.append(f"<p><b>Cite:</b> {e(entry.citation)}</p>")
    groups = "".join(f"<li><b>{e(group)}</b>: {e(', '.join(s.name for s in structures))}</li>"
                     for group, structures in entry.groups().items())
    parts.append(f"<p><b>{len(entry.structures)} structures</b></p><ul>{groups}</ul>")
    return "".join(parts)
