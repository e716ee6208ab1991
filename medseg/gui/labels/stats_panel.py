"""The statistics table: per-label voxels, ml, HU mean/SD/min/max/median and LPS bounding box, with CSV export.

Recomputed on demand (Refresh, or when a new label map or image arrives), not on every
brush stroke: a full pass over a large CT takes a moment and the user asks for numbers
when they want them. The count runs as a job (the one job runner), not on the GUI thread:
117 structures over a 512 x 512 x 300 CT took 1.4 s, twice when a result opened, and the
window stood still meanwhile. An edit made while it counts marks the figures stale.
"""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import Signal, Slot
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.errors import MedsegError
from medseg.gui.common import save_dialog
from medseg.gui.common.jobs import Job
from medseg.gui.common.view_state import ViewState
from medseg.job_registry import JobRegistry
from medseg.workflows.statistics import (
    STANDARD,
    TOTALSEGMENTATOR,
    LabelStats,
    Statistics,
    label_statistics,
    measure,
    study_columns,
)

COLUMNS = ("Label", "Voxels", "Volume (ml)", "HU mean", "HU SD", "HU min", "HU max", "HU median",
           "Size x×y×z (mm)")


class StatsPanel(QWidget):
    failed = Signal(object)
    exported = Signal(str)
    counted = Signal()  # the table shows the figures of the latest count (or that there is nothing to count)

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.view = view
        self.stats: list[LabelStats] = []
        self._stale = False  # the label map was edited since the figures were counted
        self._edits = 0  # edits seen: a count started before the last edit gives stale figures
        self._job: Job | None = None  # the latest count; an older one's figures are dropped when they come
        self._running: set[Job] = set()  # every count whose thread still runs (a dropped one too): waited at close
        self._jobs = JobRegistry()
        self._counting: tuple = ()  # what it counts: the image's and label map's ids, edits seen
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        size_header = self.table.horizontalHeaderItem(COLUMNS.index("Size x×y×z (mm)"))
        assert size_header is not None, "setHorizontalHeaderLabels made an item per column"
        size_header.setToolTip(
            "The extent of the label's voxels along the image's own axes: its columns, rows and slices, whole voxels "
            "counted times the spacing (as 3D Slicer's Segment Statistics and ITK-SNAP measure it), so one "
            "slice of 5 mm is 5 mm tall. Each is listed under the patient axis it lies nearest: x (right→left), "
            "y (front→back), z (feet→head). On a tilted series z is along the slice normal, not the patient's "
            "feet→head axis.")
        self.table.verticalHeader().setVisible(False)
        self.table.setEditTriggers(QTableWidget.EditTrigger.NoEditTriggers)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.summary = QLabel("No segmentation.", self)
        self.refresh_button = QPushButton("Refresh", self)
        self.refresh_button.clicked.connect(self.refresh)
        self.export_button = QPushButton("Export…", self)
        self.export_button.setToolTip("Save the figures as CSV or JSON")
        self.definitions_box = QComboBox(self)
        self.definitions_box.addItem("Standard", "standard")
        self.definitions_box.addItem("TotalSegmentator", "totalsegmentator")
        self.definitions_box.setToolTip(
            "Which definitions the exported file follows (it says so inside). Standard: ml, HU as stored, SD n-1, "
            "percentiles. TotalSegmentator: its --statistics (mm³, the CT cast to int16, structures within 3 voxels "
            "of the image's edge reported as 0), to compare with its statistics.json")
        self.export_button.clicked.connect(self.export_dialog)
        self.patient_name_box = QCheckBox("with the patient's name", self)
        self.patient_name_box.setToolTip("The CSV always names the series (UID and description); the patient's "
                                         "name only when ticked")
        self.table.setToolTip("Double-click a label to make it active and show its largest cross-section")
        self.table.cellDoubleClicked.connect(lambda row, _column: self.show_label(self.stats[row].value))
        # rows as tall as their text needs (the style's 30 px showed two rows in a laptop's dock; #25.11, #42.15)
        self.table.verticalHeader().setDefaultSectionSize(self.table.fontMetrics().height() + 8)
        # three whole rows at the least (the starter's body, lungs, bones; the frame cut the third): the dock opens taller
        self.table.setMinimumHeight(self.table.verticalHeader().defaultSectionSize() * 3
                                    + self.table.horizontalHeader().sizeHint().height() + 2 * self.table.frameWidth())
        buttons = QHBoxLayout()
        buttons.addWidget(self.summary, 1)
        buttons.addWidget(self.refresh_button)
        buttons.addWidget(self.patient_name_box)
        buttons.addWidget(self.definitions_box)
        buttons.addWidget(self.export_button)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.table, 1)
        layout.addLayout(buttons)
        document.label_map_changed.connect(self.refresh)
        document.label_map_edited.connect(self._mark_stale)
        document.labels_changed.connect(self._rename)
        self.refresh()

    @Slot()
    def refresh(self) -> None:
        """Count again, in a worker; :attr:`counted` says when the table shows the new figures."""
        doc = self.document
        if doc.volume is None or doc.label_map is None:
            self._job = None
            self.stats, self._stale = [], False
            self._fill()
            self.counted.emit()
            return
        image, labels, edits = doc.volume, doc.label_map, self._edits
        if self._job is not None and self._counting == (id(image), id(labels), edits):
            return  # the count running now is of this very state (a new result asks twice: opened, segmented)
        table = dict(doc.labels)  # the table as it is now: the count runs on while the user renames
        if any(item.value not in table for item in self.stats):
            # a new segmentation (a model's result, a file): while it is counted, no row names a label that
            # is gone, so the table and the label list never disagree
            self.stats = [item for item in self.stats if item.value in table]
            self._fill()
        # Not listed in the status bar (its own registry): the summary line says "Counting…", and a second
        # job there would take the Cancel button from the one the user may want to stop (Segment).
        job = Job("label statistics", lambda progress=None, cancel=None: label_statistics(image, labels, table),
                  self, cancellable=False, computes=True, registry=self._jobs)
        job.finished_ok.connect(lambda stats: self._counted(job, stats, edits))
        job.finished_error.connect(lambda error: self._count_failed(job, error))
        self._job, self._counting = job, (id(image), id(labels), edits)
        self._running.add(job)
        self.summary.setText("Counting…")
        job.start()

    def _counted(self, job: Job, stats: list[LabelStats], edits: int) -> None:
        self._running.discard(job)
        job.deleteLater()
        if job is not self._job:  # a newer count is running: its figures are the ones to show
            return
        self._job = None
        self.stats = stats
        self._stale = edits != self._edits
        self._fill()
        self.counted.emit()

    def _count_failed(self, job: Job, error: BaseException) -> None:
        self._running.discard(job)
        job.deleteLater()
        if job is self._job:
            self._job = None
            self._fill()
            self.failed.emit(error)

    def shutdown(self) -> None:
        """Wait for every count still running, the dropped ones too (the window is closing: a thread
        destroyed while it runs aborts the process)."""
        for job in list(self._running):
            job.wait_stopped()
        self._running.clear()
        self._job = None

    def show_label(self, value: int) -> None:
        """Make ``value`` the active label and put the crosshair on its largest axial cross-section."""
        self.view.centre_on_label(value)

    def _mark_stale(self, _edit=None) -> None:
        # Counting every label's HU over a whole series takes a second or more, too slow for every
        # brush stroke: say that the figures are old (and keep them out of a CSV) until Refresh.
        self._edits += 1
        if not self._stale:
            self._stale = True
            self._fill()

    def _rename(self) -> None:
        """Names follow the table; colours, visibility and locks do not touch the figures (no refill)."""
        table = self.document.labels
        renamed = [item for item in self.stats if item.value in table and table[item.value].name != item.name]
        for item in renamed:
            item.name = table[item.value].name
        if renamed:
            self._fill()

    def _fill(self) -> None:
        self.table.setRowCount(len(self.stats))
        for row, s in enumerate(self.stats):
            size = "×".join(f"{v:.1f}" for v in s.size_mm)
            cells = (f"{s.value}  {s.name}", f"{s.voxels:,}", f"{s.volume_ml:.2f}", f"{s.hu_mean:.1f}",
                     f"{s.hu_sd:.1f}", f"{s.hu_min:.0f}", f"{s.hu_max:.0f}", f"{s.hu_median:.1f}", size)
            for column, text in enumerate(cells):
                self.table.setItem(row, column, QTableWidgetItem(text))
        self.export_button.setEnabled(bool(self.stats) and not self._stale and self._job is None)
        total = sum(s.volume_ml for s in self.stats)
        if self._stale:
            self.summary.setText("The segmentation changed since these figures: press Refresh to recount.")
        elif self.stats:
            self.summary.setText(f"{len(self.stats)} label{'s' if len(self.stats) != 1 else ''}, {total:.1f} ml in all")
        else:
            self.summary.setText("No labelled voxels." if self.document.label_map is not None else "No segmentation.")

    def export_dialog(self) -> None:
        doc = self.document
        source = doc.image_source if doc.volume is not None else ""
        description = doc.volume.meta.series_description if doc.volume is not None else ""
        start = save_dialog.results_folder(source) / (save_dialog.study_stem(source, description) + "_statistics.csv")
        path, _ = save_dialog.ask_save_path(self, "Export statistics", start, ["CSV (*.csv)", "JSON (*.json)"])
        if path:
            save_dialog.remember_results_folder(path)
            self.export(path)

    def export(self, path: str | Path) -> bool:
        """CSV or JSON (by the suffix), in the chosen definitions."""
        volume = self.document.volume
        assert volume is not None, "export is offered once figures of an open image are counted"
        study = study_columns(volume, patient_name=self.patient_name_box.isChecked())
        try:
            if self.definitions_box.currentData() == "totalsegmentator":
                doc = self.document
                measure(volume, doc.label_map, doc.labels, TOTALSEGMENTATOR, study=study).write(path)
            else:
                Statistics(STANDARD, study=study, labels=self.stats).write(path)
        except MedsegError as error:
            self.failed.emit(error)
            return False
        self.exported.emit(str(path))
        return True
