"""Can this session draw with OpenGL? Asked once, before the 3D view imports PyOpenGL.

A remote desktop without GL, a VM without a driver, Qt's offscreen platform without an X
server: there the 3D pane says why it is empty and everything else works. The check makes
a real context on an offscreen surface (what the 3D view's QOpenGLWidget will need), so a
failing driver is found here, not in the middle of a paint. ``MEDSEG_NO_OPENGL=1`` turns the
3D view off on purpose (a broken driver that crashes instead of failing; the tests).

Qt's xcb platform falls back from GLX to EGL when the X server has no GLX (Xvnc, Xvfb
started without it). PyOpenGL must then use EGL too, or every call of pyqtgraph's GL items
fails with "no valid context": ``PYOPENGL_PLATFORM`` is set to match the context Qt made.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os
import sys
from dataclasses import dataclass

from PySide6.QtGui import QGuiApplication, QOffscreenSurface, QOpenGLContext

log = logging.getLogger(__name__)

NO_OPENGL_ENV = "MEDSEG_NO_OPENGL"
WIDGETLESS_PLATFORMS = {"offscreen", "minimal", "vnc", "linuxfb"}
_checked: "GLSupport | None" = None


@dataclass(frozen=True)
class GLSupport:
    problem: str | None  # None: OpenGL works
    renderer: str = ""
    version: str = ""

    @property
    def available(self) -> bool:
        return self.problem is None


def gl_support() -> GLSupport:
    """Whether the 3D view can draw here (checked once per process; needs a QGuiApplication)."""
    global _checked
    if _checked is None:
        _checked = _check()
        if _checked.problem:
            log.info("3D view off: %s", _checked.problem)
        else:
            log.info("3D view: OpenGL %s on %s", _checked.version, _checked.renderer)
    return _checked


def _check() -> GLSupport:
    if os.environ.get(NO_OPENGL_ENV, "").strip() not in ("", "0"):
        return GLSupport(f"OpenGL is turned off ({NO_OPENGL_ENV} is set).")
    app = QGuiApplication.instance()
    if not isinstance(app, QGuiApplication):  # none, or a QCoreApplication (no windows, no GL)
        return GLSupport("no Qt application")
    if app.platformName() in WIDGETLESS_PLATFORMS:
        # a GL context may exist (offscreen + an X display gives one), but QOpenGLWidget has no
        # framebuffer to compose into there ("QOpenGLWidget: No fbo, cannot render")
        return GLSupport(f"Qt's '{app.platformName()}' platform cannot show OpenGL widgets.")
    context = QOpenGLContext()
    if not context.create():
        return GLSupport(f"no OpenGL context could be made on this display (Qt platform '{app.platformName()}').")
    surface = QOffscreenSurface()
    surface.setFormat(context.format())
    surface.create()
    try:
        if not surface.isValid() or not context.makeCurrent(surface):
            return GLSupport("an OpenGL context was made but could not be used.")
        version = f"{context.format().majorVersion()}.{context.format().minorVersion()}"
        if context.format().majorVersion() < 2:
            return GLSupport(f"OpenGL {version} is too old (2.0 or newer is needed).", version=version)
        if sys.platform.startswith("linux") and "OpenGL" not in sys.modules:
            os.environ.setdefault("PYOPENGL_PLATFORM", "egl" if _egl_is_current() else "glx")
        try:
            from OpenGL import GL

            renderer = GL.glGetString(GL.GL_RENDERER)
        except Exception as error:  # noqa: BLE001 - PyOpenGL's own errors, a missing library: all mean "no 3D"
            return GLSupport(f"PyOpenGL cannot draw here: {type(error).__name__}: {error}", version=version)
        renderer = renderer.decode(errors="replace") if isinstance(renderer, bytes) else str(renderer or "")
        return GLSupport(None, renderer, version)
    finally:
        context.doneCurrent()
        surface.destroy()


def _egl_is_current() -> bool:
    """True when the context current on this thread is an EGL one (Qt fell back from GLX)."""
    name = ctypes.util.find_library("EGL") or "libEGL.so.1"
    try:
        egl = ctypes.CDLL(name)
    except OSError:
        return False
    egl.eglGetCurrentContext.restype = ctypes.c_void_p
    return bool(egl.eglGetCurrentContext())
