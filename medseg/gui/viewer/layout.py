"""The three linked slice views and the 3D view, and their layout (1×3, 2×2 with the 3D view, single).

The views never talk to each other: they observe the document and the view state (napari style). This
panel keeps the int16/uint8 arrays the views slice from, made once per image or label
map, so scrolling never copies the volume.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import QGridLayout, QLabel, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.view_state import ViewState
from medseg.gui.viewer.label_table import color_arrays
from medseg.gui.viewer.slice_render import SliceRenderer
from medseg.gui.viewer.slice_view import SliceView
from medseg.gui.viewer.view3d import View3D
from medseg.gui.viewer.view_axes import VIEW_NAMES, view_axes

LAYOUTS = ("1x3", "2x2", "single")


def display_array(array: np.ndarray) -> np.ndarray:
    """The int16 array the views slice from: the image itself when it is int16 already."""
    if array.dtype == np.int16:
        return array
    return np.clip(np.rint(array), -32768, 32767).astype(np.int16)


class ViewerPanel(QWidget):
    hovered = Signal(object, str)  # voxel (x, y, z) or None, view name
    layout_changed = Signal(str)

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.view = view
        self.renderer = SliceRenderer()
        self.views = {name: SliceView(name, document, view, self.renderer, self) for name in VIEW_NAMES}
        self.view3d = View3D(document, view, self)
        self.view3d.maximise_requested.connect(self._toggle_maximise)
        self.info_pane = QLabel()  # the study's details: the main window shows them in a dock
        self.info_pane.setAlignment(Qt.AlignmentFlag.AlignTop | Qt.AlignmentFlag.AlignLeft)
        self.info_pane.setWordWrap(True)
        self.info_pane.setStyleSheet("QLabel { background: #151515; color: #d0d0d0; padding: 10px; }")
        self.layout_name = "1x3"
        self._layout_before_single = "1x3"  # where double-clicking a maximised view goes back to
        self.active_view = "axial"  # the slice view the status bar and keys follow
        self.single_view = "axial"  # what the single layout shows: a slice view or the 3D view
        self._preview_turn = -1  # which view repaints the next progressive-loading preview
        self._grid = QGridLayout(self)
        self._grid.setContentsMargins(0, 0, 0, 0)
        self._grid.setSpacing(2)
        for name, slice_view in self.views.items():
            slice_view.hovered.connect(lambda xyz, n=name: self.hovered.emit(xyz, n))
            slice_view.maximise_requested.connect(self._toggle_maximise)
            slice_view.activated.connect(self._set_active)
        document.volume_changed.connect(self._on_volume_changed)
        document.pixels_changed.connect(self._on_pixels_changed)
        document.label_map_changed.connect(self._on_label_map_changed)
        document.label_map_edited.connect(self._on_label_map_edited)
        document.labels_changed.connect(self._on_labels_changed)
        self.view.window_changed.connect(self._on_window_changed)
        self.view.overlay_changed.connect(self._on_labels_changed)
        self.view.active_label_changed.connect(self._on_labels_changed)
        self.view.cursor_changed.connect(self._repaint_all)
        self.view.comparison_changed.connect(self._on_comparison_changed)
        for effect in self.view.tools.effects.values():  # seeds painted, a preview, a traced region, prompts
            effect.layer_changed.connect(
                (lambda _box=None: self._on_tool_layer(None)) if effect.redraw_whole else self._on_tool_layer)
        self.view.tools.outline_changed.connect(self._repaint_all)
        self.set_layout("1x3")
        self._on_window_changed()

    # --- layout ---------------------------------------------------------------------------
    def set_layout(self, name: str, view: str | None = None) -> None:
        if name not in LAYOUTS:
            raise ValueError(f"unknown layout {name!r}")
        if view is not None:
            self.single_view = view  # a slice view or the 3D view
            if view in self.views:
                self.active_view = view
        self.layout_name = name
        for widget in (*self.views.values(), self.view3d):
            self._grid.removeWidget(widget)
            widget.hide()
        for row in range(2):
            self._grid.setRowStretch(row, 0)
        for column in range(3):
            self._grid.setColumnStretch(column, 0)
        if name == "1x3":
            places = {n: (0, i) for i, n in enumerate(VIEW_NAMES)}
        elif name == "2x2":
            places = {"axial": (0, 0), "coronal": (0, 1), "sagittal": (1, 0)}
        else:
            places = {self.single_view: (0, 0)}
        if name == "2x2":
            places[self.view3d.name] = (1, 1)
        for view_name, (row, column) in places.items():
            widget = self.view3d if view_name == self.view3d.name else self.views[view_name]
            self._grid.addWidget(widget, row, column)
            widget.show()
            self._grid.setRowStretch(row, 1)
            self._grid.setColumnStretch(column, 1)
        self.layout_changed.emit(name)

    def choose_layout(self, name: str) -> None:
        """The layout the user chose (menu, F5-F7): from a grid to the single view, double-click goes back to it."""
        if name == "single" and self.layout_name != "single":
            self._layout_before_single = self.layout_name
        self.set_layout(name)

    def _toggle_maximise(self, view: str) -> None:
        if self.layout_name == "single":
            self.set_layout(self._layout_before_single)
        else:
            self._layout_before_single = self.layout_name
            self.set_layout("single", view)

    def _set_active(self, view: str) -> None:
        self.active_view = self.single_view = view

    def focus_active_view(self) -> None:
        """Give the keyboard to the slice view last worked in (arrows scroll it, tool and preset keys work)."""
        view = self.views[self.active_view]
        if view.isVisible():
            view.setFocus(Qt.FocusReason.OtherFocusReason)

    def reset_views(self) -> None:
        for view in self.views.values():
            view.reset_view()

    # --- document events ------------------------------------------------------------------
    def _on_volume_changed(self) -> None:
        volume = self.document.volume
        if volume is not None:
            # A loaded volume may be the very array its preview was (the decoder filled it in
            # place): it no longer changes, so it may be copied for sagittal reads again.
            self.renderer.settled(volume.array)
        values = display_array(volume.array) if volume is not None else None
        labels = self._label_array()
        for name, view in self.views.items():
            axes = view_axes(name, volume.direction) if volume is not None else None
            view.set_data(values, labels, axes)
        self._on_window_changed()

    def _on_pixels_changed(self) -> None:
        volume = self.document.volume
        if volume is not None and volume.array.dtype != np.int16:
            self._on_volume_changed()
            return
        if volume is not None:
            self.renderer.changing(volume.array)  # a preview being filled: slice it directly
        # One view per preview update, in turn: the three repaints then fall in separate
        # event-loop passes instead of one long one while decoder threads hold the GIL.
        names = [n for n in VIEW_NAMES if self.views[n].isVisible()] or list(VIEW_NAMES)
        self._preview_turn = (self._preview_turn + 1) % len(names)
        self.views[names[self._preview_turn]].invalidate()

    def _label_array(self) -> np.ndarray | None:
        label_map = self.document.label_map
        if label_map is None:
            return None
        return label_map.array  # uint8 or uint16: the renderer maps values to colour rows

    def _on_label_map_changed(self) -> None:
        labels = self._label_array()
        for view in self.views.values():
            view.set_data(view.display_values, labels, view.axes)

    def _on_label_map_edited(self, edit) -> None:
        """An in-place edit: refresh the renderer's x-major label copy in the box, then redraw
        only the views whose current slice crosses the box."""
        labels = next((v.display_labels for v in self.views.values() if v.display_labels is not None), None)
        if labels is not None:
            self.renderer.labels_edited(labels, getattr(edit, "box", None))
        lo, hi = edit.box
        for view in self.views.values():
            if view.axes is None:
                continue
            array_axis = 2 - view.axes.normal_axis
            if lo[array_axis] <= view.slice_position < hi[array_axis]:
                view.mark_labels_changed()

    def _on_labels_changed(self) -> None:
        table = dict(self.document.labels)
        active = self.view.active_label
        if active and active not in table:
            # "3 (new)": not in the table until its first voxel, but its seeds and its grow preview are
            # drawn now, in the colour it will get (they were black and invisible: the user applied blind)
            table[active] = self.document.new_label(active)
        colors, visible, slots = color_arrays(table)
        self.renderer.set_labels(colors, visible, self.view.overlay_opacity, slots)
        for view in self.views.values():
            view.mark_labels_changed()

    def _on_tool_layer(self, box=None) -> None:
        """What a tool paints changed (seeds, a preview, a traced region): redraw the views whose slice crosses ``box``."""
        for view in self.views.values():
            if view.axes is None:
                continue
            axis = 2 - view.axes.normal_axis
            if box is None or box[0][axis] <= view.slice_position < box[1][axis]:
                view.mark_tool_layer_changed()

    def _on_comparison_changed(self) -> None:
        comparison = self.view.comparison
        array = None
        if comparison is not None:
            array = comparison.label_map.array
            self.renderer.set_comparison_labels(*color_arrays(comparison.labels))
        for view in self.views.values():
            view.display_comparison = array
            view.mark_labels_changed()

    def _on_window_changed(self) -> None:
        self.renderer.set_window(self.view.window_center, self.view.window_width)
        self._repaint_all()

    def _repaint_all(self) -> None:
        for view in self.views.values():
            view.update()
