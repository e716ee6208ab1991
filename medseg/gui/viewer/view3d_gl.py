"""The OpenGL side of the 3D view (pyqtgraph.opengl): imported only once OpenGL is known to work.

Mouse: left-drag turns the scene, middle-drag (or ctrl + left-drag) pans, the wheel zooms, a
left click without a drag picks (the pane moves the crosshair there).
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass

import numpy as np
import pyqtgraph.opengl as gl
from OpenGL import GL
from OpenGL.raw.GL.VERSION import GL_1_1, GL_1_5, GL_2_0
from pyqtgraph.opengl import shaders
from pyqtgraph.opengl.GLGraphicsItem import GLGraphicsItem
from PySide6.QtCore import QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QOpenGLContext, QVector3D

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


@dataclass(eq=False)
class _Mesh:
    """One level of one label's surface: its arrays until the GL has them, then its buffers."""

    vertices: np.ndarray | None  # (N, 6) float32: position and normal of each vertex, interleaved
    faces: np.ndarray | None
    triangles: int
    buffers: tuple[int, int] | None = None  # vertices, indices (GL buffer names)

    @classmethod
    def of(cls, surface) -> "_Mesh | None":
        if surface is None or not surface.n_triangles:
            return None
        vertices = np.hstack([surface.vertices, surface.normals]).astype(np.float32)
        return cls(vertices, np.ascontiguousarray(surface.faces, np.uint32), int(surface.n_triangles))


