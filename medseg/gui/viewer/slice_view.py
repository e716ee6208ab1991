"""One slice view (axial, coronal or sagittal) of the document, with Slicer-like mouse.

Mouse and keys (as in 3D Slicer / ITK-SNAP): wheel or Up/Down/PageUp/PageDown scroll
slices, left click/drag goes to the document's active tool (brush, eraser, fill, …) or,
with the Navigate tool, sets the crosshair in all views; ctrl-click picks the label under
the mouse as the active one; right-drag (or shift +
left-drag) changes window/level, middle-drag pans, ctrl+wheel zooms, double-click
maximises the view. The image is drawn with its physical aspect (mm, not voxels).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QLineF, QPointF, QRectF, Qt, Signal
from PySide6.QtGui import QColor, QCursor, QFont, QImage, QKeyEvent, QMouseEvent, QPainter, QPen, QPixmap, QWheelEvent
from PySide6.QtWidgets import QSizePolicy, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.view_state import ViewState
from medseg.gui.viewer import tool_overlay
from medseg.gui.viewer.slice_render import SliceRenderer, qimage_of
from medseg.gui.viewer.view_axes import ViewAxes

# Slicer's view colours, so users recognise which crosshair belongs to which view.
VIEW_COLORS = {"axial": QColor(240, 80, 80), "coronal": QColor(110, 200, 90), "sagittal": QColor(235, 200, 60)}
_PENS = {
    "crosshair": QPen(QColor(255, 255, 0, 150), 1, Qt.PenStyle.DashLine),
    "text": QPen(QColor(210, 210, 210)),
    "empty": QPen(QColor(150, 150, 150)),
}


# The keys a slice view handles itself (slices to scroll); Escape drops an outline being drawn. No window
# shortcut may take them (tests/gui/test_tool_keys.py). Keyed by int: event.key() gives
# an int, and Qt.Key is an IntEnum (equal, same hash).
SLICE_KEYS: dict[int, int] = {Qt.Key.Key_Up: 1, Qt.Key.Key_Down: -1, Qt.Key.Key_PageUp: 10, Qt.Key.Key_PageDown: -10,
              Qt.Key.Key_Right: 1, Qt.Key.Key_Left: -1}
VIEW_KEYS = (*SLICE_KEYS, Qt.Key.Key_Escape)


class SliceView(QWidget):
    hovered = Signal(object)  # (x, y, z) voxel index under the mouse, or None
    maximise_requested = Signal(str)
    activated = Signal(str)

    def __init__(self, name: str, document: SegmentationDocument, view: ViewState, renderer: SliceRenderer,
                 parent: QWidget | None = None):
        super().__init__(parent)
        self.name = name
        self.document = document
        self.view = view
        self.renderer = renderer
        self.axes: ViewAxes | None = None
        self.display_values: np.ndarray | None = None  # int16 (z, y, x) shared by all views
        self.display_labels: np.ndarray | None = None  # uint8 or uint16 (z, y, x), or None
        self.display_comparison: np.ndarray | None = None  # (z, y, x): a read-only label map, as outlines
        self.image: QImage | None = None  # this view's slice at one pixel per voxel
        self._words: np.ndarray | None = None  # keeps the QImage's buffer alive
        self._render_key: tuple | None = None
        self._prompt_image: QImage | None = None  # the scribbles and lassos on this slice (render_slice makes it)
        self._data_version = 0
        self._labels_version = 0  # bumped when label colours/visibility change
        self._tool_version = 0  # bumped when the seeds, a grow preview or a traced region change
        self._letters: QPixmap | None = None
        self._letters_key: tuple | None = None
        self._tool_drag = False  # the left drag is going to the active tool
        self.zoom = 1.0
        self.pan = QPointF(0.0, 0.0)
        self._drag_button: Qt.MouseButton | None = None
        self._drag_start = QPointF()
        self._drag_window = (0.0, 0.0)
        self._drag_pan = QPointF()
        self.setMinimumSize(160, 160)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        self.setAttribute(Qt.WidgetAttribute.WA_OpaquePaintEvent)

    # --- data from the controller -------------------------------------------------------
    def set_data(self, values: np.ndarray | None, labels: np.ndarray | None, axes: ViewAxes | None) -> None:
        self.display_values, self.display_labels, self.axes = values, labels, axes
        self._data_version += 1  # new arrays: a render key by id() could match a freed array's reused id
        self.invalidate()

    def invalidate(self) -> None:
        self._render_key = None
        self.update()

    def reset_view(self) -> None:
        self.zoom, self.pan = 1.0, QPointF(0.0, 0.0)
        self.update()

    # --- geometry ------------------------------------------------------------------------
    @property
    def slice_position(self) -> int:
        assert self.axes is not None
        return self.view.cursor_xyz[self.axes.normal_axis]

    @property
    def slice_count(self) -> int:
        if self.axes is None or self.document.volume is None:
            return 0
        return self.document.volume.size_xyz[self.axes.normal_axis]

    def image_rect(self) -> QRectF:
        """Where the slice image is drawn, in widget coordinates (physical aspect kept)."""
        volume = self.document.volume
        if volume is None or self.axes is None:
            return QRectF()
        columns, rows = self.axes.shape_of(volume.size_xyz)
        mm_x, mm_y = self.axes.pixel_spacing(volume.spacing_mm)
        width_mm, height_mm = columns * mm_x, rows * mm_y
        scale = min(self.width() / width_mm, self.height() / height_mm) * self.zoom
        w, h = width_mm * scale, height_mm * scale
        return QRectF((self.width() - w) / 2 + self.pan.x(), (self.height() - h) / 2 + self.pan.y(), w, h)

    def widget_to_continuous(self, point: QPointF) -> tuple[float, float, float] | None:
        """The continuous voxel position (x, y, z) under a widget point (voxel centres at integers)."""
        volume = self.document.volume
        if volume is None or self.axes is None:
            return None
        rect = self.image_rect()
        columns, rows = self.axes.shape_of(volume.size_xyz)
        column = (point.x() - rect.left()) / rect.width() * columns - 0.5
        row = (point.y() - rect.top()) / rect.height() * rows - 0.5
        if not (-0.5 <= column < columns - 0.5 and -0.5 <= row < rows - 0.5):
            return None
        return self.axes.pixel_to_index(column, row, self.slice_position, volume.size_xyz)

    def widget_to_index(self, point: QPointF) -> tuple[int, int, int] | None:
        volume = self.document.volume
        if volume is None or self.axes is None:
            return None
        rect = self.image_rect()
        columns, rows = self.axes.shape_of(volume.size_xyz)
        column = (point.x() - rect.left()) / rect.width() * columns
        row = (point.y() - rect.top()) / rect.height() * rows
        if not (0 <= column < columns and 0 <= row < rows):
            return None
        xyz = self.axes.pixel_to_index(int(column), int(row), self.slice_position, volume.size_xyz)
        return tuple(int(v) for v in xyz)  # type: ignore[return-value]

    def index_to_widget(self, xyz: tuple[float, float, float]) -> QPointF:
        """Centre of voxel ``xyz`` projected into this view, in widget coordinates."""
        volume = self.document.volume
        assert volume is not None and self.axes is not None
        column, row = self.axes.index_to_pixel(xyz, volume.size_xyz)
        columns, rows = self.axes.shape_of(volume.size_xyz)
        rect = self.image_rect()
        return QPointF(rect.left() + (column + 0.5) / columns * rect.width(), rect.top() + (row + 0.5) / rows * rect.height())

    # --- rendering -----------------------------------------------------------------------
    def _current_key(self) -> tuple:
        view = self.view
        return (self.slice_position, view.window_center, view.window_width, view.overlay_opacity,
                view.overlay_outline, view.overlay_visible, self._data_version, self._labels_version,
                view.comparison_visible, self._tool_version)

    def mark_tool_layer_changed(self) -> None:
        """The seeds, the grow preview or the traced region changed: redraw."""
        self._tool_version = self._tool_version + 1
        self.invalidate()

    def mark_labels_changed(self) -> None:
        self._labels_version = self._labels_version + 1
        self.invalidate()

    def render_slice(self) -> QImage | None:
        """Re-render the slice image if anything it depends on changed."""
        if self.display_values is None or self.axes is None:
            self.image = None
            return None
        key = self._current_key()
        if key != self._render_key or self.image is None:
            position = self.slice_position
            values = self.renderer.plane(self.display_values, self.axes, position)
            labels = None
            if self.display_labels is not None and self.view.overlay_visible:
                labels = self.renderer.plane(self.display_labels, self.axes, position)
                labels = self._with_preview(labels, position)
            self._words = self.renderer.render(values, labels, self.view.overlay_outline)
            self._words = self._tool_layers(self._words, position)
            if self.display_comparison is not None and self.view.comparison_visible:
                # Sliced directly: the renderer's x-major copies are kept for the image and the editable labels.
                self._words = self.renderer.outline_over(self._words,
                                                         self.axes.slice_of(self.display_comparison, position))
            self.image = qimage_of(self._words)
            self._prompt_image = self._prompt_pixels(position)
            self._render_key = key
        return self.image

    def _with_preview(self, labels: np.ndarray, position: int) -> np.ndarray:
        """The label plane with a tool's preview pasted in (what Apply would write: grow from seeds, Interactive AI)."""
        preview = self.view.tools.preview()
        if preview is None or self.axes is None or self.display_labels is None:
            return labels
        axis = 2 - self.axes.normal_axis
        lo, hi = preview.box
        if not lo[axis] <= position < hi[axis]:
            return labels
        index: list = [slice(None)] * 3
        index[axis] = position
        plane = np.array(self.display_labels[tuple(index)], copy=True)  # (unoriented) array order
        block = np.take(preview.labels, position - lo[axis], axis=axis)
        inner = [slice(lo[a], hi[a]) for a in range(3) if a != axis]
        plane[tuple(inner)] = block
        return self.axes.orient(plane)

    def _tool_layers(self, words: np.ndarray, position: int) -> np.ndarray:
        """What the tools paint into the slice image (seeds, a traced region's edge), each effect in its order."""
        if self.axes is None:
            return words
        axis = 2 - self.axes.normal_axis
        paints = [paint for effect in self.view.tools.effects.values() for paint in effect.paints(axis, position)]
        return tool_overlay.paint_words(words, paints, self.axes, self.renderer.seed_words)

    def _prompt_pixels(self, position: int) -> QImage | None:
        """What the tools draw unsmoothed over the slice (a prompt's scribbles and lassos), as an image of the
        slice's size, transparent elsewhere (None: nothing here)."""
        if self.axes is None or self.document.volume is None:
            return None
        axis, shape = 2 - self.axes.normal_axis, self.document.volume.shape_zyx
        masks = [mask for effect in self.view.tools.effects.values() for mask in effect.crisp(axis, position, shape)]
        return tool_overlay.crisp_image(masks, self.axes)

    def _draw_outline(self, painter: QPainter) -> None:
        """What the tools draw over the slice at screen resolution: the crisp voxels above, then each effect's
        lines and marks (a prompt's points and boxes, the scissors' or lasso's outline being drawn)."""
        if self.axes is None:
            return
        tool_overlay.draw_crisp(painter, self._prompt_image, self.image_rect())
        axis, position = 2 - self.axes.normal_axis, self.slice_position
        shapes = [shape for effect in self.view.tools.effects.values() for shape in effect.shapes(axis, position)]
        tool_overlay.draw_shapes(painter, shapes, lambda zyx: self.index_to_widget(tuple(zyx[::-1])))

    def paintEvent(self, _event) -> None:  # noqa: N802 - Qt naming
        # Few Qt calls per frame: each one releases and retakes the GIL, which is slow
        # while decoder threads are busy, so fonts, pens and the letters are cached.
        painter = QPainter(self)
        painter.fillRect(self.rect(), Qt.GlobalColor.black)
        image = self.render_slice()
        if image is not None:
            rect = self.image_rect()
            painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, True)
            painter.drawImage(rect, image)
            self._draw_crosshair(painter, rect)
            self._draw_outline(painter)
            painter.drawPixmap(0, 0, self._letters_pixmap())
            self._draw_corner_text(painter)
        else:
            painter.setPen(_PENS["empty"])
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, f"{self.name.capitalize()}\n(no image open)")
        painter.setPen(self._border_pen())
        painter.drawRect(self.rect().adjusted(0, 0, -1, -1))
        painter.end()

    def _border_pen(self) -> QPen:
        return QPen(VIEW_COLORS.get(self.name, QColor(200, 200, 200)), 2 if self.hasFocus() else 1)

    def _draw_crosshair(self, painter: QPainter, rect: QRectF) -> None:
        center = self.index_to_widget(self.view.cursor_xyz)
        gap = 8.0  # leave the voxel itself visible
        painter.setPen(_PENS["crosshair"])
        painter.drawLines([
            QLineF(rect.left(), center.y(), center.x() - gap, center.y()),
            QLineF(center.x() + gap, center.y(), rect.right(), center.y()),
            QLineF(center.x(), rect.top(), center.x(), center.y() - gap),
            QLineF(center.x(), center.y() + gap, center.x(), rect.bottom()),
        ])

    def _letters_pixmap(self) -> QPixmap:
        """Orientation letters at the edge midpoints, drawn once per size."""
        assert self.axes is not None
        key = (self.width(), self.height(), self.axes.letters)
        if self._letters_key != key:
            pixmap = QPixmap(self.size())
            pixmap.fill(Qt.GlobalColor.transparent)
            painter = QPainter(pixmap)
            font = QFont(self.font())
            font.setPointSize(12)
            font.setBold(True)
            painter.setFont(font)
            painter.setPen(QColor(255, 220, 120))
            left, right, top, bottom = self.axes.letters
            w, h, m = self.width(), self.height(), 6
            painter.drawText(QRectF(m, 0, 30, h), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignLeft, left)
            painter.drawText(QRectF(w - 30 - m, 0, 30, h), Qt.AlignmentFlag.AlignVCenter | Qt.AlignmentFlag.AlignRight, right)
            painter.drawText(QRectF(0, m, w, 24), Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignTop, top)
            painter.drawText(QRectF(0, h - 24 - m, w, 24), Qt.AlignmentFlag.AlignHCenter | Qt.AlignmentFlag.AlignBottom, bottom)
            painter.end()
            self._letters, self._letters_key = pixmap, key
        assert self._letters is not None, "drawn above the first time (no key matched yet)"
        return self._letters

    def _draw_corner_text(self, painter: QPainter) -> None:
        view = self.view
        painter.setPen(VIEW_COLORS.get(self.name, QColor(200, 200, 200)))
        painter.drawText(QPointF(8, 16), f"{self.name.capitalize()}  {self.slice_position + 1} / {self.slice_count}")
        painter.setPen(_PENS["text"])
        painter.drawText(QPointF(8, self.height() - 8), f"W {view.window_width:.0f}  L {view.window_center:.0f}")

    # --- mouse and keys -------------------------------------------------------------------
    def mousePressEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        self.setFocus()
        self.activated.emit(self.name)
        button = event.button()
        shift = bool(event.modifiers() & Qt.KeyboardModifier.ShiftModifier)
        if button == Qt.MouseButton.LeftButton and shift and not self.view.tools.claims_shift():
            button = Qt.MouseButton.RightButton  # shift + left = window/level (one-button mice)
        self._drag_button = button
        self._drag_start = event.position()
        self._drag_window = (self.view.window_center, self.view.window_width)
        self._drag_pan = QPointF(self.pan)
        self._tool_drag = False
        if button == Qt.MouseButton.LeftButton:
            xyz = self.widget_to_continuous(event.position())
            ctrl = bool(event.modifiers() & Qt.KeyboardModifier.ControlModifier)
            if xyz is not None and self.axes is not None and self.view.tools.press(xyz, self.axes.normal_axis, ctrl,
                                                                                   shift):
                self._tool_drag = True
            else:
                self._set_cursor_at(event.position())

    def mouseMoveEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        voxel = self.widget_to_index(event.position())
        self.hovered.emit(voxel)
        if self._drag_button is None and self.axes is not None:
            self.view.tools.hover(voxel, self.axes.normal_axis)
        delta = event.position() - self._drag_start
        if self._drag_button == Qt.MouseButton.LeftButton and self._tool_drag:
            xyz = self.widget_to_continuous(event.position())
            if xyz is not None:
                self.view.tools.drag(xyz)
        elif self._drag_button == Qt.MouseButton.LeftButton:
            self._set_cursor_at(event.position())
        elif self._drag_button == Qt.MouseButton.RightButton:
            center, width = self._drag_window
            # Slicer's feel: right = wider window, down = higher level; scaled to the window.
            sensitivity = max(width, 50.0) / 300.0
            self.view.set_window(center + delta.y() * sensitivity, width + delta.x() * sensitivity)
        elif self._drag_button == Qt.MouseButton.MiddleButton:
            self.pan = self._drag_pan + delta
            self.update()

    def mouseReleaseEvent(self, _event: QMouseEvent) -> None:  # noqa: N802
        if self._tool_drag:
            self._tool_drag = False
            self.view.tools.release()
        self._drag_button = None

    def leaveEvent(self, _event) -> None:  # noqa: N802
        self.hovered.emit(None)

    def mouseDoubleClickEvent(self, event: QMouseEvent) -> None:  # noqa: N802
        if self.view.tools.wants_mouse():
            self.mousePressEvent(event)  # Qt sends this instead of the second press: a polygon vertex, a dab
            return
        self.maximise_requested.emit(self.name)

    def _set_cursor_at(self, point: QPointF) -> None:
        xyz = self.widget_to_index(point)
        if xyz is not None:
            self.view.set_cursor(xyz)

    def wheelEvent(self, event: QWheelEvent) -> None:  # noqa: N802
        steps = event.angleDelta().y() / 120.0
        if not steps:
            return
        if event.modifiers() & Qt.KeyboardModifier.ControlModifier:
            self.zoom = float(np.clip(self.zoom * (1.15 ** steps), 0.25, 20.0))
            self.update()
        else:
            self.scroll_slices(int(np.sign(steps)) * max(1, int(abs(steps))))
        # The mouse did not move but the voxel under it did (another slice, or zoomed): the
        # status bar's slice/HU readout must follow now, not at the next mouse move.
        self.hovered.emit(self.widget_to_index(event.position()))

    def scroll_slices(self, slices: int) -> None:  # not QWidget.scroll, which moves pixels
        if self.axes is not None:
            self.view.move_cursor(self.axes.normal_axis, slices)

    def keyPressEvent(self, event: QKeyEvent) -> None:  # noqa: N802
        if event.key() in SLICE_KEYS:
            self.scroll_slices(SLICE_KEYS[event.key()])
            if self.underMouse():
                self.hovered.emit(self.widget_to_index(QPointF(self.mapFromGlobal(QCursor.pos()))))
        elif event.key() == Qt.Key.Key_Escape:
            self.view.tools.cancel_outline()
        else:
            super().keyPressEvent(event)
