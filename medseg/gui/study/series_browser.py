"""The series browser: scan a folder/zip/DICOMDIR in a worker, list what is in it.

Every series found is listed (patient, study, series, modality, description, slices,
spacing, geometry findings). Localizers, secondary captures and other non-volume
objects are listed as such and cannot be loaded. Double-click (or Load) loads one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from PySide6.QtCore import Signal, Slot
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from medseg import io as medseg_io
from medseg.errors import Cancelled
from medseg.gui.common.jobs import Job
from medseg.gui.common.messages import join_messages

COLUMNS = ("Patient", "Study", "Series", "Modality", "Description", "Slices", "Size", "Spacing (mm)", "Type", "Findings")
KIND_TEXT = {
    "volume": "volume",
    "single_slice": "single slice",
    "localizer": "localizer (not a volume)",
    "secondary_capture": "secondary capture (not a volume)",
    "not_a_volume": "not a volume",
}


def _fmt_spacing(spacing: Sequence[float]) -> str:
    return " × ".join(f"{s:.3g}" for s in spacing)



def scan_summary(paths: Sequence[str], result: Any) -> str:
    """The browser's first line after a scan: what was found, or exactly why nothing can open."""
    where = Path(paths[0]).name if len(paths) == 1 else f"the {len(paths)} items"
    loadable = sum(1 for s in result.series if s.loadable)
    if not result.series and not result.skipped:
        if len(paths) == 1 and Path(paths[0]).is_dir():
            return f"The folder {where} is empty: it holds no files."
        return f"Nothing to open in {where}: no files were found."
    if not result.series:
        if len(result.skipped) == 1:
            only = result.skipped[0]
            return f"No CT image in {where}: {Path(only.path).name} is not one ({only.reason[:80]})."
        return f"No CT images in {where}: its {len(result.skipped)} files are not DICOM images (see below)."
    if not loadable:
        return f"{len(result.series)} series found in {where}, but none is a CT volume (see Type)."
    return (f"{len(result.series)} series found, {loadable} loadable as a volume. "
            "Double-click one to load it.")

