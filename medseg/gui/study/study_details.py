"""The Study details dock: who, which study and series, the scanner, the grid, the window, the findings."""

from __future__ import annotations

from PySide6.QtCore import QObject
from PySide6.QtWidgets import QLabel

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.messages import join_messages
from medseg.gui.common.view_state import ViewState


def details_html(document: SegmentationDocument, view: ViewState) -> str:
    volume = document.volume
    if volume is None:
        return "No image open."
    meta = volume.meta
    rows = [
        ("Patient", " ".join(t for t in (meta.patient_name, f"({meta.patient_id})" if meta.patient_id else "") if t)),
        ("Study", " ".join(t for t in (meta.study_description, meta.study_date) if t)),
        ("Series", " ".join(t for t in (str(meta.series_number or ""), meta.series_description) if t)),
        ("Modality", meta.modality),
        ("Manufacturer", meta.manufacturer),
        ("Size", " × ".join(str(n) for n in volume.size_xyz) + " voxels"),
        ("Spacing", " × ".join(f"{s:.3g}" for s in volume.spacing_mm) + " mm"),
        ("Window", f"L {view.window_center:.0f} / W {view.window_width:.0f}"),
        ("Findings", join_messages([f.message for f in meta.findings]) or "none"),
    ]
    if document.is_synthetic:
        rows.insert(0, ("Note", "synthetic demo study, not patient data"))
    return "<table>" + "".join(f"<tr><td><b>{k}</b>&nbsp;&nbsp;</td><td>{v}</td></tr>" for k, v in rows if v) + "</table>"


class StudyDetails(QObject):
    """Keeps ``pane`` showing the open study's details as the image and its window change."""

    def __init__(self, document: SegmentationDocument, view: ViewState, pane: QLabel) -> None:
        super().__init__(pane)
        self.document, self.view, self.pane = document, view, pane
        document.volume_changed.connect(self.refresh)
        view.window_changed.connect(self.refresh)

    def refresh(self) -> None:
        self.pane.setText(details_html(self.document, self.view))
