"""The main window: the frame that composes the rooms — tabs Segment and Train & Export, the side panels,
the docks, the menus (medseg.gui.shell.menus), the status bar — and gives them the window's services
(notify, show_error: medseg.gui.common.services).

Where things live: opening studies and segmentation files is medseg.gui.study.opening, the Segment flow
medseg.gui.segment.segment_flow, the readout medseg.gui.viewer.readout, Help medseg.gui.shell.help_menu,
the window's geometry and remembered layout medseg.gui.shell.placement.
"""

from __future__ import annotations

import gc
import logging
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from PySide6.QtCore import QEvent, Qt, QTimer, Signal, Slot
from PySide6.QtWidgets import (
    QDockWidget,
    QFrame,
    QMainWindow,
    QMessageBox,
    QScrollArea,
    QSplitter,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from medseg.core.volume import Volume
from medseg.edit.document import SegmentationDocument
from medseg.errors import Cancelled, MedsegError, ModalityMismatch
from medseg.gui.common import app_settings, wheel_guard
from medseg.gui.common.job_status import JobStatusWidget
from medseg.gui.common.view_state import DEFAULT_PRESETS, ViewState
from medseg.gui.labels.overlay_panel import OverlayPanel
from medseg.gui.labels.source_line import SourceLine
from medseg.gui.labels.stats_panel import StatsPanel
from medseg.gui.segment.segment_flow import SegmentFlow
from medseg.gui.shell import menus
from medseg.gui.shell.dock_share import DockShare, DocksOfFirstTab
from medseg.gui.shell.help_menu import HelpMenu
from medseg.gui.shell.messages import MessageArea
from medseg.gui.shell.placement import WindowPlacement
from medseg.gui.study.opening import StudyOpener
from medseg.gui.study.raw_stack import RawStackToggle
from medseg.gui.study.segmentation_files import SegmentationFiles
from medseg.gui.study.study_details import StudyDetails
from medseg.gui.study.study_loader import StudyLoader
from medseg.gui.train.tab import TrainExportTab
from medseg.gui.viewer.banners import Banner, findings_text
from medseg.gui.viewer.label_table import described_labels
from medseg.gui.viewer.layout import ViewerPanel
from medseg.gui.viewer.presets_dialog import PresetsEditor
from medseg.gui.viewer.readout import PositionReadout
from medseg.gui.viewer.window_panel import WindowPanel
from medseg.settings import SETTINGS
from medseg.workflows.edit_operations import register_operations

if TYPE_CHECKING:
    from medseg.gui.pacs.dialog import PacsDialog

log = logging.getLogger(__name__)

SIDE_MAX_WIDTH = 460  # px: the side panel's widest; the views take the rest of the window


class MainWindow(QMainWindow):
    error_shown = Signal(str)  # GUI thread: the message of an error dialog

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
        app_settings.bind(SETTINGS)  # the settings model, as the last session left it (the command line's kept)
        self.document = SegmentationDocument()  # what is segmented, undone, saved (the CLI's too)
        register_operations()  # the model-backed editing operations, before the tools are made from the catalogue
        self.view = ViewState(self.document)  # how it is looked at and worked on: this window's alone
        self.view.set_presets(app_settings.load_presets(DEFAULT_PRESETS))
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
        self.error_box: QMessageBox | None = None
        from medseg.gui.editing.edit_session import install as install_editing

        self.editing = install_editing(self)
        # where the shown segmentation came from: in the overlay section and under Segment (sinks: _build_tabs)
        self.source_line = SourceLine(self.document, self.view, [], self)
        self.opener = StudyOpener(self.document, self.loader, self.segmentation_files, self.editing, self,
                                  self.source_line.show, self.notice_banner, self, pacs_dialog=_pacs_dialog)
        self.segmenting = SegmentFlow(self.document, self.loader, self.editing, self, self.notice_banner.show_message,
                                      self.source_line.show, self.opener, self)
        self.help = HelpMenu(self)
        self._build_tabs()
        self._build_status_bar()
        self.presets_editor = PresetsEditor(self.view, app_settings.save_presets, self.window_panel, self)
        menus.build(self)
        self.editing.install_menu()
        menus.show_tooltips(self)
        self._connect()
        self.placement = WindowPlacement(self, self.viewer, self.view)
        self.placement.restore()
        self.opener.set_recent(list(SETTINGS.recent_studies))

    # --- construction ----------------------------------------------------------------------
    def _build_tabs(self) -> None:
        side = QWidget(self)
        side_layout = QVBoxLayout(side)
        side_layout.setContentsMargins(4, 0, 0, 0)
        from medseg.gui.segment.segment_panel import SegmentPanel

        self.segment_panel = SegmentPanel(self.document, self.segmenting, self.loader, self)
        self.segmenting.attach(self.segment_panel)
        from medseg.gui.common.idle_measure import IdleMeasurer

        # the CPU engines of the models a plan or a run found unmeasured, while nothing else runs (issue 51)
        self.idle_measurer = IdleMeasurer(self)
        self.idle_measurer.measured.connect(lambda _count: self.segment_panel._show_plan())
        self.source_line.sinks[:] = [self.overlay_panel.set_source, self.segment_panel.show_result]
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
        self.dock_share = DockShare(self, (self.stats_dock, self.details_dock))  # the views keep their share
        self.train_tab = TrainExportTab(self.document, self)
        self.train_tab.failed.connect(self.show_error)
        self.train_tab.training_panel.model_chosen.connect(self.segmenting.use_model_reference)
        self.train_tab.export_panel.open_requested.connect(lambda case: open_comparison_case(self, case))
        train_scroll = QScrollArea(self)  # on a laptop screen the tab scrolls instead of forcing the window taller
        train_scroll.setWidget(self.train_tab)
        train_scroll.setWidgetResizable(True)
        train_scroll.setFrameShape(QFrame.Shape.NoFrame)
        self.tabs.addTab(train_scroll, "Train && Export")
        self.setCentralWidget(self.tabs)
        DocksOfFirstTab(self.tabs, (self.stats_dock, self.details_dock))

    def _build_status_bar(self) -> None:
        self.position_label = PositionReadout(self.document, self.view, self.viewer, self)
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

    def _connect(self) -> None:
        loader = self.loader
        loader.study_loaded.connect(self._on_study_loaded)
        loader.segmented.connect(lambda _result: self.stats_panel.refresh())  # the figures the user reads next
        loader.segmented.connect(lambda _result: self.position_label.refresh())
        loader.failed.connect(self.show_error)
        for source in (self.segmentation_files, self.stats_panel, self.raw_stack):
            source.failed.connect(self.show_error)
        self.segmentation_files.opened.connect(lambda _opened: self.position_label.refresh())
        self.stats_panel.exported.connect(
            lambda path: self.notify(f"Statistics saved to {path}", "success", "statistics CSV saved"))
        self.overlay_panel.name_set_changed.connect(self._on_name_set)
        self.viewer.view3d.failed.connect(self.show_error)
        self.viewer.view3d.picked.connect(self.overlay_panel.labels.select)  # the picked structure's row
        self.document.volume_changed.connect(self._on_volume_changed)
        self.study_details = StudyDetails(self.document, self.view, self.viewer.info_pane)
        self.document.notice.connect(self.notify)  # what an edit operation did (or why it did nothing)

    # --- what the rooms tell the frame -------------------------------------------------------
    def _on_volume_changed(self) -> None:
        self.demo_banner.setVisible(False)
        if self.document.is_synthetic:
            self.demo_banner.show_message("SYNTHETIC DEMO STUDY — a computer-generated phantom, not patient data.")

    @Slot(object)
    def _on_study_loaded(self, volume: Volume) -> None:
        summary, details = findings_text(volume.meta.findings)
        if summary:
            self.findings_banner.show_message(summary, details)
        else:
            self.findings_banner.hide()
        self.notice_banner.hide()
        # the last study's result ("Saved …", "Report written …") is not this one's: off the message area (History
        # keeps it); a warning or an error stays until the user has read it
        if self.messages.current is not None and self.messages.current.level == "success":
            self.messages.dismiss()
        if self.loader.source and not self.document.is_synthetic:
            self.opener.set_recent(list(SETTINGS.add_recent_study(self.loader.source)))
        title = volume.meta.series_description or (Path(self.loader.source).name if self.loader.source else "")
        self.setWindowTitle(f"medseg — {title}" if title else "medseg")

    def _on_name_set(self, name_set: str) -> None:
        self.segmentation_files.name_set = name_set
        if self.document.label_map is not None:
            self.document.rename_labels_from(name_set, described_labels(name_set))

    def set_layout(self, name: str) -> None:
        """The layout the user chose (F5-F7; medseg.gui.viewer.layout.ViewerPanel.choose_layout)."""
        self.viewer.choose_layout(name)

    # --- the window's services (medseg.gui.common.services) ----------------------------------
    def notify(self, text: str, level: str = "info", log_text: str | None = None) -> None:
        """A result the user should read (saved, opened, segmented, recovered): kept in the message area."""
        self.messages.show_message(text, level, log_text)

    @Slot(object)
    def show_error(self, error: BaseException) -> None:
        """What went wrong: a dialog; a cancel is a notice, a model for another modality a question."""
        if isinstance(error, Cancelled):
            self.notify("Cancelled; nothing was changed.")
            return
        if isinstance(error, ModalityMismatch):
            self.segmenting.ask_modality(error)
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

    # --- Qt events ---------------------------------------------------------------------------
    def event(self, event) -> bool:
        # Menu items' status tips would be painted over the slice/HU readout by QStatusBar; menus
        # show them as tooltips instead (menus.show_tooltips).
        if event.type() == QEvent.Type.StatusTip:
            return True
        return super().event(event)

    def dragEnterEvent(self, event) -> None:  # noqa: N802
        if event.mimeData().hasUrls():
            event.acceptProposedAction()

    def dropEvent(self, event) -> None:  # noqa: N802
        paths = [url.toLocalFile() for url in event.mimeData().urls() if url.isLocalFile()]
        if paths:
            event.acceptProposedAction()
            self.opener.open_paths(paths)

    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        self.placement.shown()
        # the AI runtime's import starts once the window has painted (a timer owned by the panel: none after it is gone)
        QTimer.singleShot(50, self.segment_panel, self.segment_panel.prepare_runtime)

    def closeEvent(self, event) -> None:  # noqa: N802
        if self.document.unsaved:
            event.ignore()
            self.editing.ask_then_close()
            return
        self.editing.closing()
        self.placement.save()
        self.idle_measurer.stop()
        self.loader.shutdown()
        self.stats_panel.shutdown()
        self.segment_panel.shutdown()
        self.viewer.view3d.shutdown()
        self.opener.shutdown()
        self.train_tab.shutdown()
        self.job_status.detach()
        super().closeEvent(event)


def _pacs_dialog(parent: QWidget) -> PacsDialog:
    """File ▸ PACS…'s dialog, imported on first use (the PACS clients load only when a user asks for them)."""
    from medseg.gui.pacs.dialog import PacsDialog

    return PacsDialog(parent)
