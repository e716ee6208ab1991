"""Loading images into the document and segmenting them, in worker threads.

(Segmentation files are opened by :mod:`medseg.gui.study.segmentation_files`, through the one
function that opens a label map or a DICOM SEG onto an image.)

Progressive loading: the IO layer calls ``on_slice(z, hu)`` from its decoder threads
(middle slice first). Those calls only put the slice in a thread-safe queue; a GUI
timer drains the queue into a preview volume that the views already show, so the
middle slice appears as soon as it is decoded and the GUI thread never waits.
A cancelled or failed load puts the document back exactly as it was.
"""

from __future__ import annotations

import logging
import queue
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QTimer, Signal, Slot

from medseg import io as medseg_io
from medseg.core.labels import Label
from medseg.core.volume import Volume, VolumeMeta
from medseg.edit.document import SegmentationDocument
from medseg.edit.merge import REPLACE, SEGMENT_STEP
from medseg.errors import Cancelled, ImageChangedError, MedsegError
from medseg.gui.common.jobs import Job
from medseg.gui.common.view_state import DEFAULT_PRESETS, ViewState
from medseg.io.image_files import image_suffix

log = logging.getLogger(__name__)

PREVIEW_PRESET = "Soft tissue"  # the first paint of a series whose headers name no window


def is_image_file(path: str | Path) -> bool:
    return Path(path).is_file() and image_suffix(path) is not None


@dataclass
class _Snapshot:
    volume: Volume | None
    label_map: Volume | None
    labels: dict[int, Label]
    cursor: tuple[int, int, int]
    window: tuple[float, float, str]  # centre, width, the preset it came from
    synthetic: bool


