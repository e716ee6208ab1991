"""View ▸ Acquired slices (raw stack): show an irregular series as it was acquired, or regularised again.

medseg resamples a tilted / gapped / variably spaced series onto a regular grid. A
clinician may want the slices exactly as the scanner wrote them; this action (also a
button in the geometry banner) reloads the same series the other way. A segmentation
lives on one grid, so switching with unsaved edits is refused until they are saved.
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Signal, Slot
from PySide6.QtGui import QAction
from PySide6.QtWidgets import QPushButton, QWidget

from medseg.edit.document import ViewerDocument
from medseg.errors import MedsegError
from medseg.gui.study_loader import StudyLoader


def _irregular(document: ViewerDocument) -> tuple[bool, bool]:
    """(the open series is irregular, it is shown raw)."""
    volume = document.volume
    if volume is None:
        return False, False
    kinds = {f.kind for f in volume.meta.findings}
    return bool(kinds & {"regularized", "raw_stack"}), "raw_stack" in kinds


class RawStackToggle(QObject):
    failed = Signal(object)

    def __init__(self, document: ViewerDocument, loader: StudyLoader, parent: QWidget) -> None:
        super().__init__(parent)
        self.document, self.loader = document, loader
        self.action = QAction("Acquired slices (raw stack)", parent)
        self.action.setCheckable(True)
        self.action.setToolTip("Show the irregular series as acquired instead of on medseg's regular grid")
        self.action.triggered.connect(self._on_triggered)
        self.button = QPushButton("Show acquired slices", parent)
        self.button.clicked.connect(self.toggle)
        document.volume_changed.connect(self.update)
        document.pixels_changed.connect(self.update)
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
        return self.loader.load_image_file(self.loader.source, synthetic=self.document.is_synthetic,
                                           series_uid=key, regularize=not raw)
