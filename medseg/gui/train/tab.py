"""The Train & Export tab: build a dataset from corrected cases, fine-tune with live curves
(one device, or several processes through torchrun), export and compare models.

Three panels, each its own module: :mod:`~medseg.gui.train.dataset_panel`,
:mod:`~medseg.gui.train.run_panel`, :mod:`~medseg.gui.train.export_panel`. Every action
calls the same engine functions as ``medseg train`` / ``export`` / ``evaluate``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from PySide6.QtCore import Signal
from PySide6.QtWidgets import QTabWidget, QVBoxLayout, QWidget

from medseg import app_dirs
from medseg.edit.document import SegmentationDocument
from medseg.gui.train.dataset_panel import DatasetPanel
from medseg.gui.train.export_panel import ExportComparePanel
from medseg.gui.train.run_panel import TrainingPanel


def default_workspace() -> Path:
    """``training`` in medseg's data folder ($MEDSEG_DATA_DIR or the platform's: medseg.app_dirs)."""
    return app_dirs.data_dir() / "training"



def case_name(volume, image_source: str) -> str:
    """A training case's name: the series description, else the image file's or folder's name — never
    a name that holds the patient's name or ID (an anonymised file is often named after them)."""
    from medseg.gui.common.save_dialog import study_stem

    meta = volume.meta
    private = {part.lower() for value in (meta.patient_name, meta.patient_id)
               for part in str(value or "").replace("^", " ").split() if len(part) >= 3}
    for candidate in (meta.series_description, study_stem(image_source) if image_source else ""):
        if candidate and candidate != "segmentation" and not any(p in candidate.lower() for p in private):
            return candidate
    return "case"

class TrainExportTab(QWidget):
    failed = Signal(object)  # an error for the window's dialog

    def __init__(self, document: SegmentationDocument | None = None, parent: QWidget | None = None,
                 workspace: Path | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.dataset_panel = DatasetPanel(workspace or default_workspace(), self.current_case, self)
        self.training_panel = TrainingPanel(self.dataset_panel, self)
        self.export_panel = ExportComparePanel(self._validation_dataset, self)
        self.pages = QTabWidget(self)
        self.pages.addTab(self.dataset_panel, "1  Dataset")
        self.pages.addTab(self.training_panel, "2  Training")
        self.pages.addTab(self.export_panel, "3  Export && compare")
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self.pages)
        for panel in (self.dataset_panel, self.training_panel, self.export_panel):
            panel.failed.connect(self.failed)
        self.training_panel.run_ended.connect(self._on_run_ended)

    def current_case(self) -> tuple[Any, ...] | None:
        """(image, label map, {value: Label}, case name) from the Segment tab, or None."""
        doc = self.document
        if doc is None or doc.volume is None or doc.label_map is None:
            return None
        labels = {value: entry for value, entry in doc.labels.items() if value}
        return doc.volume, doc.label_map, labels, case_name(doc.volume, doc.image_source)

    def _validation_dataset(self):
        """The training set with the labels chosen for training (what the models are judged on)."""
        return self.dataset_panel.training_set.dataset(self.training_panel.form.settings().labels or None)

    def _on_run_ended(self, record: dict) -> None:
        if record.get("package"):  # a finished run, or a stopped one packaged from its checkpoint
            self.export_panel.add_model(record["package"])

    def shutdown(self) -> None:
        self.training_panel.shutdown()
        self.dataset_panel.shutdown()
        self.export_panel.shutdown()