class StudyLoader(QObject):
    """Starts load jobs and applies their results to the document (GUI thread)."""

    busy_changed = Signal()  # read .busy (no bool-typed signals: see run_gui)
    progressed = Signal(float, str)
    study_loaded = Signal(object)  # Volume
    segmented = Signal(object)  # medseg.workflows.segment.SegmentedStudy
    failed = Signal(object)  # the exception (MedsegError, Cancelled, ...)

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.view = view
        self.job: Job | None = None
        self.source: str | None = None  # what the current image was opened from
        self._merge_mode = REPLACE  # how the running Segment's result meets the labels on screen
        self._segment_generation: int | None = None  # the image generation the running Segment started on
        self._slices: queue.Queue = queue.Queue()
        self._preview: Volume | None = None
        self._snapshot: _Snapshot | None = None
        self._synthetic = False
        self._drain_timer = QTimer(self)
        self._drain_timer.setInterval(100)  # 10 previews a second: each repaint costs GIL hand-offs
        self._drain_timer.timeout.connect(self._drain_slices)

    @property
    def busy(self) -> bool:
        return self.job is not None

    def _start(self, name: str, function, on_done, delay_ms: int = 0, pause_gc: bool = True,
               background: bool = False) -> bool:
        """Start a job; ``delay_ms`` lets the GUI paint first (decoder threads compete for the GIL).

        Loads pause the cyclic GC while they run (see medseg.gui.common.jobs); segmentation, which
        may take minutes, freezes the heap instead.
        """
        if self.busy:
            return False
        self.job = Job(name, function, self, pause_gc=pause_gc, background=background, computes=True)
        self.job.progressed.connect(self.progressed)
        self.job.finished_ok.connect(on_done)
        self.job.finished_error.connect(self._on_error)
        self.busy_changed.emit()
        self.job.start(delay_ms)
        return True

    def cancel(self) -> None:
        if self.job is not None:
            self.job.cancel()

    def shutdown(self) -> None:
        if self.job is not None:
            self.job.wait_stopped()

    def _finish_job(self) -> None:
        if self.job is not None:
            self.job.deleteLater()
        self.job = None
        self._drain_timer.stop()
        self._slices = queue.Queue()  # slices not yet shown are views of the volume: they would keep it
        self.busy_changed.emit()

    # --- images -----------------------------------------------------------------------------
    def load_image_file(self, path: str | Path, synthetic: bool = False, series_uid: str | None = None,
                        regularize: bool = True) -> bool:
        """A NIfTI/NRRD/MHA file, or a DICOM folder/zip/DICOMDIR with one series (``regularize=False``: an
        irregular stack as acquired)."""
        source = str(path)
        self._synthetic = synthetic
        self._snapshot = self._take_snapshot()

        def work(progress=None, cancel=None):
            from medseg.workflows.studies import OpenStudyRequest, open_study

            return open_study(OpenStudyRequest(source, series_uid, regularize=regularize), progress, cancel).volume

        started = self._start("load", work, self._on_volume_loaded)
        if started:
            self.source = source
        return started

    def load_series(self, series: Any, source: str | None = None, synthetic: bool = False,
                    scan_result: Any = None) -> bool:
        """One series from a scan, with progressive display of decoded slices. ``scan_result``: the
        scan it came from, whose other series and skipped files become findings (as ``load`` does)."""
        self._synthetic = synthetic
        self._snapshot = self._take_snapshot()
        self._slices = queue.Queue()
        slices = self._slices

        def on_slice(z_index: int, hu_slice: np.ndarray) -> None:
            slices.put((z_index, hu_slice))  # worker thread: only the queue is touched

        def work(progress=None, cancel=None):
            from medseg.workflows.studies import open_scanned_series

            return open_scanned_series(series, scan_result, progress, cancel, on_slice=on_slice, out=shared)

        if self.busy:
            return False
        # Preview first: once the decoder threads run, they compete for the GIL.
        shared = self._show_preview(series)
        self._start("load-series", work, self._on_volume_loaded, delay_ms=40)
        self.source = source
        self._drain_timer.start()
        return True

    def _show_preview(self, series: Any) -> np.ndarray | None:
        """Show the series' grid at once, filled as slices decode; returns the array the decoder
        should write into (the preview's own, so the open holds one copy of the voxels), or None."""
        nx, ny, nz = (int(n) for n in series.size_xyz)
        if nx * ny * nz == 0:
            return None
        shared = medseg_io.preview_stack(series)
        array = shared if shared is not None else np.full((nz, ny, nx), -1024, dtype=np.int16)
        # The series' own window from the start (the loaded volume takes the middle slice's too): the
        # preview's voxels are air or not decoded yet, and a window read from them was W 1 / L 0.
        slices = list(getattr(series, "slices", None) or [])
        window = slices[(len(slices) - 1) // 2].window if slices else None
        meta = VolumeMeta(modality=series.modality, series_description=series.series_description,
                          study_description=series.study_description,
                          window_center=window[0] if window else None, window_width=window[1] if window else None)
        self._preview = Volume(array, series.spacing_mm, series.origin_mm, series.direction, meta)
        self.document.set_volume(self._preview, synthetic=self._synthetic)
        if window is None:  # no header window: what a CT viewer opens with, until the voxels can say
            self.view.set_window(*DEFAULT_PRESETS[PREVIEW_PRESET],
                                 preset=PREVIEW_PRESET if PREVIEW_PRESET in self.view.presets else "")
        return shared

    @Slot()
    def _drain_slices(self) -> None:
        preview, changed = self._preview, False
        deadline = time.perf_counter() + 0.010  # keep each tick short; the rest waits for the next tick
        while time.perf_counter() < deadline:
            try:
                z_index, hu_slice = self._slices.get_nowait()
            except queue.Empty:
                break
            if preview is not None and 0 <= z_index < preview.array.shape[0] and hu_slice.shape == preview.array.shape[1:]:
                if not np.shares_memory(hu_slice, preview.array):  # a shared preview has it already
                    preview.array[z_index] = hu_slice
                changed = True
        if changed and self.document.volume is preview:
            self.document.notify_pixels_changed()

    @Slot(object)
    def _on_volume_loaded(self, volume: Volume) -> None:
        self._finish_job()
        self._preview = None
        self.document.set_volume(volume, synthetic=self._synthetic, source=self.source)
        log.info("image loaded: %s voxels, spacing %s mm", volume.size_xyz, tuple(round(s, 3) for s in volume.spacing_mm))
        self.study_loaded.emit(volume)

    @Slot(object)
    def _on_error(self, error: BaseException) -> None:
        was_image_job = self.job is not None and self.job.name.startswith("load")
        self._finish_job()
        if was_image_job and self._snapshot is not None:
            self._restore(self._snapshot)
        self._preview = None
        if not isinstance(error, Cancelled):
            log.warning("job failed: %s", type(error).__name__)
        self.failed.emit(error)

    def _take_snapshot(self) -> _Snapshot:
        doc, view = self.document, self.view
        return _Snapshot(doc.volume, doc.label_map, dict(doc.labels), view.cursor_xyz,
                         (view.window_center, view.window_width, view.window_preset), doc.is_synthetic)

    def _restore(self, snapshot: _Snapshot) -> None:
        doc = self.document
        if snapshot.volume is None:
            doc.close_image()
            return
        doc.set_volume(snapshot.volume, synthetic=snapshot.synthetic)
        if snapshot.label_map is not None:
            doc.set_label_map(snapshot.label_map, snapshot.labels)
        self.view.set_cursor(snapshot.cursor)
        self.view.set_window(*snapshot.window)

    # --- segmentation -------------------------------------------------------------------------
    def segment(self, model: str | Path | None = None, device: str = "auto", configuration: str | None = None,
                postprocess: bool = True, mode: str = REPLACE, allow_modality: bool = False,
                structures: tuple[str, ...] | None = None, models: tuple[str, ...] | None = None,
                precision: str = "f32") -> bool:
        """Segment the open image with a model (a reference :func:`medseg.workflows.models.open_model` opens;
        default: the built-in starter): the edit catalogue's ``segment`` operation
        (:mod:`medseg.workflows.edit_operations`), its model half in a worker
        (:func:`~medseg.workflows.edit_operations.segment_image`: the use case's checks, the one device
        choice), and its merge too (:func:`~medseg.workflows.edit_operations.prepare_segment`: computed against
        the document as it is when the model is done); the GUI thread writes it as one undoable, journalled
        step, or merges again when the user changed the labels meanwhile. ``configuration`` overrides
        the one the series' spacing would choose; ``postprocess`` False skips the model's declared
        post-processing; ``mode`` says how the result meets the labels on screen (``REPLACE`` or ``ADD``).
        A series of another modality than the model's fails with ModalityMismatch (the window asks) unless
        ``allow_modality``; an image that is a label map fails with NotAnImageError. ``structures``: a
        TotalSegmentator model's subset (None: all). ``models``: several references (the panel's TotalSegmentator
        tasks) run into one result instead of ``model`` (medseg.workflows.segment_many), progress per model.
        ``precision``: "f32" (the exact path) or a faster tier verified for the model here (the panel offers it)."""
        image = self.document.volume
        if image is None:
            from medseg.errors import GeometryError

            self.failed.emit(GeometryError("open an image first, then press Segment"))
            return False

        document = self.document

        def work(progress=None, cancel=None):
            from medseg.core.label_colors import prepare_distinct_colors
            from medseg.workflows.edit_operations import MODELS, SETTINGS, prepare_segment, segment_image
            from medseg.workflows.segment import SegmentSettings

            settings = SegmentSettings(device=device, configuration=configuration, postprocess=postprocess,
                                       allow_modality=allow_modality, structures=structures, precision=precision)
            result = segment_image(image, {"model": model, SETTINGS: settings, MODELS: models}, progress, cancel)
            prepare_distinct_colors()  # the write on the GUI thread picks the new labels' colours
            if cancel is not None:
                cancel.raise_if_cancelled()
            return result, prepare_segment(document, result, mode)  # read only; applied if still current

        self._snapshot = None
        self._merge_mode = mode
        self._segment_generation = self.document.image_generation
        return self._start("segment", work, self._on_segmented, pause_gc=False, background=True)

    @Slot(object)
    def _on_segmented(self, done: tuple[Any, Any]) -> None:
        from medseg.workflows.edit_operations import perform_segment

        result, prepared = done
        self._finish_job()
        doc = self.document
        if (doc.volume is None or doc.image_generation != self._segment_generation
                or not result.label_map.same_grid(doc.volume)):
            self.failed.emit(ImageChangedError(
                "the image changed while it was being segmented, so the result was not applied",
                hint="press Segment again for the image now open"))
            return
        try:
            perform_segment(doc, result, self._merge_mode, f"{SEGMENT_STEP} ({result.model.name})", prepared)
        except MedsegError as error:  # e.g. the labels changed so that the result no longer fits
            self.failed.emit(error)
            return
        log.info("segmented with %s (%s) on %s in %.1f s", result.model.name, result.configuration, result.device,
                 result.seconds)
        self.segmented.emit(result)

