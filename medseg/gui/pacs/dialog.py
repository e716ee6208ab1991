"""File > PACS: configure servers, find a study, retrieve a series into the cache, send a DICOM SEG.

Every network call runs as a :class:`~medseg.gui.common.jobs.Job` (progress, cancel, never on the
GUI thread), so a slow or dead PACS shows a timeout message, never a frozen window. A
retrieved series is announced with :attr:`PacsDialog.series_retrieved` (its cache folder);
the main window opens it.
"""

from __future__ import annotations

import html
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox, QComboBox, QDialog, QDoubleSpinBox, QFileDialog, QFormLayout, QGroupBox, QHBoxLayout, QHeaderView,
    QLabel, QLineEdit, QListWidget, QProgressBar, QPushButton, QSpinBox, QSplitter, QTreeWidget, QTreeWidgetItem,
    QVBoxLayout, QWidget,
)

from medseg.errors import Cancelled, MedsegError
from medseg.gui.common.jobs import Job
from medseg.io.pacs import (
    Credentials, CredentialStoreError, PacsError, PacsServer, PacsSettings, QueryFilters, SeriesCache, echo,
    load_settings, query_series, query_studies, retrieve_series, save_settings, send_files, store_secret,
)
from medseg.io.pacs.credentials import credentials_for

PAGE_SIZE = 50
STUDY_COLUMNS = ["Date", "Patient ID", "Patient name", "Modalities", "Images", "Description"]
SERIES_ROLE = Qt.ItemDataRole.UserRole
OK_STYLE, ERROR_STYLE = "color: #1d6b2c;", "color: #b00020;"


def _error_text(error: BaseException) -> str:
    if isinstance(error, Cancelled):
        return "Cancelled; nothing was marked complete."
    if isinstance(error, MedsegError):
        return str(error)
    return f"Unexpected error: {type(error).__name__}: {error}"


