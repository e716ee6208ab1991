"""The window's menus and toolbar: every action, its shortcut and tooltip, and what it calls.

The actions call the parts the window is made of (the opener, the Segment flow, the segmentation files, the
view, Help); they are kept as the window's attributes (``window.segment_action``…) for the panels and tests
that trigger them. The Edit menu is the editing session's (medseg.gui.editing.edit_session.install_menu).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtGui import QAction, QActionGroup, QKeySequence
from PySide6.QtWidgets import QMainWindow, QMenu

from medseg.gui.common.view_state import AUTO_PRESET
from medseg.gui.viewer.window_panel import PRESET_KEYS

LAYOUT_ACTIONS = (("1x3", "Layout 1 × 3", "F5"), ("2x2", "Layout 2 × 2", "F6"),
                  ("single", "Single view (maximised)", "F7"))


def make_action(window: QMainWindow, text: str, slot: Callable, shortcut: str | QKeySequence | None = None,
                tip: str = "") -> QAction:
    action = QAction(text, window)
    if shortcut:
        action.setShortcut(QKeySequence(shortcut))
    action.setToolTip(tip or text)  # menus show it (setToolTipsVisible); the toolbar too
    action.triggered.connect(slot)
    window.addAction(action)  # shortcuts work even without a visible menu
    return action


def build(window) -> None:
    """Menus File, Segmentation, View and Help and the main toolbar of ``window`` (a MainWindow)."""
    def action(text, slot, shortcut=None, tip=""):
        return make_action(window, text, slot, shortcut, tip)

    opener, flow, files, view = window.opener, window.segmenting, window.segmentation_files, window.view
    window.open_folder_action = action("Open DICOM folder…", opener.open_dicom_folder, "Ctrl+Shift+O")
    window.open_files_action = action("Open files…", opener.open_files, QKeySequence.StandardKey.Open,
                                      "Open DICOM, NIfTI, NRRD or MHA files")
    window.open_archive_action = action("Open zip / DICOMDIR…", opener.open_archive)
    window.pacs_action = action("PACS…", opener.open_pacs, "Ctrl+Shift+P",
                                "Find a study on a PACS, retrieve and open it, send a DICOM SEG back")
    # The one way to open a segmentation onto the image (Ctrl+Shift+L, its old second shortcut, leads here too).
    window.open_segmentation_action = action(
        "Open segmentation…", opener.open_segmentation, "Ctrl+L",
        "A NIfTI/NRRD/MHA label map (names, colours and provenance from its .labels.json) or a DICOM SEG, "
        "placed onto the open image in patient coordinates")
    window.open_segmentation_action.setShortcuts([QKeySequence("Ctrl+L"), QKeySequence("Ctrl+Shift+L")])
    window.demo_action = action("Demo study", opener.open_demo, tip="The built-in synthetic demo study")
    window.segment_action = action("Segment", flow.segment, "Ctrl+G",
                                   "Segment the open image with the current model (in the background)")
    window.choose_model_action = action("Choose model…", flow.choose_model,
                                        tip="A medseg model package or an nnU-Net v2 result folder")
    window.models_action = action("Models…", lambda: flow.open_models_dialog(),
                                  tip="The model catalogue: install TotalSegmentator's models and others, "
                                      "see their licences and structures")
    window.builtin_model_action = action("Use the built-in model", lambda: flow.use_model_reference(None),
                                         tip="Segment with the starter model that comes with medseg "
                                             "(body, lungs, bones)")
    from medseg.gui.segment.model_chooser import chosen_reference

    window.builtin_model_action.setEnabled(chosen_reference() is not None)
    flow.builtin_changed.connect(window.builtin_model_action.setEnabled)
    window.quit_action = action("Quit", window.close, QKeySequence.StandardKey.Quit)

    file_menu = window.menuBar().addMenu("&File")
    for item in (window.open_folder_action, window.open_files_action, window.open_archive_action,
                 window.pacs_action):
        file_menu.addAction(item)
    window.recent_menu = opener.recent_menu = file_menu.addMenu("Recent studies")
    file_menu.addAction(window.demo_action)
    file_menu.addSeparator()
    window.save_action = action("Save segmentation", files.save, QKeySequence.StandardKey.Save)
    window.save_as_action = action("Save segmentation as…", files.save_as, QKeySequence.StandardKey.SaveAs,
                                   "NIfTI / NRRD / MHA with label names, DICOM SEG, or STL/OBJ surfaces")
    window.report_action = action("Export report…", lambda: _export_report(window), tip="A one-page PDF or HTML "
                                  "report: the study, the model, every shown structure's volume, the views")
    for item in (window.open_segmentation_action, window.save_action, window.save_as_action, window.report_action):
        file_menu.addAction(item)
    file_menu.addSeparator()
    file_menu.addAction(window.quit_action)

    model_menu = window.menuBar().addMenu("&Segmentation")
    for item in (window.segment_action, window.choose_model_action, window.models_action,
                 window.builtin_model_action):
        model_menu.addAction(item)

    view_menu = window.menuBar().addMenu("&View")
    window.layout_group = QActionGroup(window)
    window.layout_actions = {}
    for name, text, key in LAYOUT_ACTIONS:
        item = action(text, lambda _=False, n=name: window.viewer.choose_layout(n), key)
        item.setCheckable(True)
        window.layout_group.addAction(item)
        view_menu.addAction(item)
        window.layout_actions[name] = item
    window.viewer.layout_changed.connect(lambda name: window.layout_actions[name].setChecked(True))
    view_menu.addSeparator()
    view_menu.addAction(window.raw_stack.action)
    view_menu.addAction(window.stats_dock.toggleViewAction())
    view_menu.addAction(window.details_dock.toggleViewAction())
    window.reset_action = action("Reset zoom and pan", window.viewer.reset_views, "R")
    view_menu.addAction(window.reset_action)
    # S, as ITK-SNAP's segmentation visibility (O is the Lasso tool's)
    window.overlay_action = action("Show label overlay", lambda: view.set_overlay_visible(not view.overlay_visible),
                                   "S")
    view_menu.addAction(window.overlay_action)
    presets_menu = view_menu.addMenu("Window presets")
    window.preset_actions = {}
    for name in [AUTO_PRESET, *view.presets]:
        item = action(name, lambda _=False, n=name: _apply_preset(window, n), PRESET_KEYS.get(name))
        presets_menu.addAction(item)
        window.preset_actions[name] = item
    presets_menu.addSeparator()
    presets_menu.addAction(action("Edit presets…", window.presets_editor.edit))

    window.help.fill(window.menuBar().addMenu("&Help"), action)

    toolbar = window.addToolBar("Main")
    toolbar.setObjectName("main-toolbar")
    for item in (window.open_folder_action, window.open_files_action, window.open_archive_action, window.demo_action):
        toolbar.addAction(item)
    toolbar.addSeparator()
    toolbar.addAction(window.open_segmentation_action)
    toolbar.addAction(window.segment_action)
    toolbar.addSeparator()
    for item in window.layout_actions.values():
        toolbar.addAction(item)


def show_tooltips(window: QMainWindow) -> None:
    """Menu items' tips as tooltips: QStatusBar would paint them over the slice/HU readout (MainWindow.event)."""
    for menu in window.menuBar().findChildren(QMenu):
        menu.setToolTipsVisible(True)


def _apply_preset(window, name: str) -> None:
    if window.document.volume is not None:
        window.view.apply_preset(name)


def _export_report(window) -> None:
    from medseg.gui.labels.report import export_report_dialog

    written = export_report_dialog(window)
    if written is not None:
        # the message area: QStatusBar.showMessage painted over the position readout
        window.notify(f"Report written: {written}", "success")
