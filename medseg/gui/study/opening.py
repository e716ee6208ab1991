"""Opening what the user points at: DICOM folders, image files, archives, drops, PACS retrievals, the demo
study, recent studies, and segmentation files onto the open image.

One image file loads at once; DICOM goes through the series browser (with ``auto_load`` its largest volume
loads without asking). Every open that would replace the image first asks the editing session whether
unsaved edits may go.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Sequence

import numpy as np
from PySide6.QtCore import QObject, Slot
from PySide6.QtWidgets import QFileDialog, QMenu, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.gui.common import save_dialog
from medseg.gui.common.jobs import Job
from medseg.gui.common.services import WindowServices
from medseg.gui.study.segmentation_files import OPEN_FILTER, SegmentationFiles
from medseg.gui.study.series_browser import SeriesBrowser
from medseg.gui.study.study_loader import StudyLoader, is_image_file
from medseg.io.formats import DICOM_SEG, open_filters
from medseg.settings import SETTINGS

if TYPE_CHECKING:
    from medseg.gui.pacs.dialog import PacsDialog

# Every file first: most scanners write DICOM files without a suffix, which "*.dcm" hid (issue 42).
IMAGE_FILTER = ";;".join(open_filters())
ARCHIVE_FILTER = "Zip archives or DICOMDIR (*.zip DICOMDIR);;All files (*)"


class StudyOpener(QObject):
    def __init__(self, document: SegmentationDocument, loader: StudyLoader, files: SegmentationFiles,
                 editing: Any, services: WindowServices, show_source: Callable[..., None],
                 notice_banner: Any, parent: QWidget, pacs_dialog: Callable[[QWidget], PacsDialog] | None = None) -> None:
        """``editing``: asks before unsaved edits go (``may_discard_edits``);
        ``show_source``: where the shown segmentation came from (SourceLine.show); ``notice_banner``: what the
        user must know about how a segmentation file was placed; ``pacs_dialog``: makes File ▸ PACS…'s dialog
        (the window passes the PACS room's own, so the study room does not import it)."""
        super().__init__(parent)
        self.document, self.loader, self.files = document, loader, files
        self.editing, self.services = editing, services
        self.show_source, self.notice_banner = show_source, notice_banner
        self.parent_widget = parent
        self.browser: SeriesBrowser | None = None
        self.make_pacs_dialog = pacs_dialog
        self.pacs_dialog: PacsDialog | None = None  # made on first use (File ▸ PACS…)
        self.demo_job: Job | None = None
        self.recent_menu: QMenu | None = None
        files.saved.connect(self._on_segmentation_saved)
        files.opened.connect(self._on_segmentation_opened)

    # --- choosing ----------------------------------------------------------------------------
    def open_dicom_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self.parent_widget, "Open DICOM folder", self.last_folder())
        if folder:
            self.open_path(folder)

    def open_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self.parent_widget, "Open files", self.last_folder(), IMAGE_FILTER)
        if paths:
            self.open_paths(paths)

    def open_archive(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open zip or DICOMDIR", self.last_folder(),
                                              ARCHIVE_FILTER)
        if path:
            self.open_path(path)

    def last_folder(self) -> str:
        return SETTINGS.last_folder or str(Path.home())

    def refuse_when_busy(self) -> bool:
        if self.loader.busy:
            self.services.notify("Still loading: wait or press Cancel first.", "warning")
            return True
        return False

    # --- opening -----------------------------------------------------------------------------
    def open_paths(self, paths: Sequence[str]) -> None:
        """Files dropped or chosen: one image file loads directly, DICOM goes to the browser."""
        paths = [str(p) for p in paths]
        if len(paths) == 1:
            self.open_path(paths[0])
        elif all(is_image_file(p) for p in paths):
            self.open_path(paths[0])
        else:
            self.browse(paths)

    def open_path(self, path: str | Path, auto_load: bool = False, synthetic: bool = False) -> None:
        path = str(path)
        SETTINGS.last_folder = str(Path(path).parent if Path(path).is_file() else path)
        if is_image_file(path):
            if self.refuse_when_busy() or not self.editing.may_discard_edits("Open another image"):
                return
            if not self.editing.may_open_study(path):  # open in another window: a copy, or not at all
                return
            self.loader.load_image_file(path, synthetic=synthetic)
        else:
            self.browse([path], auto_load=auto_load, synthetic=synthetic)

    def browse(self, paths: Sequence[str], auto_load: bool = False, synthetic: bool = False) -> SeriesBrowser:
        """Scan in the series browser; with auto_load, load the largest volume without asking."""
        if self.browser is not None:
            self.browser.shutdown()
            self.browser.deleteLater()
        self.browser = SeriesBrowser(paths, self.parent_widget)
        source = paths[0] if len(paths) == 1 else str(Path(paths[0]).parent)
        self.browser.series_chosen.connect(lambda s: self._load_series(s, source, synthetic))
        self.browser.scan_failed.connect(self.services.show_error)
        if auto_load:
            self.browser.scan_finished.connect(lambda result: self._auto_load(result, source, synthetic))
        else:
            self.browser.open()  # window-modal, never blocks the event loop
        self.browser.start_scan()
        return self.browser

    def _auto_load(self, result: Any, source: str, synthetic: bool) -> None:
        volumes = [s for s in result.series if s.loadable]
        if not volumes:
            assert self.browser is not None, "the browser's own scan_finished calls here"
            self.browser.open()  # let the user see why nothing can be loaded
            return
        largest = max(volumes, key=lambda s: int(np.prod(s.size_xyz)))
        self._load_series(largest, source, synthetic)

    def _load_series(self, series: Any, source: str, synthetic: bool) -> None:
        if self.refuse_when_busy() or not self.editing.may_discard_edits("Open another series"):
            return
        if not self.editing.may_open_study(source):  # open in another window: a copy, or not at all
            return
        self.loader.load_series(series, source=source, synthetic=synthetic,
                                scan_result=self.browser.result if self.browser is not None else None)

    def open_pacs(self) -> PacsDialog:
        """The PACS dialog (one per window, kept so a running retrieval survives closing it)."""
        dialog = self.pacs_dialog
        if dialog is None:
            if self.make_pacs_dialog is None:
                raise RuntimeError("this window was made without a PACS dialog")
            dialog = self.pacs_dialog = self.make_pacs_dialog(self.parent_widget)
            dialog.series_retrieved.connect(self._on_pacs_series)
        dialog.show()
        dialog.raise_()
        return dialog

    @Slot(str)
    def _on_pacs_series(self, folder: str) -> None:
        self.open_path(folder, auto_load=True)

    def open_demo(self) -> None:
        """Generate (once) and open the synthetic demo study."""
        if self.demo_job is not None or self.refuse_when_busy():
            return

        def work(progress=None, cancel=None):
            from medseg.io.phantom import demo_study_path  # pydicom + scipy: imported off the GUI thread

            return demo_study_path(progress=progress, cancel=cancel)

        self.demo_job = Job("demo", work, self.parent_widget, pause_gc=True)
        self.demo_job.finished_ok.connect(self._on_demo_ready)
        self.demo_job.finished_error.connect(self._on_demo_failed)
        self.demo_job.start()

    @Slot(object)
    def _on_demo_ready(self, folder: Path) -> None:
        self.demo_job = None
        self.open_path(folder, auto_load=True, synthetic=True)

    @Slot(object)
    def _on_demo_failed(self, error: BaseException) -> None:
        self.demo_job = None
        self.services.show_error(error)

    # --- recent studies ----------------------------------------------------------------------
    def set_recent(self, recent: list[str]) -> None:
        """File ▸ Recent studies lists ``recent`` (newest first)."""
        menu = self.recent_menu
        assert menu is not None, "the File menu (medseg.gui.shell.menus) is made before the window lists studies"
        menu.clear()
        for path in recent:
            action = menu.addAction(path)
            action.triggered.connect(lambda _=False, p=path: self.open_path(p))
        menu.setEnabled(bool(recent))

    # --- segmentation files (medseg.gui.study.segmentation_files) ----------------------------
    def open_segmentation(self) -> None:
        """File ▸ Open segmentation (Ctrl+L): a label map with its sidecar or a DICOM SEG, onto the image."""
        files = self.files
        start = files.path.parent if files.path else save_dialog.results_folder(self.document.image_source)
        path, _ = QFileDialog.getOpenFileName(self.parent_widget, "Open segmentation", str(start), OPEN_FILTER)
        if path and self.editing.may_discard_edits("Open a segmentation"):
            files.open(path)

    @Slot(object)
    def _on_segmentation_opened(self, opened: Any) -> None:
        """What the file held and everything the user must know about how it was placed (kept on screen)."""
        name = Path(opened.label_map.meta.source_files[0]).name if opened.label_map.meta.source_files else "file"
        labels = len(self.document.labels)
        self.show_source(f"{name}: {labels} label{'s' if labels != 1 else ''}",
                         "\n".join([*opened.notes, *opened.naming]))
        told = [*opened.notes, *(n for n in opened.naming if opened.format == DICOM_SEG)]
        if told:
            self.notice_banner.show_message(f"{name}: " + "; ".join(told) + ".")
        else:
            self.notice_banner.hide()

    @Slot(str)
    def _on_segmentation_saved(self, path: str) -> None:
        notes = "; ".join(self.files.notes)
        self.services.notify(f"{Path(path).name}: {notes}" if notes else Path(path).name, "success",
                             f"segmentation file {Path(path).suffix}: {notes}")

    def shutdown(self) -> None:
        """The window closes: stop the series scan and wait for the demo study's job."""
        if self.browser is not None:
            self.browser.shutdown()
        if self.demo_job is not None:
            self.demo_job.wait_stopped()