class ServerForm(QGroupBox):
    """The fields of one server record; the password goes to the keyring, never to the record."""

    edited = Signal()  # the user changed a field

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Server", parent)
        self.name = QLineEdit(self)
        self.protocol = QComboBox(self)
        self.protocol.addItem("DICOMweb", "dicomweb")
        self.protocol.addItem("DIMSE (DICOM network)", "dimse")
        self.url = QLineEdit(self)
        self.url.setPlaceholderText("https://pacs.example.org/dicom-web")
        self.host = QLineEdit(self)
        self.port = QSpinBox(self)
        self.port.setRange(1, 65535)
        self.called_aet = QLineEdit(self)
        self.our_aet = QLineEdit("MEDSEG", self)
        self.storage_port = QSpinBox(self)
        self.storage_port.setRange(1, 65535)
        self.retrieve = QComboBox(self)
        self.retrieve.addItem("C-GET", "get")
        self.retrieve.addItem("C-MOVE to our storage port", "move")
        self.tls = QCheckBox("TLS", self)
        self.ca_file = QLineEdit(self)
        self.ca_file.setPlaceholderText("CA file (PEM); empty = system certificates")
        self.auth = QComboBox(self)
        for text, kind in (("none", "none"), ("user + password", "basic"), ("bearer token", "bearer")):
            self.auth.addItem(text, kind)
        self.username = QLineEdit(self)
        self.secret = QLineEdit(self)
        self.secret.setEchoMode(QLineEdit.EchoMode.Password)
        self.secret.setPlaceholderText("kept in the OS keyring; empty = keep the stored one")
        self.timeout = QDoubleSpinBox(self)
        self.timeout.setRange(1, 600)
        self.timeout.setSuffix(" s")
        form = QFormLayout(self)
        for label, widget in (("Name", self.name), ("Protocol", self.protocol), ("URL", self.url), ("Host", self.host),
                              ("Port", self.port), ("Called AE title", self.called_aet),
                              ("Our AE title", self.our_aet), ("Our storage port", self.storage_port),
                              ("Retrieve with", self.retrieve), ("", self.tls), ("CA file", self.ca_file),
                              ("Login", self.auth), ("User", self.username), ("Password / token", self.secret),
                              ("Timeout", self.timeout)):
            form.addRow(label, widget)
        self.protocol.currentIndexChanged.connect(self._update_enabled)
        for widget in (self.name, self.url, self.host, self.called_aet, self.our_aet, self.ca_file, self.username):
            widget.textEdited.connect(self.edited)
        for widget in (self.port, self.storage_port, self.timeout):
            widget.valueChanged.connect(self.edited)
        for widget in (self.protocol, self.retrieve, self.auth):
            widget.activated.connect(self.edited)
        self.tls.clicked.connect(self.edited)
        self.set_server(PacsServer(name="new server", protocol="dicomweb", url="http://localhost:8042/dicom-web"))

    @Slot()
    def _update_enabled(self) -> None:
        web = self.protocol.currentData() == "dicomweb"
        self.url.setEnabled(web)
        for widget in (self.host, self.port, self.called_aet, self.our_aet, self.storage_port, self.retrieve, self.tls):
            widget.setEnabled(not web)
        for widget in (self.auth, self.username, self.secret):
            widget.setEnabled(web)

    def set_server(self, server: PacsServer) -> None:
        blocked = [w.blockSignals(True) for w in (self.port, self.storage_port, self.timeout)]
        self.name.setText(server.name)
        self.protocol.setCurrentIndex(self.protocol.findData(server.protocol))
        self.url.setText(server.url)
        self.host.setText(server.host)
        self.port.setValue(server.port)
        self.called_aet.setText(server.called_aet)
        self.our_aet.setText(server.our_aet)
        self.storage_port.setValue(server.storage_port)
        self.retrieve.setCurrentIndex(self.retrieve.findData(server.retrieve))
        self.tls.setChecked(server.tls)
        self.ca_file.setText(server.ca_file)
        self.auth.setCurrentIndex(self.auth.findData(server.auth))
        self.username.setText(server.username)
        self.secret.clear()
        self.timeout.setValue(server.timeout_s)
        for widget, was in zip((self.port, self.storage_port, self.timeout), blocked):
            widget.blockSignals(was)
        self._update_enabled()

    def server(self) -> PacsServer:
        """The record the fields describe (raises PacsError when a field is invalid)."""
        return PacsServer(name=self.name.text().strip(), protocol=self.protocol.currentData(),
                          url=self.url.text().strip(), host=self.host.text().strip(), port=self.port.value(),
                          called_aet=self.called_aet.text().strip(), our_aet=self.our_aet.text().strip(),
                          storage_port=self.storage_port.value(), retrieve=self.retrieve.currentData(),
                          tls=self.tls.isChecked(), ca_file=self.ca_file.text().strip(),
                          auth=self.auth.currentData(), username=self.username.text().strip(),
                          timeout_s=self.timeout.value())


class QueryForm(QGroupBox):
    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__("Find studies", parent)
        self.fields: dict[str, QLineEdit] = {}
        form = QFormLayout(self)
        for key, label, hint in (("patient_id", "Patient ID", ""), ("patient_name", "Patient name", "* = any text"),
                                 ("birth_date", "Birth date", "YYYYMMDD"), ("date_from", "Study date from", "YYYYMMDD"),
                                 ("date_to", "Study date to", "YYYYMMDD"), ("modality", "Modality", "CT, MR ..."),
                                 ("accession_number", "Accession number", ""), ("description", "Description", "")):
            edit = QLineEdit(self)
            edit.setPlaceholderText(hint)
            self.fields[key] = edit
            form.addRow(label, edit)

    def filters(self) -> QueryFilters:
        return QueryFilters(**{key: edit.text().strip() for key, edit in self.fields.items()})


