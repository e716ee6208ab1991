"""The OpenGL side of the 3D view (pyqtgraph.opengl): imported only once OpenGL is known to work.

Mouse: left-drag turns the scene, middle-drag (or ctrl + left-drag) pans, the wheel zooms, a
left click without a drag picks (the pane moves the crosshair there).
"""

from __future__ import annotations

import numpy as np
import pyqtgraph.opengl as gl
from OpenGL import GL
from pyqtgraph.opengl import shaders
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QVector3D

from medseg.core.volume import Volume

CLICK_TOLERANCE_PX = 4


# A headlight: the light comes from the camera, so whichever side the user turns to is lit (pyqtgraph's
# "shaded" lights from behind the viewer's left shoulder and leaves surfaces facing the camera dark).
HEADLIGHT = shaders.ShaderProgram("medseg_headlight", [
    shaders.VertexShader("""
        uniform mat4 u_mvp;
        uniform mat3 u_normal;
        attribute vec4 a_position;
        attribute vec3 a_normal;
        attribute vec4 a_color;
        varying vec4 v_color;
        varying vec3 v_normal;
        void main() {
            v_normal = normalize(u_normal * a_normal);
            v_color = a_color;
            gl_Position = u_mvp * a_position;
        }
    """),
    shaders.FragmentShader("""
        #ifdef GL_ES
        precision mediump float;
        #endif
        varying vec4 v_color;
        varying vec3 v_normal;
        void main() {
            float facing = abs(normalize(v_normal).z);
            float highlight = pow(facing, 24.0);
            vec3 rgb = v_color.rgb * (0.3 + 0.7 * facing) + vec3(0.25 * highlight);
            gl_FragColor = vec4(rgb, v_color.a);
        }
    """),
])

OPAQUE = {GL.GL_DEPTH_TEST: True, GL.GL_BLEND: False, GL.GL_CULL_FACE: False}
# A see-through surface shows its front faces only (back faces culled), so it is one clean layer over
# the opaque surfaces drawn before it.
TRANSLUCENT = {GL.GL_DEPTH_TEST: True, GL.GL_BLEND: True, GL.GL_CULL_FACE: True,
               "glBlendFunc": (GL.GL_SRC_ALPHA, GL.GL_ONE_MINUS_SRC_ALPHA)}


def style_item(item: gl.GLMeshItem, color: tuple[int, int, int], opacity: float, visible: bool) -> None:
    item.setVisible(visible)
    translucent = opacity < 1.0
    item.setGLOptions(TRANSLUCENT if translucent else OPAQUE)
    item.setDepthValue(10 if translucent else 0)  # drawn after the opaque ones
    item.setColor(tuple(c / 255.0 for c in color) + (float(opacity),))


class _SurfaceData(gl.MeshData):
    """pyqtgraph's mesh data with the surface's own normals (from the smoothed mask's gradient),
    instead of normals averaged from the faces (slower, and faceted at the bricks' seams)."""

    def __init__(self, vertices: np.ndarray, faces: np.ndarray, normals: np.ndarray) -> None:
        super().__init__(vertexes=vertices, faces=faces)
        self._surface_normals = normals

    def vertexNormals(self, indexed=None):  # noqa: N802 - pyqtgraph's name
        if indexed is None:
            return self._surface_normals
        return super().vertexNormals(indexed)


def surface_item(surface) -> gl.GLMeshItem:
    data = _SurfaceData(surface.vertices, surface.faces, surface.normals)
    item = gl.GLMeshItem(meshdata=data, smooth=True, shader=HEADLIGHT, glOptions=OPAQUE)
    item.label_value = surface.value
    return item


def plane_outlines(volume: Volume, cursor_xyz, colors: dict[str, tuple[int, int, int]]) -> gl.GLLinePlotItem:
    """The three slice planes through the crosshair as rectangles at the image's edges (in LPS)."""
    size = np.asarray(volume.size_xyz, float)
    lo, hi = -0.5 * np.ones(3), size - 0.5
    segments, segment_colors = [], []
    for name, axis in (("sagittal", 0), ("coronal", 1), ("axial", 2)):
        u, v = [a for a in range(3) if a != axis]
        corners = []
        for a, b in ((lo[u], lo[v]), (hi[u], lo[v]), (hi[u], hi[v]), (lo[u], hi[v])):
            point = np.empty(3)
            point[axis], point[u], point[v] = cursor_xyz[axis], a, b
            corners.append(point)
        physical = volume.index_to_physical(np.array(corners))
        for i in range(4):
            segments += [physical[i], physical[(i + 1) % 4]]
        color = tuple(c / 255.0 for c in colors[name]) + (1.0,)
        segment_colors += [color] * 8
    return gl.GLLinePlotItem(pos=np.array(segments, np.float32), color=np.array(segment_colors, np.float32),
                             mode="lines", width=1.5, antialias=False, glOptions=OPAQUE)


class GLView(gl.GLViewWidget):
    clicked = Signal(QPointF)
    turning = Signal(bool)  # the mouse is moving the camera (True) / stopped (False)

    def __init__(self, parent=None) -> None:
        super().__init__(parent)
        self.setBackgroundColor((21, 21, 21))
        self.opts["fov"] = 30.0
        self._press: QPointF | None = None
        self._dragged = False
        self._wheel_stop = QTimer(self)
        self._wheel_stop.setSingleShot(True)
        self._wheel_stop.setInterval(250)
        self._wheel_stop.timeout.connect(lambda: self.turning.emit(False))

    def set_camera(self, center, distance, elevation: float, azimuth: float) -> None:
        if center is not None:
            self.opts["center"] = QVector3D(*[float(c) for c in center])
        if distance is not None:
            self.opts["distance"] = float(distance)
        self.opts["elevation"], self.opts["azimuth"] = float(elevation), float(azimuth)
        self.update()

    def ray_through(self, position: QPointF) -> tuple[np.ndarray, np.ndarray]:
        """(origin, unit direction) in LPS of the line of sight through a widget point."""
        width, height = max(1, self.width()), max(1, self.height())
        projection = self.projectionMatrix((0, 0, width, height), (0, 0, width, height))
        matrix = np.array((projection * self.viewMatrix()).data(), dtype=np.float64).reshape(4, 4).T
        inverse = np.linalg.inv(matrix)
        ndc_x, ndc_y = 2.0 * position.x() / width - 1.0, 1.0 - 2.0 * position.y() / height
        near, far = (inverse @ np.array([ndc_x, ndc_y, z, 1.0]) for z in (-1.0, 1.0))
        near, far = near[:3] / near[3], far[:3] / far[3]
        direction = far - near
        return near, direction / np.linalg.norm(direction)

    def mousePressEvent(self, event) -> None:  # noqa: N802
        self._press = event.position()
        self._dragged = False
        super().mousePressEvent(event)

    def mouseMoveEvent(self, event) -> None:  # noqa: N802
        if self._press is not None and not self._dragged \
                and (event.position() - self._press).manhattanLength() > CLICK_TOLERANCE_PX:
            self._dragged = True
            self.turning.emit(True)
        super().mouseMoveEvent(event)

    def mouseReleaseEvent(self, event) -> None:  # noqa: N802
        if event.button() == Qt.MouseButton.LeftButton and self._press is not None and not self._dragged:
            self.clicked.emit(event.position())
        if self._dragged:
            self.turning.emit(False)
        self._press, self._dragged = None, False
        super().mouseReleaseEvent(event)

    def wheelEvent(self, event) -> None:  # noqa: N802
        if not self._wheel_stop.isActive():
            self.turning.emit(True)
        self._wheel_stop.start()
        super().wheelEvent(event)