class SurfaceScene(GLGraphicsItem):
    """Every label's surface in one GL item: a buffer set per label and level (full, coarse), uploaded once
    when meshed, drawn with one shader set-up per frame and a colour and a draw call per shown label.

    Why one item: pyqtgraph draws each GLMeshItem with its own state set-up, attribute look-ups and
    matrices (about 25 GL calls through PyOpenGL, 117 or 234 items a frame), and hiding a group restyled
    26 to 234 items. Here colour, opacity and visibility are a table read while drawing: a change
    uploads nothing and meshes nothing. What remains of a software frame is llvmpipe's work on the
    triangles (about 0.25 µs of CPU each here; merging every coarse copy into one buffer and two draw
    calls was tried and gave the same frame time), so the coarse copies' budget sets the turning rate.
    Translucent labels (the body) are drawn after the opaque ones, blended, front faces only (back faces
    culled), so a see-through surface is one clean layer over the opaque ones.
    """

    def __init__(self) -> None:
        super().__init__()
        self._meshes: dict[int, tuple[_Mesh | None, _Mesh | None]] = {}  # value -> (full, coarse)
        self._looks: dict[int, tuple[tuple[float, float, float, float], bool]] = {}  # value -> (rgba, shown)
        self._unused: list[int] = []  # buffers of replaced surfaces, deleted at the next paint (context current)
        self._to_upload: list[_Mesh] = []  # surfaces new since the last paint, uploaded by it
        self.coarse = False
        self.uploads = 0  # surfaces (a label's full or coarse level) uploaded to the GL; a look change uploads none
        self.setGLOptions(OPAQUE)

    # --- what is drawn -----------------------------------------------------------------------
    def set_surface(self, value: int, full, coarse) -> None:
        """Replace the label's surfaces (None or empty: it has none)."""
        self.remove(value)
        meshes = (_Mesh.of(full), _Mesh.of(coarse))
        if meshes[0] is not None:
            self._meshes[value] = meshes
            self._to_upload.extend(m for m in meshes if m is not None)  # both levels at the next paint
        self.update()

    def remove(self, value: int) -> None:
        for mesh in self._meshes.pop(value, (None, None)):
            if mesh is not None and mesh.buffers is not None:
                self._unused.extend(mesh.buffers)
            elif mesh is not None:
                self._to_upload = [m for m in self._to_upload if m is not mesh]
        self._looks.pop(value, None)

    def clear(self) -> None:
        for value in list(self._meshes):
            self.remove(value)
        self.update()

    def set_look(self, value: int, color: tuple[int, int, int], opacity: float, shown: bool) -> bool:
        """The label's colour, opacity and visibility; False when that is what it had."""
        look = (tuple(c / 255.0 for c in color) + (float(opacity),), bool(shown))
        if self._looks.get(value) == look:
            return False
        self._looks[value] = look  # type: ignore[assignment]
        self.update()
        return True

    def set_coarse(self, coarse: bool) -> None:
        if coarse != self.coarse:
            self.coarse = coarse
            self.update()

    def drawn(self) -> tuple[list[int], list[int]]:
        """(labels the next frame draws in full, labels it draws from their coarse copies)."""
        full: list[int] = []
        coarse: list[int] = []
        for value, meshes in self._meshes.items():
            if self._looks.get(value, (None, True))[1]:
                (coarse if self.coarse and meshes[1] is not None else full).append(value)
        return full, coarse

    def triangles(self, level: int = 0) -> int:
        """Triangles held in full (``level`` 0) or in the coarse copies (1), shown or not."""
        return sum(mesh.triangles for mesh in (m[level] for m in self._meshes.values()) if mesh is not None)

    # --- drawing -----------------------------------------------------------------------------------
    def paint(self) -> None:
        if self._unused:
            GL.glDeleteBuffers(len(self._unused), np.array(self._unused, np.uint32))
            self._unused.clear()
        for mesh in self._to_upload:  # the coarse copies too: the first turn or toggle uploads nothing
            self._upload(mesh)
        self._to_upload.clear()
        full, coarse = self.drawn()
        if not full and not coarse:
            return
        self.setupGLState()
        context = QOpenGLContext.currentContext()
        program = HEADLIGHT.program(es2_compat=context.hasExtension(b"GL_ARB_ES2_compatibility"))
        position, normal, color = (GL.glGetAttribLocation(program, name) for name in ("a_position", "a_normal", "a_color"))
        mvp = np.array(self.mvpMatrix().data(), dtype=np.float32)
        normal_matrix = np.array(self.modelViewMatrix().normalMatrix().data(), dtype=np.float32)
        levels = [(value, 0) for value in full] + [(value, 1) for value in coarse]
        # PyOpenGL's wrapped calls check and convert their arguments: the per-label calls go to the
        # driver's functions directly
        bind, pointer, attribute, draw = GL_1_5.glBindBuffer, GL_2_0.glVertexAttribPointer, \
            GL_2_0.glVertexAttrib4f, GL_1_1.glDrawElements
        normal_offset = ctypes.c_void_p(12)
        with HEADLIGHT:
            GL.glUniformMatrix4fv(GL.glGetUniformLocation(program, "u_mvp"), 1, False, mvp)
            GL.glUniformMatrix3fv(GL.glGetUniformLocation(program, "u_normal"), 1, False, normal_matrix)
            GL.glEnableVertexAttribArray(position)
            GL.glEnableVertexAttribArray(normal)
            for translucent in (False, True):
                if translucent:
                    GL.glEnable(GL.GL_BLEND)
                    GL.glBlendFunc(GL.GL_SRC_ALPHA, GL.GL_ONE_MINUS_SRC_ALPHA)
                    GL.glEnable(GL.GL_CULL_FACE)
                for value, level in levels:
                    rgba = self._looks.get(value, ((0.8, 0.8, 0.8, 1.0), True))[0]
                    if (rgba[3] < 1.0) != translucent:
                        continue
                    shown = self._meshes[value][level]
                    assert shown is not None and shown.buffers is not None
                    vertices, faces = shown.buffers
                    bind(GL.GL_ARRAY_BUFFER, vertices)
                    pointer(position, 3, GL.GL_FLOAT, GL.GL_FALSE, 24, None)
                    pointer(normal, 3, GL.GL_FLOAT, GL.GL_FALSE, 24, normal_offset)
                    attribute(color, *rgba)
                    bind(GL.GL_ELEMENT_ARRAY_BUFFER, faces)
                    draw(GL.GL_TRIANGLES, 3 * shown.triangles, GL.GL_UNSIGNED_INT, None)
            GL.glDisable(GL.GL_BLEND)
            GL.glDisable(GL.GL_CULL_FACE)
            GL.glDisableVertexAttribArray(position)
            GL.glDisableVertexAttribArray(normal)
            GL.glBindBuffer(GL.GL_ARRAY_BUFFER, 0)
            GL.glBindBuffer(GL.GL_ELEMENT_ARRAY_BUFFER, 0)

    def _upload(self, mesh: _Mesh) -> None:
        names = GL.glGenBuffers(2)
        for target, name, data in ((GL.GL_ARRAY_BUFFER, names[0], mesh.vertices),
                                   (GL.GL_ELEMENT_ARRAY_BUFFER, names[1], mesh.faces)):
            GL.glBindBuffer(target, name)
            GL.glBufferData(target, data.nbytes, data, GL.GL_STATIC_DRAW)  # type: ignore[union-attr]
        mesh.buffers = (int(names[0]), int(names[1]))
        mesh.vertices = mesh.faces = None  # the GL holds them now
        self.uploads += 1


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