class PacsDialog(QDialog):
    series_retrieved = Signal(str)  # GUI thread: the complete series' cache folder
    job_finished = Signal(str, bool)  # GUI thread: job name, success (tests wait on this)

    def __init__(self, parent: QWidget | None = None, settings: PacsSettings | None = None,
                 settings_path: str | Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("PACS")
        self.settings_path = settings_path
        self._startup_error = ""  # the settings file could not be read (shown once the dialog is built)
        self.settings = settings if settings is not None else self._load()
        self.session_secrets: dict[str, str] = {}  # where no OS keyring exists: this session only
        self.job: Job | None = None
        self.offset = 0
        self.send_results: list[Any] = []
        self._build()
        self._refresh_servers()

    # --- construction ----------------------------------------------------------------------------
    def _load(self) -> PacsSettings:
        try:
            return load_settings(self.settings_path)
        except PacsError as error:
            self._startup_error = str(error)
            return PacsSettings()

    def _button(self, text: str, slot: Callable, layout) -> QPushButton:
        button = QPushButton(text, self)
        button.clicked.connect(slot)
        layout.addWidget(button)
        return button

    def _build(self) -> None:
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
        self.test_button = self._button("Test connection", self.test_connection, server_buttons)
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

        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.addWidget(QLabel("Servers", self))
        left_layout.addWidget(self.server_list, 1)
        left_layout.addWidget(self.form_state_label)
        left_layout.addWidget(self.form)
        left_layout.addLayout(server_buttons)
        left_layout.addWidget(self.connection_label)
        left_layout.addLayout(cache_row)

        self.query_form = QueryForm(self)
        query_buttons = QHBoxLayout()
        self.search_button = self._button("Search", self.search_first_page, query_buttons)
        self.next_button = self._button("Next page", self.next_page, query_buttons)
        self.next_button.setEnabled(False)
        self.studies = QTreeWidget(self)
        self.studies.setHeaderLabels(STUDY_COLUMNS)
        self.studies.header().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.studies.itemExpanded.connect(self._on_study_expanded)
        self.studies.itemDoubleClicked.connect(lambda item, _column: self.retrieve_selected())
        action_row = QHBoxLayout()
        self.retrieve_button = self._button("Retrieve and open", self.retrieve_selected, action_row)
        self.send_button = self._button("Send DICOM SEG…", self.choose_and_send, action_row)
        self.progress = QProgressBar(self)  # shown only while an operation runs (a stale "0 %" misleads)
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        action_row.addWidget(self.progress, 1)
        self.cancel_button = self._button("Cancel", self.cancel, action_row)
        self.cancel_button.setEnabled(False)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)

        right = QWidget(self)
        right_layout = QVBoxLayout(right)
        right_layout.addWidget(self.query_form)
        right_layout.addLayout(query_buttons)
        right_layout.addWidget(self.studies, 1)
        right_layout.addLayout(action_row)
        right_layout.addWidget(self.status)

        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(left)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        left.setMaximumWidth(480)
        self.server_list.setMaximumHeight(110)
        QVBoxLayout(self).addWidget(splitter)
        self.resize(1300, 800)
        if self._startup_error:
            self._show(self.status, self._startup_error, ok=False)

    # --- servers ---------------------------------------------------------------------------------
    def _refresh_servers(self, select: str | None = None) -> None:
        self.server_list.blockSignals(True)
        self.server_list.clear()
        for server in self.settings.servers:
            self.server_list.addItem(server.describe())
        self.server_list.blockSignals(False)
        names = [s.name for s in self.settings.servers]
        if names:
            self.server_list.setCurrentRow(names.index(select) if select in names else 0)
        self._update_form_state()
        self._update_cache_label()

    @Slot(int)
    def _on_server_chosen(self, row: int) -> None:
        if 0 <= row < len(self.settings.servers):
            self.form.set_server(self.settings.servers[row])
            self.studies.clear()
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
            self._show(self.connection_label, str(error), ok=False)
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
        self._refresh_servers(select=server.name)
        self._show(self.connection_label, note, ok=True)
        return True

    @Slot()
    def remove_server(self) -> None:
        row = self.server_list.currentRow()
        if 0 <= row < len(self.settings.servers):
            self.settings.remove(self.settings.servers[row].name)
            save_settings(self.settings, self.settings_path)
            self._refresh_servers()

    def _credentials(self, server: PacsServer) -> Credentials | None:
        if server.protocol != "dicomweb" or server.auth == "none":
            return None
        typed = self.form.secret.text() or self.session_secrets.get(server.name)
        if typed:
            return Credentials(kind=server.auth, username=server.username, secret=typed)
        return credentials_for(server)

    # --- jobs ------------------------------------------------------------------------------------
    def _run(self, name: str, work: Callable, done: Callable[[Any], None], label: QLabel | None = None) -> bool:
        """Start ``work(progress=, cancel=)`` in a worker; ``done(result)`` runs in the GUI thread."""
        if self.job is not None:
            self._show(self.status, "Busy: wait for the current operation or press Cancel.", ok=False)
            return False
        label = label or self.status
        self.job = Job(f"pacs-{name}", work, self)
        self.job.progressed.connect(self._on_progress)
        self.job.finished_ok.connect(self._on_job_ok)
        self.job.finished_error.connect(self._on_job_error)
        self._pending = (name, done, label)
        self.progress.setRange(0, 0)  # "busy" until the operation says how far it is
        self.progress.setVisible(True)
        self.cancel_button.setEnabled(True)
        self.job.start()
        return True

    @Slot(float, str)
    def _on_progress(self, fraction: float, text: str) -> None:
        if self.progress.maximum() == 0:
            self.progress.setRange(0, 1000)
        self.progress.setValue(int(fraction * 1000))
        self.status.setStyleSheet("")
        self.status.setText(text)

    @Slot(object)
    def _on_job_ok(self, result: Any) -> None:
        name, done, label = self._pending
        self.job = None
        self.cancel_button.setEnabled(False)
        self.progress.setVisible(False)
        try:
            done(result)
        finally:
            self.job_finished.emit(name, True)

    @Slot(object)
    def _on_job_error(self, error: BaseException) -> None:
        name, _done, label = self._pending
        self.job = None
        self.cancel_button.setEnabled(False)
        self.progress.setVisible(False)
        self._show(label, _error_text(error), ok=False)
        self.job_finished.emit(name, False)

    @Slot()
    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _show(self, label: QLabel, text: str, ok: bool) -> None:
        label.setStyleSheet(OK_STYLE if ok else ERROR_STYLE)
        label.setText(text)

    def _prepared(self) -> tuple[PacsServer, Credentials | None] | None:
        try:
            server = self.current_server()
            return server, self._credentials(server)
        except MedsegError as error:
            self._show(self.status, str(error), ok=False)
            self.job_finished.emit("prepare", False)
            return None

    # --- test, query, expand ---------------------------------------------------------------------
    @Slot()
    def test_connection(self) -> None:
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        self.connection_label.setText("Testing…")
        self._run("echo", lambda progress=None, cancel=None: echo(server, credentials=creds),
                  lambda text: self._show(self.connection_label, text, ok=True), self.connection_label)

    @Slot()
    def search_first_page(self) -> None:
        self.search(0)

    def search(self, offset: int = 0) -> None:
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        try:
            filters = self.query_form.filters()
        except MedsegError as error:
            self._show(self.status, str(error), ok=False)
            return
        self.offset = offset

        def work(progress=None, cancel=None):
            return query_studies(server, filters, limit=PAGE_SIZE, offset=offset, credentials=creds, cancel=cancel)

        self._run("query", work, self._show_studies)

    @Slot()
    def next_page(self) -> None:
        self.search(self.offset + PAGE_SIZE)

    def _show_studies(self, page) -> None:
        self.studies.clear()
        for study in page.studies:
            item = QTreeWidgetItem([study.study_date, study.patient_id, study.patient_name, "/".join(study.modalities),
                                    str(study.instance_count or ""), study.description])
            item.setData(0, SERIES_ROLE, study)
            item.setChildIndicatorPolicy(QTreeWidgetItem.ChildIndicatorPolicy.ShowIndicator)
            self.studies.addTopLevelItem(item)
        self.next_button.setEnabled(page.more)
        more = " (more on the next page)" if page.more else ""
        self._show(self.status, f"{len(page.studies)} studies{more}. Expand a study to see its series.", ok=True)

    @Slot(QTreeWidgetItem)
    def _on_study_expanded(self, item: QTreeWidgetItem) -> None:
        if item.parent() is not None or item.childCount() or self.job is not None:
            return
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        study = item.data(0, SERIES_ROLE)

        def work(progress=None, cancel=None):
            return query_series(server, study.study_uid, credentials=creds, cancel=cancel)

        def done(series_list) -> None:
            for series in series_list:
                child = QTreeWidgetItem([f"series {series.number}", "", "", series.modality,
                                         str(series.instance_count or ""), series.description])
                child.setData(0, SERIES_ROLE, series)
                item.addChild(child)
            self._show(self.status, f"{len(series_list)} series. Select one and press Retrieve and open.", ok=True)

        self._run("series", work, done)

    # --- retrieve, send, cache -------------------------------------------------------------------
    def cache(self) -> SeriesCache:
        return SeriesCache(self.settings.cache_path(), limit_mb=self.settings.cache_limit_mb)

    @Slot()
    def retrieve_selected(self) -> None:
        item = self.studies.currentItem()
        series = item.data(0, SERIES_ROLE) if item is not None and item.parent() is not None else None
        if series is None:
            self._show(self.status, "Select a series (expand a study first).", ok=False)
            return
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        cache = self.cache()

        def work(progress=None, cancel=None):
            return retrieve_series(server, series.study_uid, series.series_uid, cache, credentials=creds,
                                   instance_count=series.instance_count, progress=progress, cancel=cancel)

        def done(result) -> None:
            self._update_cache_label()
            self._show(self.status, f"Retrieved {result.expected} instances ({result.already_cached} were already "
                                    "in the cache); opening the series.", ok=True)
            self.series_retrieved.emit(result.folder)

        self._run("retrieve", work, done)

    @Slot()
    def choose_and_send(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Send DICOM SEG", "", "DICOM (*.dcm);;All files (*)")
        if paths:
            self.send(paths)

    def send(self, paths: list[str]) -> None:
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared

        def work(progress=None, cancel=None):
            return send_files(server, paths, credentials=creds, cancel=cancel)

        def done(results) -> None:
            self.send_results = results
            lines = [f"{'stored' if r.ok else 'FAILED'} ({r.status}): {Path(r.path).name}" for r in results]
            self._show(self.status, "\n".join(lines), ok=all(r.ok for r in results))

        self._run("send", work, done)

    def _update_cache_label(self) -> None:
        cache = self.cache()
        self.cache_label.setText(f"Cache: {cache.size_bytes() / 1e6:.0f} MB in {cache.root}")

    @Slot()
    def _on_cache_limit(self) -> None:
        self.settings = replace(self.settings, cache_limit_mb=self.cache_limit.value())
        try:
            save_settings(self.settings, self.settings_path)
        except MedsegError as error:
            self._show(self.status, str(error), ok=False)

    @Slot()
    def clear_cache(self) -> None:
        freed = self.cache().clear()
        self._update_cache_label()
        self._show(self.status, f"Cache cleared ({freed / 1e6:.0f} MB of patient data deleted).", ok=True)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.job is not None:
            self.job.cancel()
        super().closeEvent(event)
