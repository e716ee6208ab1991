"""What the Models window says about one model: its details (structures, configurations, download, licence,
citation), its size, and its licence in full before it is installed."""

from __future__ import annotations

import html

from PySide6.QtWidgets import QDialog, QDialogButtonBox, QLabel, QPlainTextEdit, QVBoxLayout, QWidget


def size_text(entry, record=None) -> str:
    """The Size column: an installed model's size on disk (it said "told by the server" for one installed
    from a server that does not state sizes), else what the download will be."""
    if entry.builtin:
        return "built in"
    if record is not None:
        return f"{_megabytes(disk_bytes(record))} on disk"
    if not entry.downloadable:
        return "from the publisher"
    return _megabytes(entry.size) if entry.size is not None else "told by the server"


def _megabytes(size: int) -> str:
    if size >= 2**30:
        return f"{size / 2**30:.1f} GB"
    return f"{size / 2**20:.0f} MB" if size >= 2**20 else f"{max(1, round(size / 2**10))} kB"


def disk_bytes(record) -> int:
    """The bytes of an installed model's files (its active version folder)."""
    from pathlib import Path

    folder = Path(record.version_folder)
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file() and not path.is_symlink())


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
                     f"{' (system-wide, read-only)' if record.read_only else ''}, {e(size_text(entry, record))}</p>")
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
