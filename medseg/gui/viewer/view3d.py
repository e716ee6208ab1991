"""The 3D view: each visible label as a smoothed surface, in patient space beside the slice views.

Library: pyqtgraph.opengl (pyqtgraph is already here; it adds PyOpenGL, a 3.1 MB wheel).
Measured under Xvfb with Mesa llvmpipe, rotating a 512k-triangle surface of lung1's body in an
800×700 window, 20 frames, on the shared 2-core machine (load ~21), wall p50 / process CPU p50
per frame: pyqtgraph.opengl 583 ms / 128 ms, VTK 9.7.1 701 ms / 143 ms with multisampling off
(2075-2297 ms with its defaults), vispy 0.17 1104 ms / 232 ms. VTK's wheel is 134 MB (566 MB
installed; the libraries a surface viewer loads alone come to 282 MB), vispy's 2.2 MB plus
freetype-py and hsluv (2.9 MB). Without a usable context pyqtgraph raises Python errors, which
:mod:`medseg.gui.viewer.gl_support` avoids by making a context first; VTK logs errors and draws nothing.
llvmpipe turns around about a million triangles a second here, so the surfaces are decimated to a
budget (``medseg.io.surface_bricks``) and drawn from coarser copies while the mouse turns them.

The surfaces come from :class:`~medseg.io.surface_bricks.SurfaceBricks` (the STL export's
meshing) in a worker thread: a new label map is meshed whole, an edit only where it changed.
Coordinates are LPS millimetres; at reset the camera looks from anterior with superior up,
so the patient's left is on the screen's right, as in the axial and coronal views.
"""

from __future__ import annotations

import logging
import math
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
from PySide6.QtCore import QBuffer, QIODevice, QPointF, Qt, QTimer, Signal
from PySide6.QtGui import QAction, QImage
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QMenu,
    QSizePolicy,
    QStackedLayout,
    QToolButton,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.view_state import ViewState
from medseg.gui.viewer.gl_support import gl_support
from medseg.gui.viewer.surface_jobs import SurfaceMesher

log = logging.getLogger(__name__)

# camera (elevation, azimuth) in pyqtgraph's terms for each standard view: the camera sits on that side
STANDARD_VIEWS = {"A": (0.0, -90.0), "P": (0.0, 90.0), "L": (0.0, 0.0), "R": (0.0, 180.0),
                  "S": (90.0, -90.0), "I": (-90.0, -90.0)}
# Labels that wrap the others (TotalSegmentator's and the starter's body): see-through by default
ENVELOPES = {"body", "skin", "body_trunc", "body_extremities", "torso"}
ENVELOPE_OPACITY = 0.25
HEADER_BUTTON_WIDTH = 24
SETTLE_MS = 250  # quiet time after a colour/visibility change before the full surfaces are drawn again
LARGE_SCENE = 120_000  # triangles: above this a change is drawn from the coarse copies first
PLANE_COLORS = {"axial": (240, 80, 80), "coronal": (110, 200, 90), "sagittal": (235, 200, 60)}  # as the views' frames


