"""File > PACS: configure servers, find a study, retrieve a series into the cache, send a DICOM SEG.

Every network call runs as a :class:`~medseg.gui.common.jobs.Job` (progress, cancel, never on the
GUI thread), so a slow or dead PACS shows a timeout message, never a frozen window. A
retrieved series is announced with :attr:`PacsDialog.series_retrieved` (its cache folder);
the main window opens it. The servers and the cache are :class:`~medseg.gui.pacs.servers_page.ServersPage`
(the left side); the forms are medseg.gui.pacs.forms; here: finding, retrieving, sending and the jobs.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QDialog,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTreeWidget,
    QTreeWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.errors import Cancelled, MedsegError
from medseg.gui.common.jobs import Job
from medseg.gui.pacs.forms import QueryForm
from medseg.gui.pacs.servers_page import ServersPage, show_result
from medseg.io.pacs import (
    Credentials,
    PacsServer,
    PacsSettings,
    echo,
    query_series,
    query_studies,
    retrieve_series,
    send_files,
)

PAGE_SIZE = 50
STUDY_COLUMNS = ["Date", "Patient ID", "Patient name", "Modalities", "Images", "Description"]
SERIES_ROLE = Qt.ItemDataRole.UserRole


def _error_text(error: BaseException) -> str:
    if isinstance(error, Cancelled):
        return "Cancelled; nothing was marked complete."
    if isinstance(error, MedsegError):
        return str(error)
    return f"Unexpected error: {type(error).__name__}: {error}"


class PacsDialog(QDialog):
    series_retrieved = Signal(str)  # GUI thread: the complete series' cache folder
    job_finished = Signal(str, bool)  # GUI thread: job name, success (tests wait on this)

    def __init__(self, parent: QWidget | None = None, settings: PacsSettings | None = None,
                 settings_path: str | Path | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("PACS")
        self.job: Job | None = None
        self.offset = 0
        self.send_results: list[Any] = []
        self.servers = ServersPage(settings, settings_path, lambda text, ok: show_result(self.status, text, ok), self)
        self.servers.test_button.clicked.connect(self.test_connection)
        self._build()
        self.servers.refresh_servers()

    def _button(self, text: str, slot: Callable, layout) -> QPushButton:
        button = QPushButton(text, self)
        button.clicked.connect(slot)
        layout.addWidget(button)
        return button

    def _build(self) -> None:
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
        self.servers.server_chosen.connect(self.studies.clear)
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
        splitter.addWidget(self.servers)
        splitter.addWidget(right)
        splitter.setStretchFactor(1, 1)
        self.servers.setMaximumWidth(480)
        QVBoxLayout(self).addWidget(splitter)
        self.resize(1300, 800)
        if self.servers.startup_error:
            show_result(self.status, self.servers.startup_error, ok=False)

    # --- jobs ------------------------------------------------------------------------------------
    def _run(self, name: str, work: Callable, done: Callable[[Any], None], label: QLabel | None = None) -> bool:
        """Start ``work(progress=, cancel=)`` in a worker; ``done(result)`` runs in the GUI thread."""
        if self.job is not None:
            show_result(self.status, "Busy: wait for the current operation or press Cancel.", ok=False)
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
        show_result(label, _error_text(error), ok=False)
        self.job_finished.emit(name, False)

    @Slot()
    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _prepared(self) -> tuple[PacsServer, Credentials | None] | None:
        try:
            server = self.servers.current_server()
            return server, self.servers.credentials(server)
        except MedsegError as error:
            show_result(self.status, str(error), ok=False)
            self.job_finished.emit("prepare", False)
            return None

    # --- test, query, expand ---------------------------------------------------------------------
    @Slot()
    def test_connection(self) -> None:
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        self.servers.connection_label.setText("Testing…")
        self._run("echo", lambda progress=None, cancel=None: echo(server, credentials=creds),
                  lambda text: show_result(self.servers.connection_label, text, ok=True), self.servers.connection_label)

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
            show_result(self.status, str(error), ok=False)
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
        show_result(self.status, f"{len(page.studies)} studies{more}. Expand a study to see its series.", ok=True)

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
            show_result(self.status, f"{len(series_list)} series. Select one and press Retrieve and open.", ok=True)

        self._run("series", work, done)

    # --- retrieve, send, cache -------------------------------------------------------------------
    @Slot()
    def retrieve_selected(self) -> None:
        item = self.studies.currentItem()
        series = item.data(0, SERIES_ROLE) if item is not None and item.parent() is not None else None
        if series is None:
            show_result(self.status, "Select a series (expand a study first).", ok=False)
            return
        prepared = self._prepared()
        if prepared is None:
            return
        server, creds = prepared
        cache = self.servers.cache()

        def work(progress=None, cancel=None):
            return retrieve_series(server, series.study_uid, series.series_uid, cache, credentials=creds,
                                   instance_count=series.instance_count, progress=progress, cancel=cancel)

        def done(result) -> None:
            self.servers.update_cache_label()
            show_result(self.status, f"Retrieved {result.expected} instances ({result.already_cached} were already "
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
            show_result(self.status, "\n".join(lines), ok=all(r.ok for r in results))

        self._run("send", work, done)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.job is not None:
            self.job.cancel()
        super().closeEvent(event)
