"""Slice → pixels through lookup tables: window/level and label colours.

The hot path of scrolling. An int16 slice (a view into the volume, never a copy of it)
indexes a 65,536-entry grey table; with an overlay, ``label << 8 | grey`` indexes a
256 × 256 table of pre-blended colours, so opacity, visibility and colour cost nothing
per pixel. Output is 0xAARRGGBB words that a QImage (Format_RGB32) wraps without a copy.
"""

from __future__ import annotations

import numpy as np
from PySide6.QtGui import QImage

# int16 value for each uint16 bit pattern: the grey table is indexed by slice.view(uint16).
_HU_OF_INDEX = np.arange(65536, dtype=np.uint32).astype(np.uint16).view(np.int16).astype(np.float32)
_OPAQUE = np.uint32(0xFF000000)


class SliceRenderer:
    """Holds the lookup tables; ``render`` turns a slice (and labels) into RGB32 words."""

    def __init__(self) -> None:
        self.grey_of_value = np.zeros(65536, dtype=np.uint8)
        self.rgb_of_value = np.zeros(65536, dtype=np.uint32)
        self.label_colors = np.zeros((256, 3), dtype=np.uint8)
        self.label_visible = np.zeros(256, dtype=bool)
        self.opacity = 0.5
        self.blended = np.zeros(256 * 256, dtype=np.uint32)
        self._blend_stale = True  # rebuilt on first use: window drags without labels stay cheap
        self.set_window(40.0, 400.0)

    def set_window(self, center: float, width: float) -> None:
        low = center - width / 2.0
        grey = np.clip((_HU_OF_INDEX - low) * (255.0 / max(width, 1e-6)), 0, 255)
        self.grey_of_value = np.rint(grey).astype(np.uint8)
        g = self.grey_of_value.astype(np.uint32)
        self.rgb_of_value = _OPAQUE | (g << 16) | (g << 8) | g
        self._blend_stale = True

    def set_labels(self, colors: np.ndarray, visible: np.ndarray, opacity: float) -> None:
        """colors: (256, 3) uint8 per label value; visible: (256,) bool; opacity 0..1."""
        self.label_colors = np.asarray(colors, dtype=np.uint8).reshape(256, 3)
        self.label_visible = np.asarray(visible, dtype=bool).reshape(256).copy()
        self.label_visible[0] = False  # background is never coloured
        self.opacity = float(opacity)
        self._blend_stale = True

    def _rebuild_blend(self) -> None:
        grey = np.arange(256, dtype=np.float32)[None, :, None]  # (1, grey, 1)
        color = self.label_colors.astype(np.float32)[:, None, :]  # (label, 1, 3)
        alpha = np.where(self.label_visible, self.opacity, 0.0).astype(np.float32)[:, None, None]
        rgb = np.rint(grey * (1.0 - alpha) + color * alpha).astype(np.uint32)  # (label, grey, 3)
        words = _OPAQUE | (rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2]
        self.blended = np.ascontiguousarray(words.reshape(-1))
        self._blend_stale = False

    def render(self, values: np.ndarray, labels: np.ndarray | None = None, outline: bool = False) -> np.ndarray:
        """RGB32 words, shape of ``values``. ``values`` int16, ``labels`` uint8 (same shape)."""
        codes = values.view(np.uint16) if values.dtype == np.int16 else values.astype(np.int16).view(np.uint16)
        if labels is None:
            return self.rgb_of_value.take(codes)
        if self._blend_stale:
            self._rebuild_blend()
        if outline:
            labels = outline_of(labels)
        index = labels.astype(np.uint16)
        index <<= 8
        index |= self.grey_of_value.take(codes)
        return self.blended.take(index)


def outline_of(labels: np.ndarray) -> np.ndarray:
    """Keep only label pixels with a 4-neighbour of another value (a one-pixel contour)."""
    edge = np.zeros(labels.shape, dtype=bool)
    differs_v = labels[1:, :] != labels[:-1, :]
    differs_h = labels[:, 1:] != labels[:, :-1]
    edge[1:, :] |= differs_v
    edge[:-1, :] |= differs_v
    edge[:, 1:] |= differs_h
    edge[:, :-1] |= differs_h
    edge[0, :] = edge[-1, :] = True
    edge[:, 0] = edge[:, -1] = True
    return np.where(edge, labels, 0).astype(np.uint8)


def qimage_of(words: np.ndarray) -> QImage:
    """Wrap (rows, columns) uint32 words as a QImage without copying.

    The caller must keep ``words`` alive as long as the image is used.
    """
    words = np.ascontiguousarray(words)
    rows, columns = words.shape
    return QImage(words.data, columns, rows, columns * 4, QImage.Format.Format_RGB32)
