"""Dataset panel: build the training set, see each case and its problems, and the plan it leads to.

Cases come from the Segment tab ("Add current case": image + current segmentation + label
table, saved atomically into the workspace), from folders of image/label pairs, from an
nnU-Net raw dataset, or from a DICOM series with a DICOM SEG drawn on it (converted in a worker
and saved like a current case). Each case is inspected in a worker (size, spacing, labels present,
problems); the fingerprint and the plan that follows from it are recomputed whenever the
cases change.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtGui import QBrush, QColor
from PySide6.QtWidgets import (
    QCheckBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QPushButton,
    QTableWidget,
    QTableWidgetItem,
    QVBoxLayout,
    QWidget,
)

from medseg.errors import Cancelled, DatasetError, MedsegError
from medseg.gui.common.jobs import Job
from medseg.model.planner import REFERENCE_VAL_3D
from medseg.model.training_set import TrainingSet

log = logging.getLogger(__name__)

COLUMNS = ("Case", "Source", "Size (x×y×z)", "Spacing (mm)", "Labels present", "Validation", "Problems")
# What the panel plans "from scratch" with: a CPU-trainable 2D network (the starter model's recipe:
# `make starter` plans for 0.35 GB with 16..64 channels).
SCRATCH_PLAN_OPTIONS = {"configuration": "2d", "memory_reference": REFERENCE_VAL_3D * 0.35 / 8.0,
                        "base_features": 16, "max_features": 64}


class DatasetPanel(QWidget):
    changed = Signal()  # cases, split or labels changed (the plan was recomputed)
    inspected = Signal()  # every case has been inspected
    failed = Signal(object)  # an error for the window's dialog

    def __init__(self, workspace: Path, current_case: Callable[[], Any] | None = None,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.training_set = TrainingSet(workspace)
        self.current_case = current_case  # returns (image, label_map, {value: Label}, name) or None
        self.job: Job | None = None
        self.plan_text = ""
        self.add_current_button = QPushButton("Add current case", self)
        self.add_current_button.setToolTip("The image open in the Segment tab with its current segmentation")
        self.add_folder_button = QPushButton("Add folder of image/label pairs…", self)
        self.add_nnunet_button = QPushButton("Import nnU-Net raw dataset…", self)
        self.add_seg_button = QPushButton("Add DICOM + SEG…", self)
        self.add_seg_button.setToolTip("A DICOM series and a DICOM SEG drawn on it (or one folder holding both)")
        self.convert_job: Job | None = None
        self.remove_button = QPushButton("Remove case", self)
        self.deidentify_box = QCheckBox("De-identify", self)
        self.deidentify_box.setToolTip(
            "Cases added from the Segment tab or from DICOM + SEG get a pseudonymous name (from your own key in "
            "medseg's settings folder) instead of the series description; their NIfTI files carry no patient data")
        buttons = QHBoxLayout()
        for button in (self.add_current_button, self.add_folder_button, self.add_nnunet_button, self.add_seg_button,
                       self.remove_button, self.deidentify_box):
            buttons.addWidget(button)
        buttons.addStretch(1)
        self.table = QTableWidget(0, len(COLUMNS), self)
        self.table.setHorizontalHeaderLabels(COLUMNS)
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.verticalHeader().hide()
        self.status = QLabel("No cases yet.", self)
        self.plan_label = QLabel("", self)
        self.plan_label.setWordWrap(True)
        self.plan_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.plan_label.setStyleSheet("font-family: monospace;")
        layout = QVBoxLayout(self)
        layout.addLayout(buttons)
        layout.addWidget(self.table, 1)
        layout.addWidget(self.status)
        layout.addWidget(self.plan_label)
        self.add_current_button.clicked.connect(self.add_current_case)
        self.add_folder_button.clicked.connect(self.add_folder)
        self.add_nnunet_button.clicked.connect(self.add_nnunet)
        self.add_seg_button.clicked.connect(self.add_dicom_seg)
        self.remove_button.clicked.connect(self.remove_selected)
        self.table.itemChanged.connect(self._on_item_changed)
        self._filling = False

    def set_workspace(self, folder: Path) -> None:
        """Start a new training set in ``folder`` (cases saved there, runs under ``runs/``)."""
        self.training_set = TrainingSet(folder)
        self._fill()
        self._replan()

    # --- actions -----------------------------------------------------------------------------------
    def add_current_case(self) -> None:
        case = self.current_case() if self.current_case is not None else None
        if case is None:
            self.failed.emit(DatasetError("open an image and segment or load its label map first"))
            return
        image, label_map, labels, name = case
        try:
            from medseg.workflows.training_cases import add_training_case

            add_training_case(self.training_set, image, label_map, labels, name, self.deidentify_box.isChecked())
        except MedsegError as error:
            self.failed.emit(error)
            return
        self._cases_changed()

    def add_folder(self, folder: str | None = None) -> None:
        folder = folder or QFileDialog.getExistingDirectory(self, "Folder of image/label pairs")
        if folder:
            self._add_dataset(folder, "folder")

    def add_nnunet(self, folder: str | None = None) -> None:
        folder = folder or QFileDialog.getExistingDirectory(self, "nnU-Net raw dataset (dataset.json, imagesTr, labelsTr)")
        if folder:
            if not (Path(folder) / "dataset.json").is_file():
                self.failed.emit(DatasetError("not an nnU-Net raw dataset: no dataset.json", path=folder))
                return
            self._add_dataset(folder, "nnU-Net")

    def add_dicom_seg(self, series: str | None = None, seg: str | None = None) -> None:
        """Convert a DICOM series + DICOM SEG into a case (in a worker); ``seg`` None: find it in the folder."""
        if self.convert_job is not None:
            return
        if not series:
            series = QFileDialog.getExistingDirectory(self, "DICOM series folder (the SEG may be in it)")
            if not series:
                return
            seg, _ = QFileDialog.getOpenFileName(
                self, "DICOM SEG drawn on this series (Cancel: find it among the folder's files)", series)
        training_set = self.training_set
        deidentify = self.deidentify_box.isChecked()

        def work(progress=None, cancel=None):
            from medseg.workflows.training_cases import case_pseudonym

            name = case_pseudonym(str(Path(series).resolve())) if deidentify else None
            return training_set.convert_dicom_seg_case(series, seg or None, name)

        self.convert_job = Job("convert DICOM SEG case", work, self)
        self.convert_job.finished_ok.connect(self._on_converted)
        self.convert_job.finished_error.connect(self._on_convert_failed)
        self.add_seg_button.setEnabled(False)
        self.status.setText("Reading the DICOM series and its SEG…")
        self.convert_job.start()

    @Slot(object)
    def _on_converted(self, converted: Any) -> None:
        self.convert_job = None
        self.add_seg_button.setEnabled(True)
        self.training_set.add_converted(*converted)
        self._cases_changed()

    @Slot(object)
    def _on_convert_failed(self, error: BaseException) -> None:
        self.convert_job = None
        self.add_seg_button.setEnabled(True)
        self._fill()
        self.failed.emit(error)

    def _add_dataset(self, folder: str, kind: str) -> None:
        from medseg.model.datasets import open_dataset

        try:
            dataset = open_dataset(folder)
        except MedsegError as error:
            self.failed.emit(error)
            return
        self.training_set.add_dataset(dataset, f"{kind}: {Path(folder).name}")
        self._cases_changed()

    def remove_selected(self) -> None:
        rows = sorted({index.row() for index in self.table.selectedIndexes()}, reverse=True)
        for row in rows:
            self.training_set.remove(self._case_name(row))
        if rows:
            self._cases_changed()

    def set_validation(self, name: str, validation: bool) -> None:
        self.training_set.set_validation(name, validation)
        self._fill()
        self._replan()

    # --- inspection in a worker ----------------------------------------------------------------------
    def _cases_changed(self) -> None:
        self._fill()
        if self.job is not None:
            return  # the running inspection picks up new cases when it ends
        training_set = self.training_set

        def work(progress=None, cancel=None):
            for entry in training_set.inspect_all():
                yield entry.spec.name

        self.job = Job("inspect cases", work, self)
        self.job.yielded.connect(self._on_inspected)
        self.job.finished_ok.connect(self._on_inspection_done)
        self.job.finished_error.connect(self._on_inspection_failed)
        self.status.setText("Inspecting cases…")
        self.job.start()

    @Slot(object)
    def _on_inspected(self, name: str) -> None:
        self._fill()

    @Slot(object)
    def _on_inspection_done(self, _: Any) -> None:
        self.job = None
        if any(e.info is None for e in self.training_set.entries):
            self._cases_changed()
            return
        self._fill()
        self._replan()
        self.inspected.emit()

    @Slot(object)
    def _on_inspection_failed(self, error: BaseException) -> None:
        self.job = None
        broken = [e for e in self.training_set.entries if e.info is None]
        if broken and not isinstance(error, Cancelled):
            # The case that could not be read is taken out again, and the user told which.
            self.training_set.remove(broken[0].spec.name)
            self._fill()
            self._replan()
        self.failed.emit(error)

    def _replan(self) -> None:
        entries = self.training_set.entries
        if not entries or any(e.info is None for e in entries):
            self.plan_label.setText("")
            self.plan_text = ""
            self.changed.emit()
            return
        try:
            fingerprint, plan = self.training_set.plan(**SCRATCH_PLAN_OPTIONS)
        except MedsegError as error:
            self.plan_text = f"No plan: {error}"
        else:
            spacing = " × ".join(f"{s:.3g}" for s in reversed(_median(fingerprint.spacings_zyx)))
            intensity = fingerprint.foreground_intensity
            self.plan_text = (f"Fingerprint: {len(fingerprint.spacings_zyx)} training case(s), median spacing "
                              f"{spacing} mm (x × y × z), labelled voxels {intensity['mean']:.0f} ± "
                              f"{intensity['std']:.0f} HU\nPlan from scratch: {plan}\n"
                              "(Fine-tuning keeps the base model's plan.)")
        self.plan_label.setText(self.plan_text)
        self.changed.emit()

    # --- the table -------------------------------------------------------------------------------------
    def _fill(self) -> None:
        self._filling = True
        entries = self.training_set.entries
        self.table.setRowCount(len(entries))
        for row, entry in enumerate(entries):
            info = entry.info
            cells = [entry.spec.name, entry.source,
                     "…" if info is None else " × ".join(str(n) for n in info.size_xyz),
                     "…" if info is None else " × ".join(f"{s:.3g}" for s in info.spacing_mm),
                     "…" if info is None else names_in_brief(info.labels_present),
                     "", "; ".join(self.training_set.problems(entry))]
            for column, text in enumerate(cells):
                item = QTableWidgetItem(text)
                if column == 4 and info is not None and len(info.labels_present) > BRIEF_NAMES:
                    item.setToolTip(", ".join(info.labels_present))
                item.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
                if column == 5:
                    item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
                    item.setCheckState(Qt.CheckState.Checked if entry.validation else Qt.CheckState.Unchecked)
                if column == 6 and text:
                    item.setForeground(QBrush(QColor(180, 40, 40)))
                    item.setToolTip(text)
                self.table.setItem(row, column, item)
        training = sum(not e.validation for e in entries)
        problems = sum(1 for e in entries if self.training_set.problems(e))
        self.status.setText(f"{len(entries)} case(s): {training} for training, {len(entries) - training} for "
                            f"validation; labels {names_in_brief(self.training_set.label_names)}"
                            + (f"; {problems} case(s) with problems" if problems else ""))
        self.status.setToolTip(", ".join(self.training_set.label_names)
                               if len(self.training_set.label_names) > BRIEF_NAMES else "")
        self._filling = False

    @Slot(QTableWidgetItem)
    def _case_name(self, row: int) -> str:
        item = self.table.item(row, 0)
        assert item is not None, "every row is filled with its case's name first"
        return item.text()

    def _on_item_changed(self, item: QTableWidgetItem) -> None:
        if self._filling or item.column() != 5:
            return
        name = self._case_name(item.row())
        self.set_validation(name, item.checkState() == Qt.CheckState.Checked)

    def shutdown(self) -> None:
        for job in (self.job, self.convert_job):
            if job is not None:
                job.wait_stopped()


# A TotalSegmentator case holds 117 structures: a cell or status line naming them all would be a
# screen wide, so they are counted and the first few named (all of them in the tooltip).
BRIEF_NAMES = 6


def names_in_brief(names) -> str:
    """"liver, spleen" for a few names; "117 labels: liver, spleen, … (+111 more)" for many."""
    names = list(names)
    if not names:
        return "none"
    if len(names) <= BRIEF_NAMES:
        return ", ".join(names)
    return f"{len(names)} labels: {', '.join(names[:BRIEF_NAMES])}, … (+{len(names) - BRIEF_NAMES} more)"


def _median(values) -> list[float]:
    import numpy as np

    return [float(v) for v in np.median(np.asarray(values, dtype=float), axis=0)]
