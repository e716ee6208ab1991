"""View ▸ Acquired slices (raw stack): show an irregular series as it was acquired, or regularised again.

medseg resamples a tilted / gapped / variably spaced series onto a regular grid. A
clinician may want the slices exactly as the scanner wrote them; this action (also a
button in the geometry banner) reloads the same series the other way.

A segmentation lives on one grid, so switching with unsaved edits is refused until they
are saved. A saved (or opened) segmentation comes along: it is placed onto the other grid
in patient space (nearest voxel, a raw stack's slices where they were acquired), and when
nothing was changed on that grid, switching back restores the original voxel for voxel.

The way the study is looked at comes along too: the window/level, the crosshair's point in
the patient, and each view's scale (pixels per mm) and the patient point at its centre —
switching the grid is not opening another study.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from PySide6.QtCore import QObject, QPointF, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton, QWidget

from medseg.core.volume import Volume
from medseg.edit.document import SegmentationDocument
from medseg.errors import MedsegError
from medseg.gui.study.study_loader import StudyLoader


@dataclass
class _Carried:
    """The segmentation on the grid being left, to be placed on the grid being loaded."""

    image: Volume  # the grid it lies on (a raw stack's acquired slice positions included)
    array: Any
    labels: dict
    original: "_Carried | None" = None  # what it was placed from, when it was placed and left unchanged


@dataclass
class _Looking:
    """How the study was being looked at on the grid being left, in patient terms (mm, LPS)."""

    window: tuple[float, float, str]  # centre, width, the preset it came from
    cursor_lps: np.ndarray
    views: dict[str, tuple[np.ndarray, float]] = field(default_factory=dict)  # view -> (centre LPS, px per mm)


def _irregular(document: SegmentationDocument) -> tuple[bool, bool]:
    """(the open series is irregular, it is shown raw)."""
    volume = document.volume
    if volume is None:
        return False, False
    kinds = {f.kind for f in volume.meta.findings}
    return bool(kinds & {"regularized", "raw_stack"}), "raw_stack" in kinds


class RawStackToggle(QObject):
    failed = Signal(object)

    def __init__(self, document: SegmentationDocument, loader: StudyLoader, parent: QWidget,
                 viewer: Any = None) -> None:
        super().__init__(parent)
        self.document, self.loader, self.viewer = document, loader, viewer
        self._looking: _Looking | None = None
        self.action = QAction("Acquired slices (raw stack)", parent)
        self.action.setCheckable(True)
        self.action.setToolTip("Show the irregular series as acquired instead of on medseg's regular grid")
        self.action.triggered.connect(self._on_triggered)
        self.button = QPushButton("Show acquired slices", parent)
        self.button.clicked.connect(self.toggle)
        document.volume_changed.connect(self.update)
        document.pixels_changed.connect(self.update)
        loader.study_loaded.connect(self._on_loaded)
        loader.failed.connect(self._forget)
        self._carrying: _Carried | None = None
        self._placed: tuple[Any, int, _Carried] | None = None  # (label map, history position, placed from)
        self.update()

    @Slot()
    def update(self) -> None:
        irregular, raw = _irregular(self.document)
        self.action.setEnabled(irregular and not self.loader.busy)
        self.action.setChecked(raw)
        self.button.setVisible(irregular)
        self.button.setText("Show regular grid" if raw else "Show acquired slices")

    @Slot()
    def toggle(self) -> None:
        self.switch(not _irregular(self.document)[1])

    def _on_triggered(self, checked: bool) -> None:
        self.switch(bool(checked))

    def switch(self, raw: bool) -> bool:
        volume = self.document.volume
        irregular, shown_raw = _irregular(self.document)
        if volume is None or not irregular or raw == shown_raw or not self.loader.source:
            self.update()
            return False
        if self.document.label_map is not None and self.document.unsaved:
            self.update()
            self.failed.emit(MedsegError("the segmentation has unsaved edits on this grid",
                                         hint="save it first (File > Save segmentation), then switch"))
            return False
        key = volume.meta.extra.get("series_key")
        self._carrying = self._carry()
        self._looking = self._look()
        started = self.loader.load_image_file(self.loader.source, synthetic=self.document.is_synthetic,
                                              series_uid=key, regularize=not raw)
        if not started:
            self._carrying = self._looking = None
        return started

    def _look(self) -> _Looking:
        view, volume = self.loader.view, self.document.volume
        assert volume is not None
        looking = _Looking((view.window_center, view.window_width, view.window_preset),
                           volume.index_to_physical(view.cursor_xyz))
        for name, slice_view in (self.viewer.views.items() if self.viewer is not None else ()):
            rect = slice_view.image_rect()
            centre = slice_view.widget_to_continuous(QPointF(slice_view.width() / 2, slice_view.height() / 2))
            if slice_view.axes is None or rect.width() <= 0 or centre is None:
                continue
            columns, _rows = slice_view.axes.shape_of(volume.size_xyz)
            mm_x, _mm_y = slice_view.axes.pixel_spacing(volume.spacing_mm)
            looking.views[name] = (volume.index_to_physical(centre), rect.width() / (columns * mm_x))
        return looking

    def _keep_looking(self, looking: _Looking) -> None:
        """The window, the crosshair and each view's scale and centre as they were on the other grid."""
        view, volume = self.loader.view, self.document.volume
        assert volume is not None
        view.set_window(*looking.window)
        view.set_cursor(tuple(int(round(v)) for v in volume.physical_to_index(looking.cursor_lps)))
        for name, (centre_lps, px_per_mm) in looking.views.items():
            slice_view = self.viewer.views[name]
            if slice_view.axes is None:
                continue
            columns, rows = slice_view.axes.shape_of(volume.size_xyz)
            mm_x, mm_y = slice_view.axes.pixel_spacing(volume.spacing_mm)
            fitted = min(slice_view.width() / (columns * mm_x), slice_view.height() / (rows * mm_y))
            slice_view.zoom = float(np.clip(px_per_mm / fitted, 0.25, 20.0)) if fitted > 0 else 1.0
            slice_view.pan = QPointF(0.0, 0.0)
            at = slice_view.index_to_widget(tuple(volume.physical_to_index(centre_lps)))
            slice_view.pan = QPointF(slice_view.width() / 2 - at.x(), slice_view.height() / 2 - at.y())
            slice_view.update()

    def _carry(self) -> _Carried | None:
        doc = self.document
        label_map = doc.label_map
        if label_map is None or doc.volume is None or not label_map.counts[1:].any():
            return None
        here = _Carried(doc.volume, label_map.array, dict(doc.labels))
        if self._placed is not None and self._placed[0] is label_map and self._placed[1] == doc.history_position:
            here.original = self._placed[2]  # untouched since it was placed here: going back restores the original
        return here

    @Slot(object)
    def _forget(self, _error: object = None) -> None:
        self._carrying = self._looking = None

    @Slot(object)
    def _on_loaded(self, volume: Volume) -> None:
        carried, self._carrying = self._carrying, None
        looking, self._looking = self._looking, None
        self._placed = None
        doc = self.document
        if looking is not None and doc.volume is volume:
            self._keep_looking(looking)
        if carried is None or doc.volume is not volume or doc.label_map is not None:
            return
        from medseg.io.label_files import place_label_map

        original = carried.original
        try:
            if original is not None and _same_grid(original.image, volume):
                doc.set_label_map(volume.with_array(original.array), carried.labels, "back on this grid")
                return
            array, _ = place_label_map(carried.image.with_array(carried.array), volume)
            doc.set_label_map(volume.with_array(array.astype(carried.array.dtype, copy=False)), carried.labels,
                              "placed on the other grid")
        except MedsegError as error:
            self.failed.emit(error)
            return
        self._placed = (doc.label_map, doc.history_position, carried)


def _same_grid(a: Volume, b: Volume) -> bool:
    return a.same_grid(b) and a.meta.extra.get("slice_positions_mm") == b.meta.extra.get("slice_positions_mm")