class View3D(QWidget):
    """The 3D pane: a header (views, menu) over the GL view, or a message when OpenGL is missing."""

    maximise_requested = Signal(str)
    surfaces_updated = Signal(object)  # the label values whose surfaces were just replaced
    picked = Signal(int)  # the label value of the structure a click picked
    failed = Signal(object)  # a MedsegError the user must see (a screenshot that could not be written)

    def __init__(self, document: SegmentationDocument, view: ViewState, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.document = document
        self.view = view
        self.name = "3d"
        self.gl_view: Any = None  # the _GLView once built (lazily: the first time the pane is shown)
        self.scene: Any = None  # the SurfaceScene that draws every surface (built with the GL view)
        self._turning = False
        # After a change of colour or visibility a large scene is drawn from its coarse copies first and in
        # full once the changes stop (a click per group while searching, a run of toggles): the event loop
        # never waits for a full software-GL frame of 117 surfaces per click.
        self._settling = False
        self._settle_timer = QTimer(self)
        self._settle_timer.setSingleShot(True)
        self._settle_timer.setInterval(SETTLE_MS)
        self._settle_timer.timeout.connect(self._settled)
        self.surfaces: dict[int, Any] = {}  # label value -> Surface (what is drawn)
        self.coarse_surfaces: dict[int, Any] = {}  # label value -> its coarse copy (drawn while turning)
        self.picked_value = 0  # the label of the surface the last pick met
        self.show_planes = True
        self._plane_item: Any = None
        self.mesher = SurfaceMesher(document, self)
        self.mesher.meshed.connect(self._on_meshed)
        self.mesher.failed.connect(self._on_mesh_failed)

        self.status = QLabel("3D", self)
        self.mesher.started.connect(lambda: self.status.setText("3D · meshing…"))
        self.status.setStyleSheet("QLabel { color: #d0d0d0; }")
        self.status.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        header = QHBoxLayout()
        header.setContentsMargins(4, 2, 4, 2)
        header.setSpacing(2)
        header.addWidget(self.status, 1)
        self.view_buttons: dict[str, QToolButton] = {}
        for letter in STANDARD_VIEWS:
            button = QToolButton(self)
            button.setText(letter)
            button.setFixedWidth(HEADER_BUTTON_WIDTH)  # a narrow pane keeps all six (the window's minimum width)
            button.setToolTip(f"Look from the patient's {_SIDE_NAMES[letter]}")
            button.clicked.connect(lambda _=False, v=letter: self.set_standard_view(v))
            header.addWidget(button)
            self.view_buttons[letter] = button
        self.menu = QMenu(self)
        self.reset_action = self.menu.addAction("Reset view", self.reset_camera)
        self.planes_action = QAction("Show slice planes", self, checkable=True, checked=True)
        self.planes_action.toggled.connect(self.set_show_planes)
        self.menu.addAction(self.planes_action)
        self.opacity_menu = self.menu.addMenu("Label opacity")
        self.opacity_menu.aboutToShow.connect(self._fill_opacity_menu)
        self.menu.addSeparator()
        self.screenshot_action = self.menu.addAction("Save 3D screenshot…", self.save_screenshot_dialog)
        self.menu.addAction("Maximise / restore", lambda: self.maximise_requested.emit(self.name))
        menu_button = QToolButton(self)
        menu_button.setText("☰")
        menu_button.setFixedWidth(HEADER_BUTTON_WIDTH)
        menu_button.setToolTip("3D view menu")
        menu_button.setPopupMode(QToolButton.ToolButtonPopupMode.InstantPopup)
        menu_button.setMenu(self.menu)
        header.addWidget(menu_button)
        self.menu_button = menu_button

        self.message = QLabel(self)
        self.message.setAlignment(Qt.AlignmentFlag.AlignCenter)
        self.message.setWordWrap(True)
        self.message.setStyleSheet("QLabel { background: #151515; color: #d0d0d0; padding: 12px; }")
        self.message.setText("3D view")
        self._stack = QStackedLayout()
        self._stack.addWidget(self.message)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(0)
        layout.addLayout(header)
        layout.addLayout(self._stack, 1)
        self.setAttribute(Qt.WidgetAttribute.WA_StyledBackground, True)
        self.setStyleSheet("View3D { background: #151515; } QToolButton { color: #e0e0e0; background: #2c2c2c; "
                           "border: 1px solid #4a4a4a; padding: 1px 5px; } QToolButton:disabled { color: #666; }")

        document.volume_changed.connect(self._on_label_map_changed)
        document.label_map_changed.connect(self._on_label_map_changed)
        document.label_map_edited.connect(self.mesher.label_map_edited)
        document.labels_changed.connect(self._on_labels_changed)
        view.cursor_changed.connect(self._update_planes)

    # --- building the GL view (on first show) ----------------------------------------------
    def showEvent(self, event) -> None:  # noqa: N802
        super().showEvent(event)
        if self.gl_view is None and not getattr(self, "_gl_failed", False):
            QTimer.singleShot(0, self.ensure_gl)

    def ensure_gl(self) -> bool:
        """Build the GL view if OpenGL works here; otherwise show why not. True when it is there."""
        if self.gl_view is not None:
            return True
        if getattr(self, "_gl_failed", False):
            return False
        support = gl_support()
        if not support.available:
            return self._unavailable(support.problem or "")
        try:
            from medseg.gui.viewer.view3d_gl import GLView

            self.gl_view = GLView(self)
        except Exception as error:  # a broken GL stack must not take the app down
            log.exception("3D view could not be built")
            return self._unavailable(f"{type(error).__name__}: {error}")
        from medseg.gui.viewer.view3d_gl import SurfaceScene

        self.scene = SurfaceScene()
        self.gl_view.addItem(self.scene)
        self.gl_view.clicked.connect(self._on_clicked)
        self.gl_view.turning.connect(self._set_turning)
        self._stack.addWidget(self.gl_view)
        self._stack.setCurrentWidget(self.gl_view)
        self.status.setText(f"3D · {support.renderer}")
        self.mesher.enabled = True
        self._on_label_map_changed()
        return True

    def _unavailable(self, problem: str) -> bool:
        self._gl_failed = True
        self.message.setText(f"3D view unavailable: {problem}\n\nThe slice views, editing and saving work as "
                             "usual; File ▸ Save segmentation as… writes STL/OBJ surfaces for another 3D viewer.")
        self.status.setText("3D: no OpenGL")
        for button in self.view_buttons.values():
            button.setEnabled(False)
        self.screenshot_action.setEnabled(False)
        return False

    # --- document events -------------------------------------------------------------------
    def _on_label_map_changed(self) -> None:
        if self.gl_view is not None:
            self.reset_camera()
            self._update_planes()
        self.mesher.label_map_changed()

    def _on_labels_changed(self) -> None:
        """Colour, visibility, opacity: no re-meshing, no upload, only the scene's table of looks (hiding a
        group of 26 ribs changes 26 entries). A label new to the table is met by its edit."""
        if self.gl_view is None:
            return
        if sum(s.n_triangles for s in self.surfaces.values()) > LARGE_SCENE and self.coarse_surfaces:
            self._settling = True
            self._settle_timer.start()
        if self._restyle():
            self._show_status()

    def _settled(self) -> None:
        self._settling = False
        self._restyle()

    # --- meshing (medseg.gui.viewer.surface_jobs) -----------------------------------------------------
    @property
    def surface_bricks(self):
        """The full surfaces' SurfaceBricks (tests count its meshings)."""
        return self.mesher.fine

    @property
    def busy(self) -> bool:
        return self.mesher.busy

    def wait_idle(self, timeout_ms: int = 120_000) -> bool:
        return self.mesher.wait_idle(timeout_ms)

    def shutdown(self) -> None:
        self.mesher.shutdown()

    def _on_meshed(self, kind: str, surfaces: dict, coarse: dict) -> None:
        if self.gl_view is None:
            return
        if kind == "all":
            self._clear_items()
        for value, surface in surfaces.items():
            self._set_surface(value, surface, coarse.get(value))
        self._show_status()
        self.gl_view.update()
        self.surfaces_updated.emit(sorted(surfaces))

    def _on_mesh_failed(self, error: BaseException) -> None:
        self.status.setText(f"3D · meshing failed: {error}")

    # --- the scene ------------------------------------------------------------------------------
    def _clear_items(self) -> None:
        self.scene.clear()
        self.surfaces.clear()
        self.coarse_surfaces.clear()

    def _set_surface(self, value: int, surface, coarse) -> None:
        self.surfaces.pop(value, None)
        self.coarse_surfaces.pop(value, None)
        if surface is None or surface.n_triangles == 0:
            self.scene.remove(value)
            return
        self.surfaces[value] = surface
        if coarse is not None and coarse.n_triangles:
            self.coarse_surfaces[value] = coarse
        self.scene.set_surface(value, surface, self.coarse_surfaces.get(value))
        self._style(value)

    def _style(self, value: int) -> bool:
        """Give the scene the label's colour, opacity and visibility; False when nothing changed."""
        entry = self.document.labels.get(value)
        color = entry.color if entry is not None else (200, 200, 200)
        return self.scene.set_look(value, color, self.opacity(value), entry is None or entry.visible)

    def _restyle(self) -> bool:
        changed = [value for value in self.surfaces if self._style(value)]
        coarse = self._turning or self._settling
        if changed or coarse != self.scene.coarse:
            self.scene.set_coarse(coarse)
            self.gl_view.update()
        return bool(changed)

    def drawn(self) -> tuple[list[int], list[int]]:
        """(labels the next frame draws in full, labels it draws from their coarse copies)."""
        return self.scene.drawn() if self.scene is not None else ([], [])

    def _set_turning(self, turning: bool) -> None:
        """While the mouse turns, pans or zooms the scene, draw the coarse copies (a software renderer
        keeps up with them); the full surfaces come back when it stops."""
        if turning != self._turning:
            self._turning = turning
            self._restyle()

    def label_shown(self, value: int) -> bool:
        entry = self.document.labels.get(value)
        return value in self.surfaces and (entry is None or entry.visible)

    def opacity(self, value: int) -> float:
        """The label's opacity in 3D: its own, else see-through for a label that wraps the others (body)."""
        entry = self.document.labels.get(value)
        if entry is None:
            return 1.0
        if entry.opacity is not None:
            return entry.opacity
        return ENVELOPE_OPACITY if entry.name.strip().lower().replace(" ", "_") in ENVELOPES else 1.0

    def _show_status(self) -> None:
        shown = [s for v, s in self.surfaces.items() if self.label_shown(v)]
        triangles = sum(s.n_triangles for s in shown)
        tip = ""
        if self.document.label_map is None:
            text = "3D · no segmentation yet: Segment, draw or open one"
        else:
            text = f"3D · {len(shown)} surface{'s' if len(shown) != 1 else ''}"
            simplified = self.simplified()
            if simplified:  # the user sees the decimation in words, not only as blunter shapes
                from medseg.io.surface_bricks import TRIANGLE_BUDGET

                text += f", {len(simplified)} simplified"  # before the count: a narrow pane cuts the end
                tip = (f"{len(simplified)} of {len(self.surfaces)} surfaces are sampled coarser than the voxels, to "
                       f"keep the scene within {TRIANGLE_BUDGET // 1000}k triangles (what a software renderer "
                       "turns smoothly): small details are smoothed away here. File ▸ Save segmentation as… "
                       "STL/OBJ writes every surface at full detail.")
            text += f", {triangles / 1000:.0f}k triangles"
        self.status.setText(text)
        self.status.setToolTip(tip)

    def simplified(self) -> list[int]:
        """The labels whose surface is sampled coarser than the voxels (the budget decimated it)."""
        volume = self.document.volume
        if volume is None:
            return []
        finest = min(volume.spacing_mm)
        return sorted(v for v, s in self.surfaces.items() if s.sample_mm > finest * 1.01)

    def _fill_opacity_menu(self) -> None:
        self.opacity_menu.clear()
        for value, entry in self.document.labels.items():
            sub = self.opacity_menu.addMenu(f"{entry.name} ({round(self.opacity(value) * 100)} %)")
            for percent in (100, 75, 50, 25):
                sub.addAction(f"{percent} %", partial(self.document.set_label_opacity, value, percent / 100))

    # --- camera ------------------------------------------------------------------------------------
    def reset_camera(self) -> None:
        """Anterior view, the whole image in sight."""
        volume = self.document.volume
        if self.gl_view is None or volume is None:
            return
        corners = np.array([[i, j, k] for i in (0, 1) for j in (0, 1) for k in (0, 1)], float)
        corners = volume.index_to_physical(corners * (np.asarray(volume.size_xyz) - 1))
        center = corners.mean(axis=0)
        radius = float(np.linalg.norm(corners - center, axis=1).max())
        fov = self.gl_view.opts["fov"]
        self.gl_view.set_camera(center, radius / math.tan(math.radians(fov) / 2) * 1.05, *STANDARD_VIEWS["A"])

    def set_standard_view(self, letter: str) -> None:
        if self.gl_view is None:
            return
        elevation, azimuth = STANDARD_VIEWS[letter]
        self.gl_view.set_camera(None, None, elevation, azimuth)

    # --- slice planes ------------------------------------------------------------------------------
    def set_show_planes(self, show: bool) -> None:
        self.show_planes = bool(show)
        self._update_planes()

    def _update_planes(self) -> None:
        if self.gl_view is None:
            return
        from medseg.gui.viewer.view3d_gl import plane_outlines

        volume = self.document.volume
        if self._plane_item is not None:
            self.gl_view.removeItem(self._plane_item)
            self._plane_item = None
        if self.show_planes and volume is not None:
            self._plane_item = plane_outlines(volume, self.view.cursor_xyz, PLANE_COLORS)
            self.gl_view.addItem(self._plane_item)
        self.gl_view.update()

    # --- picking -----------------------------------------------------------------------------------
    def _on_clicked(self, position: QPointF) -> None:
        xyz = self.pick(position)
        if xyz is None:
            return
        self.view.set_cursor(xyz)
        entry = self.document.labels.get(self.picked_value)
        if entry is not None:
            self.status.setText(f"3D · {entry.name}")  # picking names the structure
            self.picked.emit(self.picked_value)

    def pick(self, position: QPointF) -> tuple[int, int, int] | None:
        """The voxel under a widget point of the GL view: the nearest visible surface, stepped into its label."""
        from medseg.gui.viewer.surface_pick import first_hit, voxel_behind

        volume, label_map = self.document.volume, self.document.label_map
        if self.gl_view is None or volume is None:
            return None
        origin, direction = self.gl_view.ray_through(position)
        shown = [s for v, s in self.surfaces.items() if self.label_shown(v)]
        # what the user sees through a see-through surface (the body) is what they click
        solid = [s for s in shown if self.opacity(s.value) >= 0.5]
        hit = first_hit(solid, origin, direction) or first_hit(shown, origin, direction)
        if hit is None:
            return None
        value, point = hit
        self.picked_value = int(value)  # the surface met first: what the click names
        labels = label_map.array if label_map is not None else None
        return voxel_behind(volume, labels, value, point, direction)

    # --- images ------------------------------------------------------------------------------------
    def render_image(self) -> QImage | None:
        """The 3D view as an image (what the screen shows), or None without OpenGL."""
        if self.gl_view is None:
            return None
        return self.gl_view.grabFramebuffer()

    def save_screenshot(self, path: str | Path) -> Path:
        from medseg.errors import SaveError
        from medseg.io.atomic import atomic_write_bytes

        image = self.render_image()
        if image is None:
            raise SaveError("the 3D view has no picture: OpenGL is not available", path=Path(path))
        buffer = QBuffer()
        buffer.open(QIODevice.OpenModeFlag.WriteOnly)
        # PySide6 6.x stubs type the format as bytes, but its QImage.save takes a str there (bytes: ValueError)
        image.save(buffer, "PNG")  # type: ignore[call-overload]
        path = Path(path)
        atomic_write_bytes(path, bytes(buffer.data().data()))
        return path

    def save_screenshot_dialog(self) -> None:
        path, _ = QFileDialog.getSaveFileName(self, "Save 3D screenshot", str(Path.home() / "medseg-3d.png"),
                                              "PNG images (*.png)")
        if not path:
            return
        if not path.lower().endswith(".png"):
            path += ".png"
        from medseg.errors import MedsegError

        try:
            self.save_screenshot(path)
        except MedsegError as error:
            self.failed.emit(error)
            return
        self.status.setText(f"3D · saved {Path(path).name}")


_SIDE_NAMES = {"A": "front (anterior)", "P": "back (posterior)", "L": "left", "R": "right",
               "S": "head end (superior)", "I": "feet end (inferior)"}
