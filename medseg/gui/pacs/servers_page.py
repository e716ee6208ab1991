"""The PACS dialog's left side: the saved servers, the form of the one in use, and the retrieval cache.

The form is what Search, Retrieve, Send and Test use, saved or not; Save server keeps it for next time (the
password or token in the OS keyring, or for this session only where there is none).
"""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path
from typing import Callable

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import QHBoxLayout, QLabel, QListWidget, QPushButton, QSpinBox, QVBoxLayout, QWidget

from medseg.errors import MedsegError
from medseg.gui.pacs.forms import ServerForm
from medseg.io.pacs import (
    Credentials,
    CredentialStoreError,
    PacsError,
    PacsServer,
    PacsSettings,
    SeriesCache,
    load_settings,
    save_settings,
    store_secret,
)
from medseg.io.pacs.credentials import credentials_for

OK_STYLE, ERROR_STYLE = "color: #1d6b2c;", "color: #b00020;"


def show_result(label: QLabel, text: str, ok: bool) -> None:
    """``text`` in ``label``, green when it went well, red when not."""
    label.setStyleSheet(OK_STYLE if ok else ERROR_STYLE)
    label.setText(text)


class ServersPage(QWidget):
    server_chosen = Signal()  # another saved server is in the form: what was found on the last one is stale

    def __init__(self, settings: PacsSettings | None, settings_path: str | Path | None,
                 report: Callable[[str, bool], None], parent: QWidget | None = None) -> None:
        """``report(text, ok)``: the dialog's status line (the cache's messages go there)."""
        super().__init__(parent)
        self.settings_path = settings_path
        self.report = report
        self.startup_error = ""  # the settings file could not be read (the dialog shows it)
        self.settings = settings if settings is not None else self._load()
        self.session_secrets: dict[str, str] = {}  # where no OS keyring exists: this session only
        self.server_list = QListWidget(self)
        self.server_list.currentRowChanged.connect(self._on_server_chosen)
        self.form = ServerForm(self)
        server_buttons = QHBoxLayout()
        self.add_button = self._button("New server", self.add_server, server_buttons)
        self.remove_button = self._button("Remove", self.remove_server, server_buttons)
        self.save_button = self._button("Save server", self.save_server, server_buttons)
        # Says whether the form is a saved server, a changed one or a new one, and what Save does: a
        # search works with the form as it is, saving only keeps it for next time.
        self.form_state_label = QLabel(self)
        self.form_state_label.setWordWrap(True)
        self.form.edited.connect(self._update_form_state)
        self.test_button = QPushButton("Test connection", self)  # the dialog runs the test: a network job
        server_buttons.addWidget(self.test_button)
        self.connection_label = QLabel(self)
        self.connection_label.setWordWrap(True)
        cache_row = QHBoxLayout()
        self.cache_label = QLabel(self)
        self.cache_label.setWordWrap(True)
        cache_row.addWidget(self.cache_label, 1)
        self.cache_limit = QSpinBox(self)
        self.cache_limit.setRange(100, 10_000_000)
        self.cache_limit.setSuffix(" MB limit")
        self.cache_limit.setValue(self.settings.cache_limit_mb)
        self.cache_limit.editingFinished.connect(self._on_cache_limit)
        cache_row.addWidget(self.cache_limit)
        self.clear_cache_button = self._button("Clear cache", self.clear_cache, cache_row)

        layout = QVBoxLayout(self)
        layout.addWidget(QLabel("Servers", self))
        layout.addWidget(self.server_list, 1)
        layout.addWidget(self.form_state_label)
        layout.addWidget(self.form)
        layout.addLayout(server_buttons)
        layout.addWidget(self.connection_label)
        layout.addLayout(cache_row)
        self.server_list.setMaximumHeight(110)

    def _load(self) -> PacsSettings:
        try:
            return load_settings(self.settings_path)
        except PacsError as error:
            self.startup_error = str(error)
            return PacsSettings()

    def _button(self, text: str, slot: Callable, layout) -> QPushButton:
        button = QPushButton(text, self)
        button.clicked.connect(slot)
        layout.addWidget(button)
        return button

    # --- servers ---------------------------------------------------------------------------------
    def refresh_servers(self, select: str | None = None) -> None:
        self.server_list.blockSignals(True)
        self.server_list.clear()
        for server in self.settings.servers:
            self.server_list.addItem(server.describe())
        self.server_list.blockSignals(False)
        names = [s.name for s in self.settings.servers]
        if names:
            self.server_list.setCurrentRow(names.index(select) if select in names else 0)
        self._update_form_state()
        self.update_cache_label()

    @Slot(int)
    def _on_server_chosen(self, row: int) -> None:
        if 0 <= row < len(self.settings.servers):
            self.form.set_server(self.settings.servers[row])
            self.server_chosen.emit()
            self.connection_label.clear()
        self._update_form_state()

    def form_state(self) -> str:
        """"saved" (the form is a saved server as saved), "changed" (a saved one, edited) or "new"."""
        try:
            server = self.form.server()
        except MedsegError:
            server = None
        names = {s.name: s for s in self.settings.servers}
        saved = names.get(self.form.name.text().strip())
        selected = self.server_list.currentRow() >= 0 and self.server_list.selectedItems()
        if saved is None or not selected:
            return "new"
        return "saved" if server == saved and not self.form.secret.text() else "changed"

    @Slot()
    def _update_form_state(self) -> None:
        state = self.form_state()
        name = self.form.name.text().strip() or "this server"
        self.form_state_label.setText({
            "saved": f"<b>{html.escape(name)}</b>, as saved.",
            "changed": f"<b>{html.escape(name)}</b>: changed, <b>not saved</b>. Search and Test use the form as "
                       "it is; <i>Save server</i> keeps the changes for next time.",
            "new": "<b>A new server, not saved.</b> Fill it in and press <i>Test connection</i>; Search works "
                   "without saving, <i>Save server</i> keeps it in the list for next time.",
        }[state])
        self.save_button.setEnabled(state != "saved")

    def current_server(self) -> PacsServer:
        return self.form.server()

    @Slot()
    def add_server(self) -> None:
        self.server_list.clearSelection()
        self.server_list.setCurrentRow(-1)
        self.form.set_server(PacsServer(name=f"server {len(self.settings.servers) + 1}", protocol="dicomweb",
                                        url="http://localhost:8042/dicom-web"))
        self._update_form_state()
        self.form.name.setFocus()
        self.form.name.selectAll()

    @Slot()
    def save_server(self) -> bool:
        try:
            server = self.current_server()
            self.settings.put(server)
            save_settings(self.settings, self.settings_path)
        except MedsegError as error:
            show_result(self.connection_label, str(error), ok=False)
            return False
        secret = self.form.secret.text()
        note = "Saved."
        if secret:
            try:
                store_secret(server, secret)
                note = "Saved; the password/token is in the OS keyring."
            except CredentialStoreError as error:
                self.session_secrets[server.name] = secret
                note = f"Saved, but {error.message}: the password/token is kept for this session only."
            self.form.secret.clear()
        self.refresh_servers(select=server.name)
        show_result(self.connection_label, note, ok=True)
        return True

    @Slot()
    def remove_server(self) -> None:
        row = self.server_list.currentRow()
        if 0 <= row < len(self.settings.servers):
            self.settings.remove(self.settings.servers[row].name)
            save_settings(self.settings, self.settings_path)
            self.refresh_servers()

    def credentials(self, server: PacsServer) -> Credentials | None:
        if server.protocol != "dicomweb" or server.auth == "none":
            return None
        typed = self.form.secret.text() or self.session_secrets.get(server.name)
        if typed:
            return Credentials(kind=server.auth, username=server.username, secret=typed)
        return credentials_for(server)

    # --- cache -----------------------------------------------------------------------------------
    def cache(self) -> SeriesCache:
        return SeriesCache(self.settings.cache_path(), limit_mb=self.settings.cache_limit_mb)

    def update_cache_label(self) -> None:
        cache = self.cache()
        self.cache_label.setText(f"Cache: {cache.size_bytes() / 1e6:.0f} MB in {cache.root}")

    @Slot()
    def _on_cache_limit(self) -> None:
        self.settings = replace(self.settings, cache_limit_mb=self.cache_limit.value())
        try:
            save_settings(self.settings, self.settings_path)
        except MedsegError as error:
            self.report(str(error), False)

    @Slot()
    def clear_cache(self) -> None:
        freed = self.cache().clear()
        self.update_cache_label()
        self.report(f"Cache cleared ({freed / 1e6:.0f} MB of patient data deleted).", True)
