"""File ▸ Save segmentation (Ctrl+S), Save as (NIfTI / NRRD / DICOM SEG / STL), Open segmentation (Ctrl+L).

Saves run in a worker on a copy of the label map taken when Save is pressed, so the
window stays responsive and later strokes cannot tear the file. A failed save (folder
gone, read-only, disk full) is shown in a dialog; the edits stay in the document and its
autosave journal, and the document stays marked unsaved. What is saved is the state at
the moment Save was pressed: edits made while it runs stay unsaved.

What is written about each label (name, colour, codes, provenance) is the document's
label table: the document keeps each label's provenance itself (a model's labels are
AUTOMATIC until an edit touches them, then SEMIAUTOMATIC; drawn labels are MANUAL;
labels opened from a file keep what the file said).

Opening goes through :func:`medseg.io.segmentations.open_segmentation`, the one way to open
a label map (with its sidecar) or a DICOM SEG onto the image, in a worker.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtWidgets import QFileDialog, QWidget

from medseg.core.labels import Label
from medseg.edit.document import SegmentationDocument
from medseg.edit.label_map import NAME_SETS
from medseg.errors import GeometryError, MedsegError
from medseg.gui.common import save_dialog
from medseg.gui.common.jobs import Job
from medseg.io.formats import (
    MESH_FORMATS,
    format_of,
    mesh_format_of,
    segmentation_choices,
    segmentation_formats,
    segmentation_open_filter,
)
from medseg.io.label_files import LABEL_MAP
from medseg.workflows.name_sets import opened_label_table

log = logging.getLogger(__name__)

MESH_FILTERS = {f"{f.name} surfaces, one per label (*{f.suffix})": f.suffix for f in MESH_FORMATS}


def _filter(file_format) -> str:
    suffix = file_format.write_suffixes[0]
    return f"{file_format.name}{' label map' if file_format.label_map else ''} (*{suffix})"


# Every segmentation format of the one table (medseg.io.formats), then the surfaces.
FILTERS = {**{_filter(f): f.write_suffixes[0] for f in segmentation_formats()}, **MESH_FILTERS}
OPEN_FILTER = segmentation_open_filter()


def save_filters(image) -> tuple[list[str], str]:
    """The Save as filters this study can be saved in, and why a format is not offered ("" when all are):
    a DICOM SEG only for an image opened from DICOM (it must reference that series; it was offered for an
    NRRD study and refused only after a name was chosen, issue 42)."""
    from_dicom = image is not None and bool(image.meta.source_files) and not image.meta.extra.get("format")
    offered, why = segmentation_choices(from_dicom)
    return [_filter(f) for f in offered] + list(MESH_FILTERS), why
DEIDENTIFY_TEXT = "De-identify (research export)"
DEIDENTIFY_TIP = ("No patient name, ID, birth date, accession number or institution in the file (DICOM PS3.15 Basic "
                  "Profile). A DICOM SEG is saved with its de-identified source series beside it (NAME_ct/), which "
                  "it references; UIDs and the patient pseudonym come from your own key in medseg's settings folder.")


class SegmentationFiles(QObject):
    """Save / Save as / Open segmentation for a document (no widgets of its own besides file dialogs)."""

    saved = Signal(str)  # GUI thread: the path written
    opened = Signal(object)  # the LabelFileResult, once it is the document's label map
    failed = Signal(object)  # the MedsegError to show
    busy_changed = Signal()

    def __init__(self, document: SegmentationDocument, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.parent_widget = parent
        self.path: Path | None = None  # where Ctrl+S saves
        self.deidentified = False  # whether Ctrl+S saves de-identified (as the last Save as did)
        self.job: Job | None = None
        self.notes: list[str] = []
        self.dialog: QFileDialog | None = None
        self.name_set = NAME_SETS[0]  # how labels a file does not name are named (the overlay panel's choice)
        self._opened: tuple[str, Any] = ("", None)  # (what it was opened from, the label map it became)
        self._identity: tuple = ()
        document.volume_changed.connect(self._forget)

    def opened_from(self) -> str | None:
        """What the segmentation on screen was opened from, for the report ("opened from seg.nii.gz (names from
        the file's header)"); None when it was not opened from a file (drawn, segmented, recovered)."""
        text, label_map = self._opened
        return text if label_map is not None and label_map is self.document.label_map else None

    def _describe_opened(self, source: Path, opened: Any, table: dict) -> str:
        if opened.format != LABEL_MAP:  # a DICOM SEG describes its segments itself
            how = "a DICOM SEG"
        elif opened.sidecar is not None:
            how = f"names from its {opened.sidecar.name}"
        elif opened.named_by_header:
            how = "names from the file's header"
        else:
            how = "named by value"
        if opened.name_set_applies and self.name_set != NAME_SETS[0]:
            how += f", described by the {self.name_set} name set"
        return f"opened from {source.name} ({how})"

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

    def segments(self) -> list[Label]:
        """The document's label table, as it is saved."""
        return list(self.document.labels.values())

    # --- saving -----------------------------------------------------------------------------
    @property
    def busy(self) -> bool:
        return self.job is not None and self.job.running

    def save(self) -> bool:
        """Ctrl+S: to the last path, or ask for one."""
        if self.path is None or mesh_format_of(self.path) is not None:
            return self.save_as()
        return self.save_to(self.path, deidentify=self.deidentified)

    def save_as(self) -> bool:
        if not self._can_save():
            return False
        doc = self.document
        assert doc.volume is not None, "_can_save checked it"
        start = self.path or save_dialog.results_folder(doc.image_source) / (
            save_dialog.study_stem(doc.image_source, doc.volume.meta.series_description) + "_seg.nii.gz")
        filters, why = save_filters(doc.volume)
        found = format_of(start.name, segmentation_formats())
        if found is not None and found[0].dicom_seg and not any(f.endswith(f"(*{found[1]})") for f in filters):
            start = start.with_name(save_dialog.strip_format_suffix(start.name) + ".nii.gz")
        path, chosen, deidentify = save_dialog.ask_save_path_with_option(
            self.parent_widget, "Save segmentation as", start, filters,
            (DEIDENTIFY_TEXT, DEIDENTIFY_TIP, self.deidentified), note=why)
        if not path:
            return False
        agreeing = save_dialog.agreeing_path(path, chosen, filters)
        save_dialog.remember_results_folder(agreeing)
        return self.save_to(agreeing, deidentify=deidentify)

    def _can_save(self) -> bool:
        doc = self.document
        if doc.volume is None or doc.label_map is None or not np.any(doc.label_map.array):
            self.failed.emit(MedsegError("there is no segmentation to save yet", hint="segment or draw first"))
            return False
        if self.busy:
            self.failed.emit(MedsegError("a save is still running", hint="wait for it to finish"))
            return False
        return True

    def save_to(self, path: str | Path, deidentify: bool = False) -> bool:
        """Save in the format the name says, in a worker; Ctrl+S then saves here again (not for meshes).

        ``deidentify``: a research export (:func:`medseg.io.deidentify.save_deidentified` with the user's key).
        """
        if not self._can_save():
            return False
        path = Path(path)
        doc = self.document
        image, label_map = doc.volume, doc.label_map
        assert image is not None and label_map is not None, "_can_save checked both"
        snapshot = label_map.with_array(np.array(label_map.array, copy=True))
        segments = self.segments()
        position = doc.history_position  # what is saved is this state, whatever is drawn meanwhile
        mesh = mesh_format_of(path)

        def work(progress=None, cancel=None):
            from medseg.workflows.meshes import write_meshes
            from medseg.workflows.save import plan_save, save_segmentation

            if mesh:
                folder = path.with_suffix("")  # "liver.stl" -> folder "liver" with one file per label
                results = write_meshes(snapshot, folder, {s.value: s for s in segments}, mesh.key)
                return path, [f"{len(results)} surfaces in {folder}"], True, position, False
            # the save dialog asked before replacing a file: the target is checked here, once, and written
            target = plan_save(path, force=True, option="the segmentation file")
            labels = {segment.value: segment for segment in segments}
            if deidentify:
                from medseg.io.deidentify import user_deidentifier

                saved = save_segmentation(target, snapshot, image, labels, user_deidentifier())
                return path, saved.notes, False, position, True
            target.check_image(image)
            return path, save_segmentation(target, snapshot, image, labels).notes, False, position, False

        self.job = Job("save-segmentation", work, self)
        self.job.finished_ok.connect(self._on_saved)
        self.job.finished_error.connect(self._on_save_failed)
        self.job.start()
        self.busy_changed.emit()
        return True

    @Slot(object)
    def _on_saved(self, result: Any) -> None:
        path, notes, mesh, position, deidentified = result
        self.job = None
        self.notes = list(notes)
        if not mesh:
            self.path = Path(path)
            self.deidentified = deidentified
            self.document.mark_saved(position)
        log.info("segmentation saved (%s)", Path(path).suffix)
        self.busy_changed.emit()
        self.saved.emit(str(path))

    @Slot(object)
    def _on_save_failed(self, error: BaseException) -> None:
        self.job = None
        self.busy_changed.emit()
        self.failed.emit(error)  # the document keeps its edits and stays unsaved

    # --- opening ------------------------------------------------------------------------------
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
            from medseg.workflows.studies import open_segmentation_on

            return source, open_segmentation_on(image, source)

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
        table = opened_label_table(opened, self.name_set)
        try:
            self.document.set_label_map(opened.label_map, table, f"opened {source.name}")
        except MedsegError as error:
            self.failed.emit(error)
            return
        files = opened.label_map.meta.source_files
        self.path = Path(files[0]) if files else source  # Ctrl+S writes back where it came from
        self.notes = list(opened.notes)
        self._opened = (self._describe_opened(source, opened, table), self.document.label_map)
        self.opened.emit(opened)