class SeriesBrowser(QDialog):
    scan_finished = Signal(object)  # ScanResult, GUI thread
    scan_failed = Signal(object)
    series_chosen = Signal(object)  # SeriesInfo

    def __init__(self, paths: Sequence[str], parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.paths = [str(p) for p in paths]
        self.result: Any = None
        self.job: Job | None = None
        self.setWindowTitle("Series browser")
        self.resize(1000, 380)
        self.status = QLabel("Scanning …", self)
        self.progress_bar = QProgressBar(self)
        self.progress_bar.setRange(0, 1000)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setEditTriggers(QAbstractItemView.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.cellDoubleClicked.connect(self._on_double_click)
        self.table.itemSelectionChanged.connect(self._update_buttons)
        # Files that are not CT images: one short line, and the list with each file's reason on demand.
        self.skipped_label = QLabel(self)
        self.skipped_label.setWordWrap(True)
        self.skipped_button = QToolButton(self)
        self.skipped_button.setText("Show which and why")
        self.skipped_button.setCheckable(True)
        self.skipped_button.setVisible(False)
        self.skipped_list = QPlainTextEdit(self)
        self.skipped_list.setReadOnly(True)
        self.skipped_list.setVisible(False)
        self.skipped_list.setMaximumHeight(140)
        self.skipped_button.toggled.connect(self.skipped_list.setVisible)
        skipped_row = QHBoxLayout()
        skipped_row.addWidget(self.skipped_label, 1)
        skipped_row.addWidget(self.skipped_button)
        buttons = QDialogButtonBox(self)
        self.load_button = QPushButton("Load", self)
        self.load_button.setEnabled(False)
        self.cancel_button = QPushButton("Cancel scan", self)
        buttons.addButton(self.load_button, QDialogButtonBox.ButtonRole.AcceptRole)
        buttons.addButton(self.cancel_button, QDialogButtonBox.ButtonRole.RejectRole)
        close_button = buttons.addButton(QDialogButtonBox.StandardButton.Close)
        close_button.clicked.connect(self.reject)
        self.load_button.clicked.connect(self._load_selected)
        self.cancel_button.clicked.connect(self._cancel_scan)
        layout = QVBoxLayout(self)
        for widget in (self.status, self.progress_bar, self.table):
            layout.addWidget(widget)
        layout.addLayout(skipped_row)
        layout.addWidget(self.skipped_list)
        layout.addWidget(buttons)

    # --- scanning ---------------------------------------------------------------------------
    def start_scan(self) -> None:
        paths = self.paths

        def work(progress=None, cancel=None):
            return medseg_io.scan(paths, progress=progress, cancel=cancel)

        self.job = Job("scan", work, self, pause_gc=True)
        self.job.progressed.connect(self._on_progress)
        self.job.finished_ok.connect(self._on_scanned)
        self.job.finished_error.connect(self._on_scan_error)
        self.job.start()

    def _cancel_scan(self) -> None:
        if self.job is not None:
            self.job.cancel()

    @Slot(float, str)
    def _on_progress(self, fraction: float, text: str) -> None:
        self.progress_bar.setValue(int(fraction * 1000))
        self.status.setText(text)

    @Slot(object)
    def _on_scanned(self, result: Any) -> None:
        self.job = None
        self.result = result
        self.progress_bar.setValue(1000)
        self.cancel_button.setEnabled(False)
        self.status.setText(scan_summary(self.paths, result))
        self._fill(result)
        self.scan_finished.emit(result)

    @Slot(object)
    def _on_scan_error(self, error: BaseException) -> None:
        self.job = None
        self.cancel_button.setEnabled(False)
        self.status.setText("Scan cancelled." if isinstance(error, Cancelled) else f"Scan failed: {error}")
        self.scan_failed.emit(error)

    def shutdown(self) -> None:
        if self.job is not None:
            self.job.wait_stopped()

    def closeEvent(self, event) -> None:  # noqa: N802
        self._cancel_scan()
        super().closeEvent(event)

    # --- table ------------------------------------------------------------------------------
    def _fill(self, result: Any) -> None:
        self.table.setRowCount(len(result.series))
        grey = QBrush(QColor(140, 140, 140))
        for row, series in enumerate(result.series):
            findings = join_messages([f.message for f in series.findings])
            patient = series.patient_name or series.patient_id or "(anonymous)"
            cells = (
                patient,
                " ".join(t for t in (series.study_description, series.study_date) if t),
                str(series.series_number or ""),
                series.modality,
                series.series_description,
                str(series.n_files if series.kind != "volume" else series.size_xyz[2]),
                f"{series.size_xyz[0]} × {series.size_xyz[1]} × {series.size_xyz[2]}",
                _fmt_spacing(series.spacing_mm),
                KIND_TEXT.get(series.kind, series.kind),
                findings or "none",
            )
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == len(cells) - 1 and findings:
                    item.setToolTip(findings)
                if not series.loadable:
                    item.setForeground(grey)
                    item.setToolTip(f"{KIND_TEXT.get(series.kind, series.kind)}: cannot be loaded as a volume")
                self.table.setItem(row, column, item)
        skipped = len(result.skipped)
        self.skipped_label.setText(f"{skipped} file{'s' if skipped != 1 else ''} skipped: not CT images."
                                   if skipped else "")
        self.skipped_button.setVisible(bool(skipped))
        self.skipped_list.setPlainText("\n".join(f"{Path(k.path).name}: {k.reason}    ({k.path})" for k in result.skipped))
        first_loadable = next((i for i, s in enumerate(result.series) if s.loadable), None)
        if first_loadable is not None:
            self.table.selectRow(first_loadable)
        self._update_buttons()

    def _selected_series(self) -> Any:
        rows = {index.row() for index in self.table.selectionModel().selectedRows()}
        if not rows or self.result is None:
            return None
        return self.result.series[min(rows)]

    def _update_buttons(self) -> None:
        series = self._selected_series()
        self.load_button.setEnabled(series is not None and series.loadable)

    def _on_double_click(self, row: int, _column: int) -> None:
        self.table.selectRow(row)
        self._load_selected()

    def _load_selected(self) -> None:
        series = self._selected_series()
        if series is None or not series.loadable:
            self.status.setText("This series cannot be loaded as a volume (see Type).")
            return
        self.series_chosen.emit(series)
        self.accept()
