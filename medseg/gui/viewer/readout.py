"""The status bar's readout: the slice, the position in mm, the voxel, its value and the label under the mouse
(or at the crosshair while the mouse is outside the views)."""

from __future__ import annotations

from typing import Any

import numpy as np
from PySide6.QtCore import Qt, Slot
from PySide6.QtWidgets import QLabel, QWidget

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.view_state import ViewState
from medseg.gui.viewer.layout import ViewerPanel


class PositionReadout(QLabel):
    def __init__(self, document: SegmentationDocument, view: ViewState, viewer: ViewerPanel,
                 parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document, self.view, self.viewer = document, view, viewer
        self.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self._hover: tuple[tuple[int, int, int] | None, str] = (None, "axial")
        viewer.hovered.connect(self._on_hover)
        view.cursor_changed.connect(self.refresh)
        document.volume_changed.connect(self.refresh)
        self.refresh()

    @Slot(object, str)
    def _on_hover(self, xyz: Any, view: str) -> None:
        self._hover = (xyz, view)
        self.refresh()

    @Slot()
    def refresh(self) -> None:
        self.setText(self.status_text())

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
