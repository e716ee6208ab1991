"""Segmentation ▸ Models…: the catalogue in a window — what is installed, what can be installed (size,
licence, structures, how medseg runs it), install with progress and cancel, the licence shown and
accepted before anything is fetched, remove, verify, install a pack or import a folder.

The work is medseg.catalogue's (the CLI's ``medseg models`` runs the same functions); downloads and
conversions run as a background Job, never on the GUI thread.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDialog,
    QDialogButtonBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableWidget,
    QTableWidgetItem,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from medseg.errors import Cancelled, LicenceNotAccepted, MedsegError
from medseg.gui.segment.model_details import LicenceDialog, details_html, size_text

if TYPE_CHECKING:
    from medseg.gui.common.jobs import Job

ALL, INSTALLED, INSTALLABLE = "All models", "Installed", "Installable"
COLUMNS = ("Model", "State", "Structures", "Size", "Licence", "medseg runs it")


class ModelsDialog(QDialog):
    """The model catalogue: list, details, install (with progress and cancel), remove, verify."""

    model_chosen = Signal(str)  # "Use for Segment" on an installed model (its catalogue id)
    installed = Signal(str)  # a model finished installing (its id)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setWindowTitle("Models")
        self.job: Job | None = None
        self._retry: Callable[[], None] | None = None  # the install to run again once a refused licence is accepted
        self.licence_box: LicenceDialog | None = None
        self.filter_box = QComboBox(self)
        self.filter_box.addItems([ALL, INSTALLED, INSTALLABLE])
        self.filter_box.currentIndexChanged.connect(lambda _i: self.refresh())
        self.search = QLineEdit(self)
        self.search.setPlaceholderText("Search models and structures (e.g. liver, vertebrae)")
        self.search.textChanged.connect(lambda _t: self.refresh())
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.verticalHeader().setVisible(False)
        self.table.horizontalHeader().setStretchLastSection(True)  # the columns fit; the details say the rest
        self.table.itemSelectionChanged.connect(self._show_details)
        self.details = QTextBrowser(self)
        self.details.setOpenExternalLinks(True)
        self.install_button = QPushButton("Install", self)
        self.install_button.clicked.connect(self.install_selected)
        # TotalSegmentator's licensed tasks download with the user's licence key (medseg.catalogue.licence_key)
        self.key_label = QLabel("TotalSegmentator licence key:", self)
        self.key_field = QLineEdit(self)
        self.key_field.setEchoMode(QLineEdit.EchoMode.Password)  # a key is not shown to whoever looks on
        self.key_field.setObjectName("licence-key")
        self.key_field.setPlaceholderText("the 18-character key from your licence e-mail")
        self.key_field.returnPressed.connect(self.install_selected)
        self.use_button = QPushButton("Use for Segment", self)
        self.use_button.clicked.connect(self._use_selected)
        self.remove_button = QPushButton("Remove", self)
        self.remove_button.clicked.connect(self.remove_selected)
        self.verify_button = QPushButton("Verify", self)
        self.verify_button.clicked.connect(self.verify_selected)
        self.from_file_button = QPushButton("Install from file…", self)
        self.from_file_button.setToolTip("A pack made by `medseg models pack` (no network needed), or a zip of "
                                         "weights as its publisher sends it")
        self.from_file_button.clicked.connect(self._install_from_file)
        self.import_button = QPushButton("Import folder…", self)
        self.import_button.setToolTip("An nnU-Net result folder, a TotalSegmentator home (~/.totalsegmentator) or an "
                                      "nnInteractive model folder (nnInteractive_v1.0 or your own checkpoint)")
        self.import_button.clicked.connect(self._import_folder)
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.clicked.connect(self.cancel)
        self.cancel_button.setVisible(False)
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.progress.setVisible(False)
        self.status = QLabel(self)
        self.status.setWordWrap(True)
        self.status.setObjectName("models-status")
        top = QHBoxLayout()
        top.addWidget(self.filter_box)
        top.addWidget(self.search, 1)
        splitter = QSplitter(Qt.Orientation.Vertical, self)
        splitter.addWidget(self.table)
        splitter.addWidget(self.details)
        splitter.setSizes([300, 260])
        actions = QHBoxLayout()
        for button in (self.install_button, self.use_button, self.remove_button, self.verify_button):
            actions.addWidget(button)
        actions.addStretch(1)
        for button in (self.from_file_button, self.import_button):
            actions.addWidget(button)
        key_row = QHBoxLayout()
        key_row.addWidget(self.key_label)
        key_row.addWidget(self.key_field, 1)
        running = QHBoxLayout()
        running.addWidget(self.progress, 1)
        running.addWidget(self.cancel_button)
        close = QDialogButtonBox(QDialogButtonBox.StandardButton.Close, self)
        close.rejected.connect(self.reject)
        layout = QVBoxLayout(self)
        layout.addLayout(top)
        layout.addWidget(splitter, 1)
        layout.addLayout(actions)
        layout.addLayout(key_row)
        layout.addLayout(running)
        layout.addWidget(self.status)
        layout.addWidget(close)
        self.resize(980, 720)
        self.refresh()

    # --- the list -----------------------------------------------------------------------------------
    def _rows(self) -> list[tuple]:
        from medseg.catalogue import load_catalogue
        from medseg.catalogue.entries import parse_entry
        from medseg.catalogue.folders import installed_models

        catalogue = load_catalogue()
        installed = {record.id: record for record in installed_models()}
        rows = [(entry, installed.get(entry.id)) for entry in catalogue]
        rows += [(parse_entry(record.entry), record) for record in installed.values() if record.id not in catalogue]
        return rows

    def refresh(self, select: str | None = None) -> None:
        keep = select or self.selected_id()
        try:
            rows = self._rows()
        except MedsegError as error:
            self.status.setText(str(error))
            return
        shown = self.filter_box.currentText()
        words = self.search.text().strip().lower().split()
        self._entries = {}
        self.table.setRowCount(0)
        for entry, record in rows:
            installed = entry.builtin is not None or record is not None
            if (shown == INSTALLED and not installed) or (shown == INSTALLABLE and installed):
                continue
            haystack = " ".join([entry.id, entry.title, *(s.name for s in entry.structures),
                                 *(s.group for s in entry.structures)]).lower()
            if any(word not in haystack for word in words):
                continue
            state = "built in" if entry.builtin else (
                f"installed {record.version}" + (" (system-wide)" if record.read_only else "") if record
                else "not installed")
            spdx = "licensed" if entry.licence.spdx.startswith("LicenseRef-") else entry.licence.spdx
            licence = spdx + (", accept first" if entry.licence.acceptance_required else "") + (
                "" if entry.licence.commercial_use else ", non-commercial")
            cells = (entry.id, state, str(len(entry.structures)), size_text(entry, record), licence, entry.support)
            row = self.table.rowCount()
            self.table.insertRow(row)
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                item.setToolTip(entry.title if column == 0 else text)
                self.table.setItem(row, column, item)
            self._entries[entry.id] = (entry, record)
        self.table.resizeColumnsToContents()
        self.select(keep)
        self._update_buttons()

    def select(self, model_id: str | None) -> bool:
        for row in range(self.table.rowCount()):
            item = self.table.item(row, 0)
            if item is not None and item.text() == model_id:
                self.table.selectRow(row)
                return True
        return False

    def selected_id(self) -> str | None:
        rows = self.table.selectionModel().selectedRows() if self.table.selectionModel() else []
        item = self.table.item(rows[0].row(), 0) if rows else None
        return item.text() if item is not None else None

    def _selected(self):
        return self._entries.get(self.selected_id() or "", (None, None))

    def _update_buttons(self) -> None:
        entry, record = self._selected()
        busy = self.job is not None
        keyed = self._needs_key(entry)
        self.install_button.setEnabled(bool(entry) and not entry.builtin and (entry.downloadable or keyed) and not busy)
        self.install_button.setToolTip("" if not entry or entry.downloadable else
                                       "Downloads with your TotalSegmentator licence key (the field below)" if keyed
                                       else "Its publisher sends the weights to licence holders: Install from file…")
        self._show_key_field(entry, record, keyed)
        self.install_button.setText("Install again" if record else "Install")
        self.use_button.setEnabled(bool(entry) and (entry.builtin is not None or record is not None))
        self.use_button.setText("Use for Interactive AI" if entry is not None and entry.interactive else "Use for Segment")
        self.remove_button.setEnabled(record is not None and not record.read_only and not busy)
        self.verify_button.setEnabled(record is not None and not busy)
        for button in (self.from_file_button, self.import_button):
            button.setEnabled(not busy)

    @staticmethod
    def _needs_key(entry) -> bool:
        from medseg.catalogue.licence_key import needs_key

        return entry is not None and needs_key(entry)

    def _show_key_field(self, entry, record, keyed: bool) -> None:
        from medseg.catalogue.licence_key import key_summary, where_to_get_one

        for widget in (self.key_label, self.key_field):
            widget.setVisible(keyed)
        self.key_field.setEnabled(keyed and self.job is None)
        if keyed:
            stored = key_summary(record) if record is not None else ""
            self.key_field.setToolTip(f"{entry.id} needs TotalSegmentator's licence: {where_to_get_one()}."
                                      + (f" Installed with {stored}; leave empty to use it again."
                                         if stored.startswith("licence key") else ""))

    def _show_details(self) -> None:
        self._update_buttons()
        entry, record = self._selected()
        if entry is None:
            self.details.clear()
            return
        self.details.setHtml(details_html(entry, record))

    # --- actions ------------------------------------------------------------------------------------
    def install_selected(self) -> None:
        entry, _record = self._selected()
        if entry is None or entry.builtin or self.job is not None:
            return
        key = None
        if self._needs_key(entry):
            from medseg.catalogue.licence_key import check_key, stored_key

            typed = self.key_field.text().strip()
            try:  # before the licence is shown or anything is fetched
                key = check_key(entry, typed or stored_key(_record.folder if _record is not None else None))
            except MedsegError as error:
                self.status.setText(f"Not installed: {error}")
                self.key_field.setFocus()
                return
        if entry.licence.acceptance_required:
            self.licence_box = LicenceDialog(entry, self)
            self.licence_box.accepted.connect(lambda: self._start_install(entry.id, accepted=True, key=key))
            self.licence_box.rejected.connect(
                lambda: self.status.setText(f"{entry.id} was not installed: its licence was not accepted."))
            self.licence_box.open()
            return
        self._start_install(entry.id, accepted=False)

    def _start_install(self, model_id: str, accepted: bool, key: str | None = None) -> None:
        from medseg.workflows.model_install import InstallRequest, install_model

        self._retry = None

        def work(progress=None, cancel=None):
            return install_model(InstallRequest(model_id, licence_key=key), accepted, progress=progress, cancel=cancel)

        self._run(f"install-{model_id}", work, f"Installing {model_id}…")

    def _install_from_file(self) -> None:
        name, _ = QFileDialog.getOpenFileName(self, "Install a model pack or a publisher's zip", "",
                                              "Model packs and zips (*.medsegpack *.zip);;All files (*)")
        if name:
            self.install_file(Path(name))

    def install_file(self, path: Path, accepted: bool = False) -> None:
        """A pack (no network) or a publisher's zip; a licensed model asks for its licence first."""
        from medseg.workflows.model_install import install_file

        def ask(entry) -> bool:
            return accepted  # asked before the job (below, or after a refusal); a job never opens a window

        def work(progress=None, cancel=None):
            return install_file(path, ask, progress=progress, cancel=cancel)

        if not accepted:
            entry = self._pack_entry(path)
            if entry is not None and entry.licence.acceptance_required:
                self.licence_box = LicenceDialog(entry, self)
                self.licence_box.accepted.connect(lambda: self.install_file(path, accepted=True))
                self.licence_box.open()
                return
        self._retry = lambda: self.install_file(path, accepted=True)
        self._run("install-file", work, f"Installing {path.name}…")

    def _pack_entry(self, path: Path):
        import json
        import zipfile

        from medseg.catalogue.entries import parse_entry
        from medseg.catalogue.packs import PACK_MANIFEST, is_pack

        if not is_pack(path):
            return None
        try:
            with zipfile.ZipFile(path) as archive:
                return parse_entry(json.loads(archive.read(PACK_MANIFEST))["entry"])
        except (KeyError, ValueError, MedsegError):
            return None  # the install itself names what is wrong

    def _import_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Import an nnU-Net result folder or a TotalSegmentator home")
        if folder:

            self.import_folder(Path(folder))

    def import_folder(self, folder: Path, accepted: bool = False) -> None:
        """Register the models in an nnU-Net or TotalSegmentator folder (a licensed one asks first)."""
        from medseg.workflows.model_install import import_models

        self._retry = lambda: self.import_folder(folder, accepted=True)
        self._run("import-models", lambda progress=None, cancel=None: import_models(
            folder, accepted, progress=progress, cancel=cancel), f"Importing {folder}…")

    def remove_selected(self) -> None:
        entry, record = self._selected()
        if record is None:
            return
        from medseg.catalogue.install import remove

        try:
            remove(record.id)
            self.status.setText(f"Removed {record.id}.")
        except MedsegError as error:
            self.status.setText(str(error))
        self.refresh()

    def verify_selected(self) -> None:
        entry, record = self._selected()
        if record is None:
            return
        from medseg.catalogue.install import verify

        try:
            (result,) = verify(record.id)
        except MedsegError as error:
            self.status.setText(str(error))
            return
        if result.ok:
            self.status.setText(f"{record.id}: every file is as installed.")
        else:
            changed = ", ".join([*result.changed, *result.missing, *result.extra][:5])
            self.status.setText(f"{record.id} has changed since it was installed ({changed}); install it again.")

    def _use_selected(self) -> None:
        entry, _record = self._selected()
        if entry is not None:
            self.model_chosen.emit(entry.id)

    # --- the background job -------------------------------------------------------------------------
    def _ask_licence_then(self, model_id: str, retry, entry=None) -> None:
        """A file or folder held a licensed model: show its licence; accepting runs the same install again."""
        from medseg.catalogue import load_catalogue

        entry = entry or load_catalogue().get(model_id)
        self.status.setText(f"{model_id} needs its licence accepted before it is installed.")
        self.licence_box = LicenceDialog(entry, self)
        self.licence_box.accepted.connect(retry)
        self.licence_box.rejected.connect(
            lambda: self.status.setText(f"Nothing was installed: the licence of {model_id} was not accepted."))
        self.licence_box.open()

    def _run(self, name: str, work, text: str) -> None:
        from medseg.gui.common.jobs import Job

        job = self.job = Job(name, work, self, title=text)
        job.progressed.connect(self._on_progress)
        job.finished_ok.connect(self._on_done)
        job.finished_error.connect(self._on_error)
        self.progress.setValue(0)
        self.progress.setVisible(True)
        self.cancel_button.setVisible(True)
        self.status.setText(text)
        self._update_buttons()
        job.start()

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def _on_progress(self, fraction: float, text: str) -> None:
        self.progress.setValue(int(fraction * 1000))
        self.status.setText(text)

    def _finish(self) -> None:
        self.job = None
        self.progress.setVisible(False)
        self.cancel_button.setVisible(False)

    def _on_done(self, result) -> None:
        self._finish()
        self.key_field.clear()  # installed: the key lives with the model now, not in the window
        records = getattr(result, "installed", None)
        records = records if records is not None else [result]
        ids = [record.id for record in records]
        self.status.setText("Installed " + ", ".join(ids) + "." if ids else "Nothing was installed.")
        self.refresh(select=ids[0] if ids else None)
        for model_id in ids:
            self.installed.emit(model_id)

    def _on_error(self, error: BaseException) -> None:
        self._finish()
        retry, self._retry = self._retry, None
        refused = getattr(error, "model_id", None)
        if isinstance(error, LicenceNotAccepted) and retry is not None and refused:
            self._ask_licence_then(refused, retry, getattr(error, "entry", None))
            return
        if isinstance(error, Cancelled):
            self.status.setText("Cancelled: nothing was installed. A download resumes where it stopped next time.")
        else:
            self.status.setText(f"Not installed: {error}")
        self.refresh()

    def done(self, result: int) -> None:  # closing waits for a running job to stop
        if self.job is not None:
            self.job.wait_stopped()
            self._finish()
        super().done(result)
