"""Where the shown segmentation came from: one line (and details) in the overlay section and under Segment.

It stays while that segmentation is what is shown: a Segment result's line goes with an undo of the step that
made it and comes back with the redo; another label map, or none, replaces it.
"""

from __future__ import annotations

from typing import Any, Callable

from PySide6.QtCore import QObject, Slot

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.view_state import ViewState

Sink = Callable[[str, str], None]  # (text, details): a widget that shows the line


class SourceLine(QObject):
    def __init__(self, document: SegmentationDocument, view: ViewState, sinks: list[Sink],
                 parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.document, self.view, self.sinks = document, view, sinks
        # (label map, history step or None, text, details) of the line last set
        self._source: tuple[Any, int | None, str, str] = (None, None, "", "")
        document.label_map_changed.connect(self.sync)
        document.history_changed.connect(self.sync)
        view.comparison_changed.connect(self._on_comparison_changed)

    def show(self, text: str, details: str = "", step: int | None = None) -> None:
        """``step``: the history step that made what is shown (e.g. a Segment result), None: the label map."""
        self._source = (self.document.label_map, step, text, details)
        self._set(text, details)

    def _set(self, text: str, details: str = "") -> None:
        for sink in self.sinks:
            sink(text, details)

    @Slot()
    def sync(self) -> None:
        doc = self.document
        label_map, step, text, details = self._source
        if label_map is None and doc.label_map is None:
            return
        if label_map is doc.label_map and (step is None or doc.history.is_applied(step)):
            self._set(text, details)
            return
        if label_map is not doc.label_map:
            self._source = (None, None, "", "")
        if doc.label_map is None:
            self._set("No segmentation. File ▸ Open segmentation… (Ctrl+L), Segment, or draw.")
        else:
            labels = len(doc.labels)
            self._set(f"Segmentation: {labels} label{'s' if labels != 1 else ''}")

    def _on_comparison_changed(self) -> None:
        comparison = self.view.comparison
        if comparison is not None:
            self.show(f"A: {comparison.primary_name} (editable); B: {comparison.name} (outlines)")
