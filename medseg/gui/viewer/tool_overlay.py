"""Draws what the tools show over a slice (:mod:`medseg.edit.effects`): each effect says what, as a few Qt-free
primitives in voxel indices; this module turns them into pixels. The slice view asks every effect (in its
drawing order) and calls these; it never asks which tool is active.

Three layers, as a user reads them: what is painted into the slice image (seeds, a traced region's edge), voxels
drawn unsmoothed over it (a prompt's scribble or lasso: one voxel wide stays crisp), and lines and marks at
screen resolution (a prompt's points and boxes, an outline being drawn).
"""

from __future__ import annotations

import numpy as np
from PySide6.QtCore import QRectF
from PySide6.QtGui import QColor, QImage, QPainter, QPen

from medseg.edit.effects.base import Circle, ClosedLine, CrispMask, Rectangle, RegionEdge, SeedPaint
from medseg.gui.viewer.slice_render import outline_of


def _pen(pen) -> QPen:
    rgba, width = pen
    return QPen(QColor(*rgba), width)


def paint_words(words: np.ndarray, paints, axes, seed_words: np.ndarray) -> np.ndarray:
    """The rendered slice (ARGB words, screen orientation) with the effects' paints over it, opaque."""
    for paint in paints:
        if isinstance(paint, SeedPaint):
            seeds = axes.orient(paint.plane)
            words = np.where(seeds != 0, seed_words.take(seeds), words)
        elif isinstance(paint, RegionEdge):
            edge = outline_of(axes.orient(paint.plane).astype(np.uint8))
            words = np.where(edge != 0, np.uint32(paint.argb), words)
        else:  # pragma: no cover - a new primitive needs its drawing here
            raise TypeError(f"no drawing for {type(paint).__name__}")
    return words


def crisp_image(masks: list[CrispMask], axes) -> QImage | None:
    """The masks as one image of the slice's size, transparent elsewhere (None: none on this slice)."""
    words = None
    for mask in masks:
        drawn = axes.orient(mask.plane)
        if mask.edge:
            drawn = outline_of(drawn.astype(np.uint8)) != 0
        if words is None:
            words = np.zeros(drawn.shape, np.uint32)
        words[drawn] = np.uint32(mask.argb)
    if words is None:
        return None
    rows, columns = words.shape
    return QImage(np.ascontiguousarray(words).data, columns, rows, columns * 4, QImage.Format.Format_ARGB32).copy()


def draw_crisp(painter: QPainter, image: QImage | None, rect: QRectF) -> None:
    if image is not None:
        painter.save()
        painter.setRenderHint(QPainter.RenderHint.SmoothPixmapTransform, False)
        painter.drawImage(rect, image)
        painter.restore()


def draw_shapes(painter: QPainter, shapes, to_widget) -> None:
    """``to_widget(zyx)``: a voxel position's point on the widget."""
    for shape in shapes:
        if isinstance(shape, Circle):
            centre = to_widget(shape.centre_zyx)
            for pen in shape.pens:
                painter.setPen(_pen(pen))
                painter.drawEllipse(centre, shape.radius_px, shape.radius_px)
        elif isinstance(shape, Rectangle):
            rect = QRectF(to_widget(shape.lo_zyx), to_widget(shape.hi_zyx)).normalized()
            for pen in shape.pens:
                painter.setPen(_pen(pen))
                painter.drawRect(rect)
        elif isinstance(shape, ClosedLine):
            points = [to_widget(p) for p in shape.points_zyx]
            for pen in shape.pens:
                painter.setPen(_pen(pen))
                painter.drawPolyline(points + [points[0]])
        else:  # pragma: no cover - a new primitive needs its drawing here
            raise TypeError(f"no drawing for {type(shape).__name__}")
