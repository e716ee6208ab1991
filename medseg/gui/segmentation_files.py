"""File ▸ Save segmentation (Ctrl+S), Save as (NIfTI / NRRD / DICOM SEG / STL), Open segmentation.

Saves run in a worker on a copy of the label map taken when Save is pressed, so the
window stays responsive and later strokes cannot tear the file. A failed save (folder
gone, read-only, disk full) is shown in a dialog; the edits stay in the document and its
autosave journal, and the document stays marked unsaved.

Each label's algorithm identification follows its history: labels a model produced are
AUTOMATIC (model name and version) until a stroke touches them, then SEMIAUTOMATIC;
labels drawn by hand are MANUAL. Labels opened from a SEG keep what the SEG said.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QWidget

from medseg.edit.document import ViewerDocument
from medseg.edit.label_map import CodedConcept, LabelEntry
from medseg.errors import GeometryError, MedsegError, SaveError
from medseg.gui.jobs import Job
from medseg.core.segment_info import Coded, SegmentInfo

log = logging.getLogger(__name__)

FILTERS = {
    "NIfTI label map (*.nii.gz)": ".nii.gz",
    "NRRD label map (*.nrrd)": ".nrrd",
    "MHA label map (*.mha)": ".mha",
    "DICOM SEG (*.dcm)": ".dcm",
    "STL surfaces, one per label (*.stl)": ".stl",
    "OBJ surfaces, one per label (*.obj)": ".obj",
}
OPEN_FILTER = "Segmentations (*.nii.gz *.nii *.nrrd *.mha *.dcm);;All files (*)"


def _coded(concept: CodedConcept | None) -> Coded | None:
    return Coded(concept.value, concept.scheme, concept.meaning) if concept is not None else None


def _concept(coded: Coded | None) -> CodedConcept | None:
    return CodedConcept(coded.scheme, coded.value, coded.meaning) if coded is not None else None


class SegmentationFiles(QObject):
    """Save / Save as / Open segmentation for a document (no widgets of its own besides file dialogs)."""

    saved = Signal(str)  # GUI thread: the path written
    opened = Signal(str)
    failed = Signal(object)  # the MedsegError to show
    busy_changed = Signal()

    def __init__(self, document: ViewerDocument, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.parent_widget = parent
        self.path: Path | None = None  # where Ctrl+S saves
        self.origin: dict[int, SegmentInfo] = {}  # per label: where it came from (model, file)
        self.touched: set[int] = set()  # labels edited since they came from there
        self.job: Job | None = None
        self.notes: list[str] = []
        self.dialog: QFileDialog | None = None
        self._identity: tuple = ()
        document.label_map_edited.connect(self._on_edited)
        document.volume_changed.connect(self._forget)

    # --- provenance -----------------------------------------------------------------------
    def _on_edited(self, edit: Any) -> None:
        self.touched |= {int(v) for v in getattr(edit, "values", ()) if int(v)}

    def _image_identity(self) -> tuple:
        volume = self.document.volume
        if volume is None:
            return ()
        return (self.document.image_source, volume.meta.series_uid, volume.meta.extra.get("series_key"),
                volume.shape_zyx)

    def _forget(self) -> None:
        """Another image: Ctrl+S must never write over the file of the previous study."""
        identity = self._image_identity()
        if identity != self._identity:
            self.path = None
            self._identity = identity
        if self.document.label_map is None:
            self.origin, self.touched = {}, set()

    def record_model_output(self, model_name: str, model_version: str, values: list[int]) -> None:
        """Called after Segment merged its result: these labels are the model's, untouched."""
        for value in values:
            self.origin[int(value)] = SegmentInfo(int(value), "", algorithm_type="AUTOMATIC",
                                                  algorithm_name=model_name, algorithm_version=model_version or "")
            self.touched.discard(int(value))

    def segments(self) -> list[SegmentInfo]:
        """The label table as saved records, with each label's algorithm type from its history."""
        records = []
        for value, entry in self.document.labels.items():
            base = self.origin.get(value)
            algorithm, name, version = "MANUAL", "", ""
            if base is not None and base.algorithm_type in ("AUTOMATIC", "SEMIAUTOMATIC"):
                algorithm = "SEMIAUTOMATIC" if value in self.touched else base.algorithm_type
                name, version = base.algorithm_name, base.algorithm_version
            records.append(SegmentInfo(value, entry.name, tuple(entry.color), _coded(entry.category),
                                       _coded(entry.type), algorithm, name, version,
                                       {"locked": entry.locked, "visible": entry.visible}))
        return records

    # --- saving -----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.job is not None and self.job.running

    def save(self) -> bool:
        """Ctrl+S: to the last path, or ask for one."""
        if self.path is None or self.path.suffix.lower() in (".stl", ".obj"):
            return self.save_as()
        return self.save_to(self.path)

    def save_as(self) -> bool:
        if not self._can_save():
            return False
        start = str(self.path) if self.path else str(Path.home() / "segmentation.nii.gz")
        path, chosen = QFileDialog.getSaveFileName(self.parent_widget, "Save segmentation as", start,
                                                   ";;".join(FILTERS))
        if not path:
            return False
        suffix = FILTERS.get(chosen, "")
        if suffix and not path.lower().endswith(suffix):
            path += suffix
        return self.save_to(path)

    def _can_save(self) -> bool:
        doc = self.document
        if doc.volume is None or doc.label_map is None or not np.any(doc.label_map.array):
            self.failed.emit(MedsegError("there is no segmentation to save yet", hint="segment or draw first"))
            return False
        if self.busy:
            self.failed.emit(MedsegError("a save is still running", hint="wait for it to finish"))
            return False
        return True

    def save_to(self, path: str | Path) -> bool:
        """Save in the format the name says, in a worker; Ctrl+S then saves here again (not for meshes)."""
        if not self._can_save():
            return False
        path = Path(path)
        doc = self.document
        image = doc.volume
        snapshot = doc.label_map.with_array(np.array(doc.label_map.array, copy=True))  # type: ignore[union-attr]
        segments = self.segments()
        mesh = path.suffix.lower() in (".stl", ".obj")

        def work(progress=None, cancel=None):
            from medseg.io.atomic import check_writable
            from medseg.io.label_files import save_segmentation
            from medseg.io.mesh import write_label_meshes

            if mesh:
                folder = path.with_suffix("")  # "liver.stl" -> folder "liver" with one file per label
                check_writable(folder.parent / "probe")
                try:
                    folder.mkdir(exist_ok=True)
                except OSError as error:
                    raise SaveError(f"cannot create the folder ({error.strerror})", path=folder) from error
                results = write_label_meshes(snapshot, folder, {s.value: s.name for s in segments},
                                             fmt=path.suffix.lstrip("."))
                return path, [f"{len(results)} surfaces in {folder}"], True
            return path, save_segmentation(snapshot, image, path, segments), False

        self.job = Job("save-segmentation", work, self)
        self.job.finished_ok.connect(self._on_saved)
        self.job.finished_error.connect(self._on_save_failed)
        self.job.start()
        self.busy_changed.emit()
        return True

    @Slot(object)
    def _on_saved(self, result: Any) -> None:
        path, notes, mesh = result
        self.job = None
        self.notes = list(notes)
        if not mesh:
            self.path = Path(path)
            self.document.mark_saved()
        log.info("segmentation saved (%s)", Path(path).suffix)
        self.busy_changed.emit()
        self.saved.emit(str(path))

    @Slot(object)
    def _on_save_failed(self, error: BaseException) -> None:
        self.job = None
        self.busy_changed.emit()
        self.failed.emit(error)  # the document keeps its edits and stays unsaved

    # --- opening ------------------------------------------------------------------------------
    def open_dialog(self) -> bool:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open segmentation",
                                              str(self.path.parent) if self.path else str(Path.home()), OPEN_FILTER)
        return bool(path) and self.open(path)

    def open(self, path: str | Path) -> bool:
        """A label map (names from its sidecar) or a DICOM SEG, placed onto the open image in a worker."""
        image = self.document.volume
        if image is None:
            self.failed.emit(GeometryError("open an image first, then its segmentation", path=path))
            return False
        if self.busy:
            return False
        source = Path(path)

        def work(progress=None, cancel=None):
            from medseg.io.label_files import open_segmentation

            return source, open_segmentation(source, image)

        self.job = Job("open-segmentation", work, self)
        self.job.finished_ok.connect(self._on_opened)
        self.job.finished_error.connect(self._on_save_failed)
        self.job.start()
        self.busy_changed.emit()
        return True

    @Slot(object)
    def _on_opened(self, result: Any) -> None:
        source, opened = result
        self.job = None
        self.busy_changed.emit()
        table = {s.value: LabelEntry(s.value, s.name, tuple(s.color or (255, 0, 0)),  # type: ignore[arg-type]
                                     bool(s.extra.get("visible", True)), bool(s.extra.get("locked", False)),
                                     _concept(s.category), _concept(s.type))
                 for s in (seg.resolved() for seg in opened.segments)}
        try:
            self.document.set_label_map(opened.label_map, table, f"opened {source.name}")
        except MedsegError as error:
            self.failed.emit(error)
            return
        self.origin = {s.value: s for s in opened.segments}
        self.touched = set()
        self.path = source  # Ctrl+S writes back where it came from
        self.notes = list(opened.notes)
        self.opened.emit(str(source))
