"""The viewer's document: what is open and how it is looked at, without any Qt.

Like napari's layer/viewer models, this is plain Python with change notifications:
widgets subscribe to the :class:`Event` attributes and redraw; tests drive it without a
window. It holds the image volume, an optional label map on the same grid with its
label table, the window/level, the crosshair position (voxel index) and overlay
settings. The layout of the views is the GUI's business and lives there.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from medseg.errors import GeometryError
from medseg.io.volume import Volume

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
MAX_LABEL_VALUE = 255  # the overlay colour table has one row per value 0..255


class Event:
    """A minimal observer list: ``connect(callback)``, ``emit(*args)``."""

    def __init__(self) -> None:
        self._callbacks: list[Callable[..., Any]] = []

    def connect(self, callback: Callable[..., Any]) -> None:
        self._callbacks.append(callback)

    def disconnect(self, callback: Callable[..., Any]) -> None:
        self._callbacks.remove(callback)

    def emit(self, *args: Any) -> None:
        for callback in list(self._callbacks):
            callback(*args)


@dataclass
class LabelEntry:
    value: int
    name: str
    color: tuple[int, int, int]
    visible: bool = True


class ViewerDocument:
    """Image, label map, label table, window/level, crosshair and overlay settings."""

    def __init__(self) -> None:
        self.volume: Volume | None = None
        self.label_map: Volume | None = None
        self.labels: dict[int, LabelEntry] = {}
        self.window_center = 40.0
        self.window_width = 400.0
        self.cursor_xyz: tuple[int, int, int] = (0, 0, 0)
        self.overlay_opacity = 0.5
        self.overlay_outline = False
        self.overlay_visible = True
        self._volumes_cache: tuple[Volume, dict[int, float]] | None = None  # (label map, its volumes)
        self.presets: dict[str, tuple[float, float]] = dict(DEFAULT_PRESETS)
        self.is_synthetic = False  # the demo study: the UI must say so

        self.volume_changed = Event()  # a new image (geometry may differ)
        self.pixels_changed = Event()  # same image, new voxels (progressive loading)
        self.label_map_changed = Event()
        self.labels_changed = Event()  # names, colours, visibility
        self.window_changed = Event()
        self.cursor_changed = Event()
        self.overlay_changed = Event()  # opacity, outline, overlay on/off

    # --- image --------------------------------------------------------------------------
    def set_volume(self, volume: Volume, *, synthetic: bool = False, keep_view: bool = False) -> None:
        """Show a new image; drops a label map that no longer fits it."""
        self.volume = volume
        self.is_synthetic = synthetic
        if self.label_map is not None and not self.label_map.same_grid(volume):
            self._drop_label_map()
        if not keep_view:
            self.cursor_xyz = tuple(n // 2 for n in volume.size_xyz)  # type: ignore[assignment]
            self.apply_auto_window(notify=False)
        else:
            self.cursor_xyz = self._clamp(self.cursor_xyz)
        self.volume_changed.emit()

    def notify_pixels_changed(self) -> None:
        self.pixels_changed.emit()

    # --- label map ----------------------------------------------------------------------
    def set_label_map(self, label_map: Volume, label_table: dict[int, LabelEntry]) -> None:
        """Overlay ``label_map``; it must already be on the image grid (see fit_to_grid)."""
        if self.volume is None:
            raise GeometryError("open an image before opening a label map onto it")
        if not label_map.same_grid(self.volume):
            raise GeometryError(
                f"the label map's grid {label_map.size_xyz} does not match the image's {self.volume.size_xyz}"
            )
        if label_map.array.size and int(label_map.array.max()) > MAX_LABEL_VALUE:
            raise GeometryError(f"label values above {MAX_LABEL_VALUE} cannot be shown")
        if int(label_map.array.min()) < 0:
            raise GeometryError("label maps cannot hold negative values")
        self.label_map = label_map
        self.labels = dict(label_table)
        self.label_map_changed.emit()
        self.labels_changed.emit()

    def label_volumes_ml(self) -> dict[int, float]:
        """Volume of every label value in ml (cached until the label map changes)."""
        if self.label_map is None or self.volume is None:
            return {}
        cached = self._volumes_cache
        if cached is not None and cached[0] is self.label_map:
            return cached[1]
        counts = np.bincount(np.asarray(self.label_map.array).ravel())
        voxel_ml = self.volume.voxel_volume_ml
        volumes = {int(v): float(counts[v] * voxel_ml) for v in np.nonzero(counts)[0] if v != 0}
        self._volumes_cache = (self.label_map, volumes)
        return volumes

    def _drop_label_map(self) -> None:
        self.label_map = None
        self.labels = {}
        self.label_map_changed.emit()
        self.labels_changed.emit()

    def clear_label_map(self) -> None:
        if self.label_map is not None:
            self._drop_label_map()

    def set_label_visible(self, value: int, visible: bool) -> None:
        self.labels[value].visible = visible
        self.labels_changed.emit()

    def set_all_labels_visible(self, visible: bool) -> None:
        for entry in self.labels.values():
            entry.visible = visible
        self.labels_changed.emit()

    def set_label_color(self, value: int, color: tuple[int, int, int]) -> None:
        self.labels[value].color = tuple(int(c) for c in color)  # type: ignore[assignment]
        self.labels_changed.emit()

    def rename_label(self, value: int, name: str) -> None:
        self.labels[value].name = name
        self.labels_changed.emit()

    # --- window / level -----------------------------------------------------------------
    def set_window(self, center: float, width: float) -> None:
        width = max(1.0, float(width))
        if (center, width) != (self.window_center, self.window_width):
            self.window_center, self.window_width = float(center), width
            self.window_changed.emit()

    def apply_preset(self, name: str) -> None:
        if name == AUTO_PRESET:
            self.apply_auto_window()
            return
        center, width = self.presets[name]
        self.set_window(center, width)

    def auto_window(self) -> tuple[float, float]:
        """The header's window if there is one, else a robust range of the voxels."""
        if self.volume is None:
            return DEFAULT_PRESETS["Soft tissue"]
        meta = self.volume.meta
        if meta.window_center is not None and meta.window_width:
            return float(meta.window_center), float(meta.window_width)
        sample = self.volume.array[:: max(1, self.volume.array.shape[0] // 8), ::4, ::4]
        low, high = np.percentile(sample, [1, 99]) if sample.size else (0.0, 1.0)
        return float(low + high) / 2.0, max(1.0, float(high - low))

    def apply_auto_window(self, notify: bool = True) -> None:
        center, width = self.auto_window()
        if notify:
            self.set_window(center, width)
        else:
            self.window_center, self.window_width = center, width

    # --- crosshair ----------------------------------------------------------------------
    def _clamp(self, xyz: Any) -> tuple[int, int, int]:
        if self.volume is None:
            return (0, 0, 0)
        size = self.volume.size_xyz
        return tuple(int(min(max(int(round(v)), 0), n - 1)) for v, n in zip(xyz, size))  # type: ignore[return-value]

    def set_cursor(self, xyz: Any) -> None:
        clamped = self._clamp(xyz)
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

    # --- readout ------------------------------------------------------------------------
    def value_at(self, xyz: tuple[int, int, int]) -> float | None:
        if self.volume is None:
            return None
        x, y, z = self._clamp(xyz)
        return float(self.volume.array[z, y, x])

    def label_at(self, xyz: tuple[int, int, int]) -> int | None:
        if self.label_map is None:
            return None
        x, y, z = self._clamp(xyz)
        return int(self.label_map.array[z, y, x])

    def physical_at(self, xyz: tuple[float, float, float]) -> np.ndarray | None:
        if self.volume is None:
            return None
        return self.volume.index_to_physical(xyz)
