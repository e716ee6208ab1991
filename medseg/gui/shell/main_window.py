"""The main window: tabs Segment and Train & Export, menus, toolbar, status bar."""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import Any, Sequence

import numpy as np
from PySide6.QtCore import QEvent, Qt, QTimer, QUrl, Signal, Slot
from PySide6.QtGui import QAction, QActionGroup, QDesktopServices, QKeySequence
from PySide6.QtWidgets import (
    QApplication,
    QDockWidget,
    QFileDialog,
    QFrame,
    QScrollArea,
    QHBoxLayout,
    QLabel,
    QMainWindow,
    QMenu,
    QMessageBox,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.gui.viewer.view_state import AUTO_PRESET, ViewState
from medseg.errors import Cancelled, MedsegError, ModalityMismatch
from medseg.gui.shell import app_shell
from medseg.gui.segment import model_choice
from medseg.gui.common import save_dialog
from medseg.gui.common import wheel_guard
from medseg.gui.viewer.banners import Banner, findings_text, join_messages
from medseg.gui.common.job_status import JobStatusWidget
from medseg.gui.common.jobs import Job
from medseg.gui.shell.messages import MessageArea
from medseg.gui.viewer.label_table import described_labels
from medseg.gui.labels.overlay_panel import OverlayPanel
from medseg.gui.viewer.window_panel import PRESET_KEYS, WindowPanel
from medseg.gui.viewer.presets_dialog import PresetsDialog
from medseg.gui.study.raw_stack import RawStackToggle
from medseg.gui.study.segmentation_files import OPEN_FILTER, SegmentationFiles
from medseg.gui.labels.stats_panel import StatsPanel
from medseg.gui.study.series_browser import SeriesBrowser
from medseg.gui.train.tab import TrainExportTab
from medseg.gui.study.study_loader import StudyLoader, is_image_file
from medseg.gui.viewer.layout import ViewerPanel
from medseg.core.volume import Volume
from medseg.io.formats import open_filters
from medseg.workflows.edit_operations import register_operations
from medseg.workflows.interactive import settings as interactive_settings

log = logging.getLogger(__name__)

SIDE_MAX_WIDTH = 460  # px: the side panel's widest; the views take the rest of the window
# Every file first: most scanners write DICOM files without a suffix, which "*.dcm" hid (issue 42).
IMAGE_FILTER = ";;".join(open_filters())
ARCHIVE_FILTER = "Zip archives or DICOMDIR (*.zip DICOMDIR);;All files (*)"


class MainWindow(QMainWindow):
    error_shown = Signal(str)  # GUI thread: the message of an error dialog
    demo_ready = Signal(object)  # GUI thread: the demo study folder

    def __init__(self) -> None:
        super().__init__()
        # Decoder threads hold the GIL in turns; a shorter switch interval lets the GUI
        # thread (which gives up the GIL in every Qt call) get it back sooner.
        if sys.getswitchinterval() > 0.001:
            sys.setswitchinterval(0.001)
        # The imports (SimpleITK, scipy, pydicom, Qt) leave ~80k long-lived objects; a full
        # garbage collection walks them all (100+ ms here) at random moments, e.g. mid-load.
        # Freezing them keeps later collections short so the GUI never stalls on them.
        gc.collect()
        gc.freeze()
        wheel_guard.install()  # before any widget exists: the wheel scrolls panels, not their values
        self.setWindowTitle("medseg")
        self.setAcceptDrops(True)
        self.document = SegmentationDocument()  # what is segmented, undone, saved (the CLI's too)
        register_operations()  # the model-backed editing operations, before the tools are made from the catalogue
        self.view = ViewState(self.document)  # how it is looked at and worked on: this window's alone
        self.view.set_presets(app_shell.load_presets())
        self.loader = StudyLoader(self.document, self.view, self)
        self.viewer = ViewerPanel(self.document, self.view, self)
        self.window_panel = WindowPanel(self.view, self)
        self.overlay_panel = OverlayPanel(self.document, self.view, self)
        self.findings_banner = Banner("background: #ffe08a; border: 1px solid #c9a227;", self)
        self.notice_banner = Banner("background: #bfe3ff; border: 1px solid #5a9bd5;", self)
        self.demo_banner = Banner("background: #ffb3b3; border: 1px solid #c04040;", self)
        self.segmentation_files = SegmentationFiles(self.document, self)
        self.stats_panel = StatsPanel(self.document, self.view, self)
        self.raw_stack = RawStackToggle(self.document, self.loader, self, self.viewer)
        self.findings_banner.add_button(self.raw_stack.button)
        self.browser: SeriesBrowser | None = None
        self.pacs_dialog = None  # made on first use (File ▸ PACS…)
        # where the shown segmentation came from: (label map, history step or None, text, details)
        self._source: tuple[Any, int | None, str, str] = (None, None, "", "")
        self.error_box: QMessageBox | None = None
        self.dialog: QMessageBox | None = None
        self.demo_job: Job | None = None
        self._auto_load_synthetic = False
        self._hover: tuple[tuple[int, int, int] | None, str] = (None, "axial")
        from medseg.gui.editing.edit_session import install as install_editing

        self.editing = install_editing(self)
        self._build_tabs()
        self._build_status_bar()
        self._build_actions()
        self.editing.install_menu()
        for menu in self.menuBar().findChildren(QMenu):
            menu.setToolTipsVisible(True)
        self._connect()
        self._restore_settings()
        self._update_status()

    # --- construction ----------------------------------------------------------------------
    def _build_tabs(self) -> None:
        side = QWidget(self)
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(4, 0, 0, 0)
        from medseg.gui.segment.segment_panel import SegmentPanel

        self.segment_panel = SegmentPanel(self.document, self, self)
        side_layout.addWidget(self.window_panel)
        side_layout.addWidget(self.segment_panel)
        side_layout.addWidget(self.editing.panel)
        side_layout.addWidget(self.overlay_panel, 1)
        self.side_scroll = side_scroll = QScrollArea(self)  # on a short screen the panels scroll instead of being squeezed
        side_scroll.setWidget(side)
        side_scroll.setWidgetResizable(True)
        side_scroll.setFrameShape(QFrame.Shape.NoFrame)
        side_scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # The panels' own least width and the scroll bar: never clipped on the right (horizontal
        # scrolling is off); 380 at least, the plan table is cramped below that.
        # Never wider than 460 whatever a panel's text says at the start: the views keep their share.
        side_scroll.setMinimumWidth(min(SIDE_MAX_WIDTH, max(380, side.minimumSizeHint().width()
                                                            + side_scroll.verticalScrollBar().sizeHint().width())))
        side_scroll.setMaximumWidth(SIDE_MAX_WIDTH)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(self.viewer)
        splitter.addWidget(side_scroll)
        splitter.setStretchFactor(0, 1)
        segment = QWidget(self)
        layout = QVBoxLayout(segment)
        layout.setContentsMargins(4, 4, 4, 4)
        for banner in (self.demo_banner, self.findings_banner, self.notice_banner):
            layout.addWidget(banner)
        from medseg.gui.segment.comparison_legend import ComparisonLegend, open_comparison_case

        self.comparison_legend = ComparisonLegend(self.view, self)
        layout.addWidget(self.comparison_legend)
        layout.addWidget(splitter, 1)
        self.tabs = QTabWidget(self)
        self.tabs.addTab(segment, "Segment")
        self.stats_dock = QDockWidget("Label statistics", self)
        self.stats_dock.setObjectName("label-statistics")
        self.stats_dock.setWidget(self.stats_panel)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.stats_dock)
        # the study's details left the 2×2 layout's fourth pane to the 3D view
        self.details_dock = QDockWidget("Study details", self)
        self.details_dock.setObjectName("study-details")
        details = QScrollArea(self)  # a long study's details scroll: their height must not hold the docks up
        details.setWidget(self.viewer.info_pane)
        details.setWidgetResizable(True)
        details.setFrameShape(QFrame.Shape.NoFrame)
        self.details_dock.setWidget(details)
        self.addDockWidget(Qt.DockWidgetArea.BottomDockWidgetArea, self.details_dock)
        self.tabifyDockWidget(self.stats_dock, self.details_dock)
        self.stats_dock.raise_()
        from medseg.gui.shell.dock_share import DockShare

        self.dock_share = DockShare(self, (self.stats_dock, self.details_dock))  # the views keep their share
        self.train_tab = TrainExportTab(self.document, self)
        self.train_tab.failed.connect(self._on_failed)
        self.train_tab.training_panel.model_chosen.connect(self.use_model_reference)
        self.train_tab.export_panel.open_requested.connect(lambda case: open_comparison_case(self, case))
        train_scroll = QScrollArea(self)  # on a laptop screen the tab scrolls instead of forcing the window taller
        train_scroll.setWidget(self.train_tab)
        train_scroll.setWidgetResizable(True)
        train_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.tabs.addTab(train_scroll, "Train && Export")
        self.setCentralWidget(self.tabs)
        self._docks_put_away: list[QDockWidget] = []  # the Segment tab's docks, while another tab is shown
        self.tabs.currentChanged.connect(self._on_tab_changed)

    def _on_tab_changed(self, index: int) -> None:
        """The label statistics and study details belong to the Segment tab: on Train & Export they took a
        third of the height and left its log two lines; they come back as they were."""
        docks = (self.stats_dock, self.details_dock)
        if index != 0:
            if not self._docks_put_away:
                raised = [d for d in docks if d.isVisible()]  # the tab shown of the two tabified docks
                self._docks_put_away = [d for d in docks if d.toggleViewAction().isChecked()]
                self._raised_dock = raised[0] if raised else None
                for dock in self._docks_put_away:
                    dock.hide()
            return
        for dock in self._docks_put_away:
            dock.show()
        if self._docks_put_away and self._raised_dock is not None:
            self._raised_dock.raise_()
        self._docks_put_away = []

    def _build_status_bar(self) -> None:
        self.position_label = QLabel(self)
        self.position_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        # One widget for every running job (loads, segmentation, training); Cancel cancels the newest.
        self.job_status = JobStatusWidget(parent=self)
        self.progress_bar = self.job_status.progress_bar
        self.progress_text = self.job_status.progress_text
        self.cancel_button = self.job_status.cancel_button
        # Results of saves, opens and segments: a widget of its own beside the readout, never
        # painted over it (QStatusBar.showMessage would hide the readout), kept until dismissed.
        self.messages = MessageArea(self)
        bar = self.statusBar()
        bar.addWidget(self.position_label, 3)
        bar.addWidget(self.messages, 2)
        bar.addPermanentWidget(self.job_status)
        # A fixed height: showing the progress widgets must not resize (and so re-render)
        # the views at the moment a load starts.
        bar.setFixedHeight(max(w.sizeHint().height() for w in (self.progress_bar, self.cancel_button)) + 6)

    def _action(self, text: str, slot, shortcut: str | QKeySequence | None = None, tip: str = "") -> QAction:
        action = QAction(text, self)
        if shortcut:
            action.setShortcut(QKeySequence(shortcut))
        action.setToolTip(tip or text)  # menus show it (setToolTipsVisible); the toolbar too
        action.triggered.connect(slot)
        self.addAction(action)  # shortcuts work even without a visible menu
        return action

    def _build_actions(self) -> None:
        self.open_folder_action = self._action("Open DICOM folder…", self.open_dicom_folder, "Ctrl+Shift+O")
        self.open_files_action = self._action("Open files…", self.open_files, QKeySequence.StandardKey.Open,
                                              "Open DICOM, NIfTI, NRRD or MHA files")
        self.open_archive_action = self._action("Open zip / DICOMDIR…", self.open_archive)
        self.pacs_action = self._action("PACS…", self.open_pacs, "Ctrl+Shift+P",
                                        "Find a study on a PACS, retrieve and open it, send a DICOM SEG back")
        # The one way to open a segmentation onto the image (Ctrl+Shift+L, its old second shortcut, leads here too).
        self.open_segmentation_action = self._action(
            "Open segmentation…", self.open_segmentation, "Ctrl+L",
            "A NIfTI/NRRD/MHA label map (names, colours and provenance from its .labels.json) or a DICOM SEG, "
            "placed onto the open image in patient coordinates")
        self.open_segmentation_action.setShortcuts([QKeySequence("Ctrl+L"), QKeySequence("Ctrl+Shift+L")])
        self.demo_action = self._action("Demo study", self.open_demo, tip="The built-in synthetic demo study")
        self.segment_action = self._action("Segment", self.segment, "Ctrl+G",
                                           "Segment the open image with the current model (in the background)")
        self.choose_model_action = self._action("Choose model…", self.choose_model,
                                                tip="A medseg model package or an nnU-Net v2 result folder")
        self.models_action = self._action("Models…", lambda: self.open_models_dialog(),
                                          tip="The model catalogue: install TotalSegmentator's models and others, "
                                              "see their licences and structures")
        self.models_dialog = None  # made on first use
        self.builtin_model_action = self._action("Use the built-in model", lambda: self.use_model_reference(None),
                                                 tip="Segment with the starter model that comes with medseg "
                                                     "(body, lungs, bones)")
        from medseg.gui.segment.model_chooser import chosen_reference

        self.builtin_model_action.setEnabled(chosen_reference() is not None)
        self.quit_action = self._action("Quit", self.close, QKeySequence.StandardKey.Quit)
        self.recent_menu_actions: list[QAction] = []

        file_menu = self.menuBar().addMenu("&File")
        for action in (self.open_folder_action, self.open_files_action, self.open_archive_action, self.pacs_action):
            file_menu.addAction(action)
        self.recent_menu = file_menu.addMenu("Recent studies")
        file_menu.addAction(self.demo_action)
        file_menu.addSeparator()
        files = self.segmentation_files
        self.save_action = self._action("Save segmentation", files.save, QKeySequence.StandardKey.Save)
        self.save_as_action = self._action("Save segmentation as…", files.save_as, QKeySequence.StandardKey.SaveAs,
                                           "NIfTI / NRRD / MHA with label names, DICOM SEG, or STL/OBJ surfaces")
        self.report_action = self._action("Export report…", self._export_report, tip="A one-page PDF or HTML "
                                          "report: the study, the model, every shown structure's volume, the views")
        for action in (self.open_segmentation_action, self.save_action, self.save_as_action, self.report_action):
            file_menu.addAction(action)
        file_menu.addSeparator()
        file_menu.addAction(self.quit_action)

        model_menu = self.menuBar().addMenu("&Segmentation")
        model_menu.addAction(self.segment_action)
        model_menu.addAction(self.choose_model_action)
        model_menu.addAction(self.models_action)
        model_menu.addAction(self.builtin_model_action)

        view_menu = self.menuBar().addMenu("&View")
        self.layout_group = QActionGroup(self)
        self.layout_actions = {}
        for name, text, key in (("1x3", "Layout 1 × 3", "F5"), ("2x2", "Layout 2 × 2", "F6"), ("single", "Single view (maximised)", "F7")):
            action = self._action(text, lambda _=False, n=name: self.set_layout(n), key)
            action.setCheckable(True)
            self.layout_group.addAction(action)
            view_menu.addAction(action)
            self.layout_actions[name] = action
        view_menu.addSeparator()
        view_menu.addAction(self.raw_stack.action)
        view_menu.addAction(self.stats_dock.toggleViewAction())
        view_menu.addAction(self.details_dock.toggleViewAction())
        self.reset_action = self._action("Reset zoom and pan", self.viewer.reset_views, "R")
        view_menu.addAction(self.reset_action)
        # S, as ITK-SNAP's segmentation visibility (O is the Lasso tool's)
        self.overlay_action = self._action("Show label overlay", self._toggle_overlay, "S")
        view_menu.addAction(self.overlay_action)
        presets_menu = view_menu.addMenu("Window presets")
        self.preset_actions = {}
        for name in [AUTO_PRESET, *self.view.presets]:
            action = self._action(name, lambda _=False, n=name: self.apply_preset(n), PRESET_KEYS.get(name))
            presets_menu.addAction(action)
            self.preset_actions[name] = action
        presets_menu.addSeparator()
        presets_menu.addAction(self._action("Edit presets…", self.edit_presets))

        help_menu = self.menuBar().addMenu("&Help")
        help_menu.addAction(self._action("README", self.open_readme))
        help_menu.addAction(self._action("Keyboard and mouse…", self.show_shortcuts, "F1"))
        help_menu.addAction(self._action("Log folder", self.open_log_folder))
        help_menu.addAction(self._action("About medseg", self.show_about))

        toolbar = self.addToolBar("Main")
        toolbar.setObjectName("main-toolbar")
        for action in (self.open_folder_action, self.open_files_action, self.open_archive_action, self.demo_action):
            toolbar.addAction(action)
        toolbar.addSeparator()
        toolbar.addAction(self.open_segmentation_action)
        toolbar.addAction(self.segment_action)
        toolbar.addSeparator()
        for action in self.layout_actions.values():
            toolbar.addAction(action)

    def _connect(self) -> None:
        loader = self.loader
        loader.busy_changed.connect(self._on_busy)
        loader.progressed.connect(self._on_progress)
        loader.study_loaded.connect(self._on_study_loaded)
        loader.segmented.connect(self._on_segmented)
        loader.failed.connect(self._on_failed)
        for source in (self.segmentation_files, self.stats_panel, self.raw_stack):
            source.failed.connect(self._on_failed)
        self.segmentation_files.saved.connect(self._on_segmentation_saved)
        self.segmentation_files.opened.connect(self._on_segmentation_opened)
        self.stats_panel.exported.connect(
            lambda path: self.notify(f"Statistics saved to {path}", "success", "statistics CSV saved"))
        self.viewer.hovered.connect(self._on_hover)
        self.viewer.layout_changed.connect(self._on_layout_changed)
        self.window_panel.edit_presets_requested.connect(self.edit_presets)
        self.overlay_panel.name_set_changed.connect(self._on_name_set)
        self.view.cursor_changed.connect(self._update_status)
        self.view.comparison_changed.connect(self._on_comparison_changed)
        self.viewer.view3d.failed.connect(self._on_failed)
        self.viewer.view3d.picked.connect(self.overlay_panel.labels.select)  # the picked structure's row
        self.document.volume_changed.connect(self._on_volume_changed)
        self.document.label_map_changed.connect(self._sync_source)
        self.document.history_changed.connect(self._sync_source)
        self.view.window_changed.connect(self._update_info)
        self.document.notice.connect(self.notify)  # what an edit operation did (or why it did nothing)

    # --- segmentation files (medseg.gui.study.segmentation_files) ----------------------------------------
    def open_segmentation(self) -> None:
        """File ▸ Open segmentation (Ctrl+L): a label map with its sidecar or a DICOM SEG, onto the image."""
        files = self.segmentation_files
        start = files.path.parent if files.path else save_dialog.results_folder(self.document.image_source)
        path, _ = QFileDialog.getOpenFileName(self, "Open segmentation", str(start), OPEN_FILTER)
        if path and self.editing.may_discard_edits("Open a segmentation"):
            files.open(path)

    @Slot(object)
    def _on_segmentation_opened(self, opened: Any) -> None:
        """What the file held and everything the user must know about how it was placed (kept on screen)."""
        name = Path(opened.label_map.meta.source_files[0]).name if opened.label_map.meta.source_files else "file"
        labels = len(self.document.labels)
        self._show_source(f"{name}: {labels} label{'s' if labels != 1 else ''}",
                          "\n".join([*opened.notes, *opened.naming]))
        told = [*opened.notes, *(n for n in opened.naming if opened.format == "dicom-seg")]
        if told:
            self.notice_banner.show_message(f"{name}: " + "; ".join(told) + ".")
        else:
            self.notice_banner.hide()
        self._update_status()

    def _show_source(self, text: str, details: str = "", step: int | None = None) -> None:
        """The overlay's line about where the segmentation came from; it stays while that is what is shown
        (``step``: the history step that made it, e.g. a Segment result: undo takes the line away, redo
        brings it back; another label map or none replaces it)."""
        self._source = (self.document.label_map, step, text, details)
        self._set_source_line(text, details)

    def _set_source_line(self, text: str, details: str = "") -> None:
        """Where the shown segmentation came from, in the overlay section and under the Segment button
        (where the user's eyes are after pressing it; the overlay section is often scrolled away)."""
        self.overlay_panel.set_source(text, details)
        self.segment_panel.show_result(text, details)

    @Slot()
    def _sync_source(self) -> None:
        doc = self.document
        label_map, step, text, details = self._source
        if label_map is None and doc.label_map is None:
            return
        if label_map is doc.label_map and (step is None or doc.history.is_applied(step)):
            self._set_source_line(text, details)
            return
        if label_map is not doc.label_map:
            self._source = (None, None, "", "")
        if doc.label_map is None:
            self._set_source_line("No segmentation. File ▸ Open segmentation… (Ctrl+L), Segment, or draw.")
        else:
            labels = len(doc.labels)
            self._set_source_line(f"Segmentation: {labels} label{'s' if labels != 1 else ''}")

    @Slot(str)
    def _on_segmentation_saved(self, path: str) -> None:
        notes = "; ".join(self.segmentation_files.notes)
        self.notify(f"{Path(path).name}: {notes}" if notes else Path(path).name, "success",
                    f"segmentation file {Path(path).suffix}: {notes}")

    # --- opening -----------------------------------------------------------------------------
    def open_dicom_folder(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Open DICOM folder", self._last_folder())
        if folder:
            self.open_path(folder)

    def open_files(self) -> None:
        paths, _ = QFileDialog.getOpenFileNames(self, "Open files", self._last_folder(), IMAGE_FILTER)
        if paths:
            self.open_paths(paths)

    def open_archive(self) -> None:
        path, _ = QFileDialog.getOpenFileName(self, "Open zip or DICOMDIR", self._last_folder(), ARCHIVE_FILTER)
        if path:
            self.open_path(path)

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
        app_shell.settings().setValue("last_folder", str(Path(path).parent if Path(path).is_file() else path))
        if is_image_file(path):
            if self._refuse_when_busy() or not self.editing.may_discard_edits("Open another image"):
                return
            self.loader.load_image_file(path, synthetic=synthetic)
        else:
            self.browse([path], auto_load=auto_load, synthetic=synthetic)

    def browse(self, paths: Sequence[str], auto_load: bool = False, synthetic: bool = False) -> SeriesBrowser:
        """Scan in the series browser; with auto_load, load the largest volume without asking."""
        if self.browser is not None:
            self.browser.shutdown()
            self.browser.deleteLater()
        self.browser = SeriesBrowser(paths, self)
        source = paths[0] if len(paths) == 1 else str(Path(paths[0]).parent)
        self.browser.series_chosen.connect(lambda s: self._load_series(s, source, synthetic))
        self.browser.scan_failed.connect(self._on_failed)
        if auto_load:
            self.browser.scan_finished.connect(lambda result: self._auto_load(result, source, synthetic))
        else:
            self.browser.open()  # window-modal, never blocks the event loop
        self.browser.start_scan()
        return self.browser

    def _auto_load(self, result: Any, source: str, synthetic: bool) -> None:
        volumes = [s for s in result.series if s.loadable]
        if not volumes:
            self.browser.open()  # let the user see why nothing can be loaded
            return
        largest = max(volumes, key=lambda s: int(np.prod(s.size_xyz)))
        self._load_series(largest, source, synthetic)

    def _load_series(self, series: Any, source: str, synthetic: bool) -> None:
        if self._refuse_when_busy() or not self.editing.may_discard_edits("Open another series"):
            return
        self.loader.load_series(series, source=source, synthetic=synthetic,
                                scan_result=self.browser.result if self.browser is not None else None)

    def open_pacs(self):
        """The PACS dialog (one per window, kept so a running retrieval survives closing it)."""
        from medseg.gui.pacs.dialog import PacsDialog

        if self.pacs_dialog is None:
            self.pacs_dialog = PacsDialog(self)
            self.pacs_dialog.series_retrieved.connect(self._on_pacs_series)
        self.pacs_dialog.show()
        self.pacs_dialog.raise_()
        return self.pacs_dialog

    @Slot(str)
    def _on_pacs_series(self, folder: str) -> None:
        self.open_path(folder, auto_load=True)

    def open_demo(self) -> None:
        """Generate (once) and open the synthetic demo study."""
        if self.demo_job is not None or self._refuse_when_busy():
            return

        def work(progress=None, cancel=None):
            from medseg.io.phantom import demo_study_path  # pydicom + scipy: imported off the GUI thread

            return demo_study_path(progress=progress, cancel=cancel)

        self.demo_job = Job("demo", work, self, pause_gc=True)
        self.demo_job.progressed.connect(self._on_progress)
        self.demo_job.finished_ok.connect(self._on_demo_ready)
        self.demo_job.finished_error.connect(self._on_demo_failed)
        self._on_busy()
        self.demo_job.start()

    @Slot(object)
    def _on_demo_ready(self, folder: Path) -> None:
        self.demo_job = None
        self._on_busy()
        self.demo_ready.emit(folder)
        self.open_path(folder, auto_load=True, synthetic=True)

    @Slot(object)
    def _on_demo_failed(self, error: BaseException) -> None:
        self.demo_job = None
        self._on_busy()
        self._on_failed(error)

    def _refuse_when_busy(self) -> bool:
        if self.loader.busy:
            self.notify("Still loading: wait or press Cancel first.", "warning")
            return True
        return False

    def _last_folder(self) -> str:
        return str(app_shell.settings().value("last_folder", str(Path.home())))

    # drag and drop --------------------------------------------------------------------------
    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        paths = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.open_paths(paths)

    # --- segmentation ------------------------------------------------------------------------
    def model_path(self) -> str | None:
        """The chosen model package (None: the built-in starter model). A catalogue id is the folder it is
        installed in. A choice that no longer opens — a catalogue model removed, a folder deleted or holding no
        model (a run folder cleaned up) — is forgotten, and the window says why."""
        from medseg.catalogue.folders import is_model_id, resolve_reference
        from medseg.gui.segment.model_chooser import chosen_reference, store_reference

        reference = chosen_reference()
        if reference is None:
            return None
        try:
            if is_model_id(reference):
                return str(resolve_reference(reference))
            reason = model_choice.missing_reason(reference)
            if reason is None:
                return reference
            raise MedsegError(f"The model chosen for Segment, {reference}, cannot be used: {reason}.")
        except MedsegError as error:
            store_reference(None)
            self._model_forgotten(f"{error} Segment uses the built-in model.")
            return None

    def _model_forgotten(self, text: str) -> None:
        if not hasattr(self, "messages"):  # the Segment panel asks while the window is being built: say it then
            QTimer.singleShot(0, lambda: self._model_forgotten(text))
            return
        self.segment_panel.model_chooser.fill()
        self.builtin_model_action.setEnabled(False)
        self.notify(text, "warning", "the chosen model cannot be used")

    def use_model_reference(self, reference: str | None) -> None:
        """Segment runs ``reference`` (a catalogue id or a folder; None: the built-in starter) from now on."""
        from medseg.catalogue.folders import find_installed, is_model_id
        from medseg.gui.segment.model_chooser import store_reference

        # a folder path has slashes too: only a catalogue id can name an installed interactive model
        record = find_installed(reference) if reference and is_model_id(reference) else None
        if record is not None and record.entry.get("kind") == "interactive":
            interactive_settings["model"] = reference  # it segments from prompts: the Interactive AI tool runs it
            self.notify(f"Model for the Interactive AI tool (key I): {reference}", "info", "model chosen")
            return
        store_reference(reference)
        self.segment_panel.model_chooser.fill()
        self.builtin_model_action.setEnabled(reference is not None)
        self.notify(f"Model for Segment: {reference or 'the built-in starter'}", "info", "model chosen")
        self.segment_panel.refresh()

    def choose_model(self) -> None:
        folder = QFileDialog.getExistingDirectory(self, "Choose a model package or nnU-Net result folder",
                                                  self.model_path() or self._last_folder())
        if folder:
            reason = model_choice.missing_reason(folder)
            if reason is not None:  # refused when chosen, not at the next Segment
                self._on_failed(MedsegError(f"not a model: {reason}", path=folder,
                                            hint="choose a medseg model package or an nnU-Net result folder"))
                return
            self.use_model_reference(folder)

    def open_models_dialog(self, install: str | None = None) -> None:
        """Segmentation ▸ Models…; ``install``: select that model and start installing it (its licence first)."""
        from medseg.gui.segment.models_dialog import ModelsDialog

        if self.models_dialog is None:
            self.models_dialog = ModelsDialog(self)
            self.models_dialog.model_chosen.connect(self.use_model_reference)
            self.models_dialog.installed.connect(lambda _id: self.segment_panel.model_chooser.fill())
            self.models_dialog.installed.connect(self._use_when_asked)
        self._install_asked = install
        self.models_dialog.refresh(select=install)
        self.models_dialog.show()
        self.models_dialog.raise_()
        if install is not None:
            self.models_dialog.install_selected()

    def _use_when_asked(self, model_id: str) -> None:
        """A model installed from the Segment panel's list is the one Segment runs next."""
        if model_id == getattr(self, "_install_asked", None):
            self._install_asked = None
            self.use_model_reference(model_id)

    def segment(self) -> None:
        """Segment with the chosen model; first ask when that could change labels the user has (see
        :meth:`EditSession.ask_before_segment`)."""
        if self._refuse_when_busy():
            return
        self.editing.ask_before_segment(self.segment_panel.package, self._segment_with)

    def _segment_with(self, mode: str, allow_modality: bool = False) -> None:
        if self._refuse_when_busy():
            return
        self._segment_mode = mode
        self.loader.segment(self.model_path(), self.segment_panel.device, self.segment_panel.configuration,
                            self.segment_panel.postprocess, mode, allow_modality=allow_modality,
                            structures=self.segment_panel.structures)

    def _ask_modality(self, error: ModalityMismatch) -> None:
        """The model was trained on another modality: segment anyway only if the user says so."""
        self.modality_box = QMessageBox(QMessageBox.Icon.Warning, "medseg", error.message,
                                        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.No, self)
        self.modality_box.setInformativeText("Segment it anyway? The result will say so.")
        self.modality_box.setDefaultButton(QMessageBox.StandardButton.No)
        self.modality_box.finished.connect(
            lambda answer: self._segment_with(self._segment_mode, allow_modality=True)
            if answer == QMessageBox.StandardButton.Yes else None)
        self.modality_box.open()

    @Slot(object)
    def _on_segmented(self, result: Any) -> None:
        found = sum(1 for ml in result.volumes_ml.values() if ml > 0)
        config = f"{result.configuration}, " if result.configuration else ""
        self._show_source(f"Model {result.model.name}: {found} label{'s' if found != 1 else ''} "
                          f"found ({config}{result.device}, {result.seconds:.1f} s)",
                          "After the network:\n" + "\n".join(result.postprocessing) if result.postprocessing else "",
                          step=self.document.history_position)
        notices = [*getattr(result, "notes", []), *(["fell back: " + "; ".join(result.fallbacks)]
                                                     if result.fallbacks else [])]
        if notices:
            self.notice_banner.show_message("Segmentation: " + "; ".join(notices))
        self.stats_panel.refresh()  # a new segmentation: its figures are what the user reads next
        how = f"{result.seconds:.1f} s on {result.device}{' with ' + result.configuration if result.configuration else ''}"
        if found == 0:  # nothing found is not a success: the wrong model, or the wrong image for it
            self.notify(f"0 structures found by {result.model.name}: is it the model for this series? "
                        f"(segmented in {how}; Segmentation ▸ Use the built-in model)",
                        "warning", "segmented: 0 structures found")
        else:
            self.notify(f"Segmented in {how}: {found} structure{'s' if found != 1 else ''} found.", "success")
        self._update_status()

    # --- results -----------------------------------------------------------------------------
    @Slot()
    def _on_busy(self) -> None:
        """Kept for the callers' signals: the job status widget follows the job registry itself."""

    @Slot(float, str)
    def _on_progress(self, fraction: float, text: str) -> None:
        """Kept for the callers' signals: progress reaches the status bar through the job registry."""

    def _on_volume_changed(self) -> None:
        self.demo_banner.setVisible(False)
        if self.document.is_synthetic:
            self.demo_banner.show_message("SYNTHETIC DEMO STUDY — a computer-generated phantom, not patient data.")
        self._update_info()
        self._update_status()

    @Slot(object)
    def _on_study_loaded(self, volume: Volume) -> None:
        summary, details = findings_text(volume.meta.findings)
        if summary:
            self.findings_banner.show_message(summary, details)
        else:
            self.findings_banner.hide()
        self.notice_banner.hide()
        if self.loader.source and not self.document.is_synthetic:
            self._set_recent(app_shell.add_recent_study(self.loader.source))
        title = volume.meta.series_description or (Path(self.loader.source).name if self.loader.source else "")
        self.setWindowTitle(f"medseg — {title}" if title else "medseg")

    @Slot(object)
    def _on_failed(self, error: BaseException) -> None:
        if isinstance(error, Cancelled):
            self.notify("Cancelled; nothing was changed.")
            return
        if isinstance(error, ModalityMismatch):
            self._ask_modality(error)
            return
        if isinstance(error, MedsegError):
            message = error.message
            detail = "\n".join(t for t in (f"File: {error.path}" if error.path else "", error.hint or "") if t)
        else:  # a bug: still shown, never swallowed
            message = f"Unexpected error: {type(error).__name__}: {error}"
            detail = "Please report this with the log file (Help ▸ Log folder)."
            log.exception("unexpected error", exc_info=error)
        self.error_box = QMessageBox(QMessageBox.Icon.Critical, "medseg", message, QMessageBox.StandardButton.Ok, self)
        self.error_box.setTextFormat(Qt.TextFormat.PlainText)  # errors quote files' text: never as markup
        if detail:
            self.error_box.setInformativeText(detail)
        self.error_box.open()
        self.error_shown.emit(message)

    def show_error(self, error: BaseException) -> None:
        """Show what went wrong (a dialog; a cancel is a notice, another modality a question): for panels."""
        self._on_failed(error)

    def _on_comparison_changed(self) -> None:
        comparison = self.view.comparison
        if comparison is not None:
            self._show_source(f"A: {comparison.primary_name} (editable); B: {comparison.name} (outlines)")

    def _export_report(self) -> None:
        from medseg.gui.labels.report import export_report_dialog

        written = export_report_dialog(self)
        if written is not None:
            self.statusBar().showMessage(f"Report written: {written}", 10_000)

    def _on_name_set(self, name_set: str) -> None:
        self.segmentation_files.name_set = name_set
        if self.document.label_map is not None:
            self.document.rename_labels_from(name_set, described_labels(name_set))

    # --- view commands -------------------------------------------------------------------------
    def set_layout(self, name: str) -> None:
        if name == "single" and self.viewer.layout_name != "single":
            self.viewer._layout_before_single = self.viewer.layout_name
        self.viewer.set_layout(name)

    def _on_layout_changed(self, name: str) -> None:
        self.layout_actions[name].setChecked(True)

    def apply_preset(self, name: str) -> None:
        if self.document.volume is not None:
            self.view.apply_preset(name)

    def _toggle_overlay(self) -> None:
        self.view.set_overlay_visible(not self.view.overlay_visible)

    def edit_presets(self) -> None:
        self.dialog = PresetsDialog(self.view.presets, self)
        self.dialog.accepted.connect(self._on_presets_edited)
        self.dialog.open()

    def _on_presets_edited(self) -> None:
        self.view.set_presets(self.dialog.presets())
        app_shell.save_presets(self.view.presets)
        self.window_panel.refresh_presets()

    def _set_recent(self, recent: list[str]) -> None:
        self.recent_menu.clear()
        for path in recent:
            action = self.recent_menu.addAction(path)
            action.triggered.connect(lambda _=False, p=path: self.open_path(p))
        self.recent_menu.setEnabled(bool(recent))

    # --- status and info -----------------------------------------------------------------------
    def notify(self, text: str, level: str = "info", log_text: str | None = None) -> None:
        """A result the user should read (saved, opened, segmented, recovered): kept in the message area."""
        self.messages.show_message(text, level, log_text)

    def event(self, event) -> bool:  # noqa: D401
        # Menu items' status tips would be painted over the slice/HU readout by QStatusBar; menus
        # show them as tooltips instead (see _build_actions).
        if event.type() == QEvent.Type.StatusTip:
            return True
        return super().event(event)

    @Slot(object, str)
    def _on_hover(self, xyz: Any, view: str) -> None:
        self._hover = (xyz, view)
        self._update_status()

    def status_text(self) -> str:
        doc = self.document
        if doc.volume is None:
            return "No image open. File ▸ Open DICOM folder…, drop files here, or File ▸ Demo study."
        xyz, view_name = self._hover
        if xyz is None:
            xyz, view_name = self.view.cursor_xyz, self.viewer.active_view
        view = self.viewer.views[view_name]
        axes = view.axes
        physical = doc.volume.index_to_physical(xyz)
        parts = []
        if axes is not None:
            normal_lps = int(np.argmax(np.abs(doc.volume.direction[:, axes.normal_axis])))
            parts.append(f"{view_name.capitalize()} slice {xyz[axes.normal_axis] + 1}/{view.slice_count}")
            parts.append(f"{'LPS'[normal_lps].lower()} = {physical[normal_lps]:.1f} mm")
        parts.append(f"voxel ({xyz[0]}, {xyz[1]}, {xyz[2]})")
        parts.append("LPS ({:.1f}, {:.1f}, {:.1f}) mm".format(*physical))
        value = doc.value_at(xyz)
        unit = "HU" if doc.volume.meta.modality in ("CT", "") else ""
        parts.append(f"{value:.0f} {unit}".strip() if value is not None else "")
        label = doc.label_at(xyz)
        if label:
            entry = doc.labels.get(label)
            parts.append(f"label {label}" + (f" {entry.name}" if entry else ""))
        return "   |   ".join(p for p in parts if p)

    def _update_status(self) -> None:
        self.position_label.setText(self.status_text())

    def _update_info(self) -> None:
        volume = self.document.volume
        if volume is None:
            self.viewer.info_pane.setText("No image open.")
            return
        meta = volume.meta
        rows = [
            ("Patient", " ".join(t for t in (meta.patient_name, f"({meta.patient_id})" if meta.patient_id else "") if t)),
            ("Study", " ".join(t for t in (meta.study_description, meta.study_date) if t)),
            ("Series", " ".join(t for t in (str(meta.series_number or ""), meta.series_description) if t)),
            ("Modality", meta.modality),
            ("Manufacturer", meta.manufacturer),
            ("Size", " × ".join(str(n) for n in volume.size_xyz) + " voxels"),
            ("Spacing", " × ".join(f"{s:.3g}" for s in volume.spacing_mm) + " mm"),
            ("Window", f"L {self.view.window_center:.0f} / W {self.view.window_width:.0f}"),
            ("Findings", join_messages([f.message for f in meta.findings]) or "none"),
        ]
        if self.document.is_synthetic:
            rows.insert(0, ("Note", "synthetic demo study, not patient data"))
        self.viewer.info_pane.setText("<table>" + "".join(
            f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in rows if v) + "</table>")

    # --- help --------------------------------------------------------------------------------
    def show_about(self) -> None:
        from medseg.gui.shell.about_dialog import AboutDialog

        self.dialog = AboutDialog(self)
        self.dialog.open()

    def show_shortcuts(self) -> None:
        self.dialog = app_shell.shortcuts_box(self)
        self.dialog.open()

    def open_readme(self) -> None:
        readme = app_shell.readme_path()
        if readme is None or not QDesktopServices.openUrl(QUrl.fromLocalFile(str(readme))):
            self.show_shortcuts()

    def open_log_folder(self) -> None:
        QDesktopServices.openUrl(QUrl.fromLocalFile(str(app_shell.log_directory())))

    # --- settings ------------------------------------------------------------------------------
    def _restore_settings(self) -> None:
        store = app_shell.settings()
        geometry = store.value("window/geometry")
        # Placed once shown: the first layout pass widens a window sized before it (to the toolbar's width).
        self._saved_geometry = geometry
        self._first_placement = True
        self.placed = False  # True once the first show has put the window where it belongs
        layout = str(store.value("view/layout", "2x2"))  # the biggest views on a wide screen
        self.set_layout(layout if layout in self.layout_actions else "2x2")
        self.view.set_overlay_opacity(float(store.value("view/overlay_opacity", 0.5)))
        self._set_recent(app_shell.recent_studies())

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        if self._first_placement:
            self._first_placement = False
            if not self.testAttribute(Qt.WidgetAttribute.WA_Resized):  # a caller sized it: keep that
                QTimer.singleShot(0, self._place)

    def _place(self) -> None:
        """Where the user left the window last time, else most of the screen."""
        if self._saved_geometry is None or not self.restoreGeometry(self._saved_geometry):
            self._fill_most_of_the_screen()
        self.placed = True

    def _fill_most_of_the_screen(self) -> None:
        """The first start: 92 % of the screen, centred (a clinician's 1600 x 1000 screen is not 1014 x 874)."""
        screen = self.screen() or QApplication.primaryScreen()
        if screen is None:
            self.resize(1400, 900)
            return
        area = screen.availableGeometry()
        # The window system's frame comes on top of the size given here; on a small screen the
        # window takes as little as it needs and stays on the screen where it can.
        frame_w, frame_h = self.frameGeometry().width() - self.width(), self.frameGeometry().height() - self.height()
        least = self.minimumSizeHint()
        width = max(least.width(), min(int(area.width() * 0.92), area.width() - frame_w))
        height = max(least.height(), min(int(area.height() * 0.92), area.height() - frame_h))
        self.resize(width, height)
        self.move(area.x() + max(0, (area.width() - width - frame_w) // 2),
                  area.y() + max(0, (area.height() - height - frame_h) // 2))

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.document.unsaved:
            event.ignore()
            self.editing.ask_then_close()
            return
        self.editing.closing()
        store = app_shell.settings()
        store.setValue("window/geometry", self.saveGeometry())
        store.setValue("view/layout", self.viewer.layout_name if self.viewer.layout_name != "single" else "1x3")
        store.setValue("view/overlay_opacity", self.view.overlay_opacity)
        self.loader.shutdown()
        self.viewer.view3d.shutdown()
        if self.browser is not None:
            self.browser.shutdown()
        if self.demo_job is not None:
            self.demo_job.wait_stopped()
        self.train_tab.shutdown()
        self.job_status.detach()
        super().closeEvent(event)
