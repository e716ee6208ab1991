"""How the open segmentation is looked at and worked on: the GUI's half of the document pair.

It lives in ``gui`` because only a window has one, but it imports no Qt (an import-linter contract
says so): tests and scripts drive it headless, and panels bind to it instead of to the window.

The :class:`~medseg.edit.document.SegmentationDocument` holds what is saved and undone (image,
label map and table, history, journal); this view state holds what only a window has:
window/level and its presets, the crosshair, the overlay's opacity and outline, a read-only
comparison layer, the active label, and the active tool with its options
(:attr:`ViewState.tools`, a :class:`~medseg.edit.interaction.ToolController` built around
both). The CLI and batch recipes never make one.

Like the document it is plain Python with change events, and the only writer of its state:
widgets call its methods and redraw from its events. It follows the document's events
itself (connected first, so widgets that redraw on a new image read a cursor and window
that already fit it): a new image recentres the crosshair, takes the header's window and
drops the comparison layer; a new label map makes one of its labels active.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit.document import SegmentationDocument, check_label_values
from medseg.edit.events import Event
from medseg.edit.interaction import ToolController
from medseg.edit.label_map import build_label_table
from medseg.errors import GeometryError

# CT window presets (centre, width) in HU, as commonly taught (Radiopaedia's table).
DEFAULT_PRESETS: dict[str, tuple[float, float]] = {
    "Soft tissue": (40.0, 400.0),
    "Lung": (-600.0, 1500.0),
    "Bone": (400.0, 1800.0),
    "Brain": (40.0, 80.0),
    "Liver": (30.0, 150.0),
    "Mediastinum": (50.0, 350.0),
}
AUTO_PRESET = "Auto (header)"


@dataclass(frozen=True)
class ComparisonLayer:
    """A second, read-only label map on the image grid, shown beside the editable one (e.g. another
    model's output). ``primary_name`` says what the editable label map is, ``name`` what this one is."""

    label_map: Volume  # its array is made read-only: nothing edits a comparison
    labels: dict[int, Label]
    name: str
    primary_name: str


class ViewState:
    """Window/level, crosshair, overlay, comparison layer, active label and tool, for one document."""

    def __init__(self, document: SegmentationDocument) -> None:
        self.document = document
        self.window_center = 40.0
        self.window_width = 400.0
        self.window_preset = ""  # the preset the user chose for the current window ("" = set by hand)
        self.presets: dict[str, tuple[float, float]] = dict(DEFAULT_PRESETS)
        self.cursor_xyz: tuple[int, int, int] = (0, 0, 0)
        self.overlay_opacity = 0.5
        self.overlay_outline = False
        self.overlay_visible = True
        self.comparison: ComparisonLayer | None = None
        self.comparison_visible = True
        self.active_label = 1

        self.window_changed = Event()
        self.cursor_changed = Event()
        self.overlay_changed = Event()  # opacity, outline, overlay on/off
        self.comparison_changed = Event()  # the comparison layer set, cleared, shown or hidden
        self.active_label_changed = Event()

        document.volume_changed.connect(self._on_new_image, first=True)
        document.label_map_changed.connect(self._on_new_label_map, first=True)
        # the active tool and its options; views forward the mouse here
        self.tools = ToolController(document, self)

    # --- following the document ----------------------------------------------------------
    def _on_new_image(self) -> None:
        self.clear_comparison()  # it belonged to the previous image
        if self.document.volume is not None:
            self.cursor_xyz = tuple(n // 2 for n in self.document.volume.size_xyz)  # type: ignore[assignment]
            self.window_center, self.window_width = self.auto_window()
            self.window_preset = AUTO_PRESET

    def _on_new_label_map(self) -> None:
        labels = self.document.labels
        if labels and self.active_label not in labels:
            self.set_active_label(next(iter(labels)))

    # --- active label ----------------------------------------------------------------------
    def set_active_label(self, value: int) -> None:
        if value != self.active_label:
            self.active_label = int(value)
            self.active_label_changed.emit()

    def centre_on_label(self, value: int) -> bool:
        """Jump to a structure: make it the active label and put the crosshair on a voxel of it in its
        largest axial cross-section (a voxel of the label even for a ring). False when it has no voxels."""
        from medseg.edit.tools.rules import label_box

        label_map = self.document.label_map
        if label_map is None or value not in label_map.labels:
            return False
        self.set_active_label(value)
        box = label_box(label_map, value)
        if box is None:
            return False
        (z0, y0, x0), (z1, y1, x1) = box
        mask = label_map.array[z0:z1, y0:y1, x0:x1] == value
        z = int(np.argmax(mask.sum(axis=(1, 2))))
        ys, xs = np.nonzero(mask[z])
        inside = int(np.argmin((ys - ys.mean()) ** 2 + (xs - xs.mean()) ** 2))
        self.set_cursor((x0 + int(xs[inside]), y0 + int(ys[inside]), z0 + z))
        return True

    def pick_label_at(self, xyz: tuple[int, int, int]) -> int | None:
        """Make the label under a voxel the active one (ctrl-click)."""
        value = self.document.label_at(xyz)
        if value:
            self.set_active_label(value)
        return value

    # --- window / level -----------------------------------------------------------------
    def set_window(self, center: float, width: float, preset: str = "") -> None:
        """``preset``: the preset the user chose for these values ("" when set by hand), so the panel shows
        the user's choice even when another preset (e.g. the header's window) has the same values."""
        width = max(1.0, float(width))
        if (center, width, preset) != (self.window_center, self.window_width, self.window_preset):
            self.window_center, self.window_width, self.window_preset = float(center), width, preset
            self.window_changed.emit()

    def set_presets(self, presets: dict[str, tuple[float, float]]) -> None:
        self.presets = dict(presets)

    def apply_preset(self, name: str) -> None:
        if name == AUTO_PRESET:
            self.apply_auto_window()
            return
        center, width = self.presets[name]
        self.set_window(center, width, preset=name)

    def auto_window(self) -> tuple[float, float]:
        """The header's window if there is one, else a robust range of the voxels."""
        volume = self.document.volume
        if volume is None:
            return DEFAULT_PRESETS["Soft tissue"]
        meta = volume.meta
        if meta.window_center is not None and meta.window_width:
            return float(meta.window_center), float(meta.window_width)
        sample = volume.array[:: max(1, volume.array.shape[0] // 8), ::4, ::4]
        low, high = np.percentile(sample, [1, 99]) if sample.size else (0.0, 1.0)
        return float(low + high) / 2.0, max(1.0, float(high - low))

    def apply_auto_window(self) -> None:
        self.set_window(*self.auto_window(), preset=AUTO_PRESET)

    # --- crosshair ----------------------------------------------------------------------
    def set_cursor(self, xyz: Any) -> None:
        clamped = self.document.clamp(xyz)
        if clamped != self.cursor_xyz:
            self.cursor_xyz = clamped
            self.cursor_changed.emit()

    def move_cursor(self, axis: int, delta: int) -> None:
        """Scroll along one index axis (0 = x, 1 = y, 2 = z)."""
        xyz = list(self.cursor_xyz)
        xyz[axis] += delta
        self.set_cursor(xyz)

    # --- overlay ------------------------------------------------------------------------
    def set_overlay_opacity(self, opacity: float) -> None:
        self.overlay_opacity = min(1.0, max(0.0, float(opacity)))
        self.overlay_changed.emit()

    def set_overlay_outline(self, outline: bool) -> None:
        self.overlay_outline = bool(outline)
        self.overlay_changed.emit()

    def set_overlay_visible(self, visible: bool) -> None:
        self.overlay_visible = bool(visible)
        self.overlay_changed.emit()

    # --- comparison layer ----------------------------------------------------------------
    def set_comparison(self, label_map: Volume, labels: Mapping[int, Label], name: str, primary_name: str = "") -> None:
        """Show ``label_map`` (on the image grid) read-only beside the editable label map."""
        volume = self.document.volume
        if volume is None:
            raise GeometryError("open an image before opening a comparison label map onto it")
        if not label_map.same_grid(volume):
            raise GeometryError(f"the comparison label map's grid {label_map.size_xyz} does not match the "
                                f"image's {volume.size_xyz}")
        check_label_values(label_map)
        label_map.array.flags.writeable = False
        table = build_label_table(np.unique(label_map.array).tolist(), labels)
        self.comparison = ComparisonLayer(label_map, table, name, primary_name)
        self.comparison_visible = True
        self.comparison_changed.emit()

    def clear_comparison(self) -> None:
        if self.comparison is not None:
            self.comparison = None
            self.comparison_changed.emit()

    def set_comparison_visible(self, visible: bool) -> None:
        self.comparison_visible = bool(visible)
        self.comparison_changed.emit()


__all__ = ["ViewState", "ComparisonLayer", "DEFAULT_PRESETS", "AUTO_PRESET"]
