"""The series browser: scan a folder/zip/DICOMDIR in a worker, list what is in it.

Every series found is listed (patient, study, series, modality, description, slices,
spacing, geometry findings). Localizers, secondary captures and other non-volume
objects are listed as such and cannot be loaded. Double-click (or Load) loads one.
"""

from __future__ import annotations

from typing import Any, Sequence

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
    QDialogButtonBox,
    QHeaderView,
    QLabel,
    QProgressBar,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg import io as medseg_io
from medseg.errors import Cancelled
from medseg.gui.banners import join_messages
from medseg.gui.jobs import Job

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
        self.skipped_label = QLabel(self)
        self.skipped_label.setWordWrap(True)
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
        for widget in (self.status, self.progress_bar, self.table, self.skipped_label, buttons):
            layout.addWidget(widget)

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
        loadable = sum(1 for s in result.series if s.loadable)
        self.status.setText(f"{len(result.series)} series found, {loadable} loadable as a volume. Double-click one to load it.")
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
        self.skipped_label.setText(f"{skipped} file(s) skipped (not DICOM images)." if skipped else "")
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
