"""The 3D view (issue #28): real OpenGL in a real X window, and the app without OpenGL.

The GL tests run ``view3d_probe.py`` as its own process under Xvfb with Qt's xcb platform and
Mesa's software renderer (llvmpipe), as on a VM or CI machine without a GPU: it opens lung1,
runs the starter model, renders the 3D pane, clicks it and paints with the brush, and
writes what it saw. The rest of the suite stays offscreen.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import QPoint
from test_real_window import _start_xvfb, _x_env  # the project's one way to start a private X server

from medseg.gui.viewer import gl_support

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Xvfb and xcb are Linux")
PROBE = Path(__file__).with_name("view3d_probe.py")


@pytest.fixture(scope="module")
def x_display():
    server, display = _start_xvfb()
    yield display
    server.terminate()
    server.wait(timeout=30)


def run_probe(display: str, ct: Path, out: Path, mode: str, tmp_path: Path, **env_extra: str) -> dict:
    env = _x_env(display, tmp_path)
    env.update(QT_QPA_PLATFORM="xcb", **env_extra)
    done = subprocess.run([sys.executable, str(PROBE), str(ct), str(out), mode], env=env, capture_output=True,
                          text=True, timeout=1500)
    assert done.returncode == 0, done.stderr[-4000:]
    return json.loads((out / "result.json").read_text())


@pytest.mark.slow
def test_segmented_chest_shows_two_lungs_picks_the_left_and_follows_a_brush_stroke(
        x_display, ct_dir, tmp_path, artifacts_dir):
    out = tmp_path / "probe"
    result = run_probe(x_display, ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd", out, "segment", tmp_path)
    for name in ("view3d_lungs.png", "view3d_lungs_hidden.png", "window_2x2_3d.png"):
        shutil.copy(out / name, artifacts_dir / f"gui_{name}")
    assert result["platform"] == "xcb" and result["gl"], result["status"]
    lungs = result["labels"]["lungs"]
    # both lungs drawn, one on each side of the image's midline; none once the label is hidden
    for half in ("lung_pixels_left_half", "lung_pixels_right_half"):
        assert result[half] > 0.01 * result["image_pixels"], result
    assert result["lung_pixels_hidden"] == 0
    # the click on the lung on the screen's right (the patient's left, anterior view) lands in the lungs,
    # left of the lungs' middle (LPS x grows towards the patient's left)
    assert result["picked_label"] == lungs
    assert result["picked_lps"][0] > result["lungs_mean_lps_x"] + 30.0
    # a drag turns the scene (no pick), drawing the coarse copies until the button is released
    turning, after = result["while_turning"], result["after_turning"]
    assert turning["azimuth_change"] != 0 and turning["fine_shown"] == 0 and turning["coarse_shown"] == 3
    assert after["fine_shown"] == 3 and after["coarse_shown"] == 0 and after["cursor_unchanged"]
    # Save 3D screenshot: a PNG of the pane with both lungs in it
    from PySide6.QtGui import QImage

    saved = QImage(str(out / "saved_3d.png"))
    assert not saved.isNull() and saved.width() > 300
    # the brush stroke (lungs over body, no bone in reach) re-meshed only the two labels it changed,
    # and of those only a few bricks around it
    assert result["stroke_values_under_brush"] == [1, 2]
    meshed, bricks = result["meshings_by_stroke"], result["bricks_per_label"]
    assert meshed[str(result["labels"]["bones"])] == 0
    for value in ("1", str(lungs)):
        assert 1 <= meshed[value] <= 12 < bricks[value]


@pytest.mark.parametrize("how, env, says", [
    ("forced off", {gl_support.NO_OPENGL_ENV: "1"}, gl_support.NO_OPENGL_ENV),
    ("no GL integration", {"QT_XCB_GL_INTEGRATION": "none"}, "no OpenGL context could be made"),
])
def test_without_opengl_the_app_works_and_the_pane_says_why(x_display, ct_dir, tmp_path, artifacts_dir,
                                                            how, env, says):
    out = tmp_path / "probe"
    result = run_probe(x_display, ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd", out, "no-gl", tmp_path, **env)
    shutil.copy(out / "window_no_gl.png", artifacts_dir / f"gui_view3d_no_gl_{how.replace(' ', '_')}.png")
    assert not result["gl"]
    assert result["message_visible"] and "3D view unavailable" in result["message"] and says in result["message"]
    assert result["slices_shown"]


def test_offscreen_window_has_the_3d_pane_in_2x2_and_details_in_a_dock(window, driver, ct_dir, monkeypatch, qtbot):
    """Qt's offscreen platform (these tests, a headless session) cannot show GL widgets, even where an
    X display would give it a context: the pane says so and the window works."""
    monkeypatch.setattr(gl_support, "_checked", None)
    driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    window.set_layout("2x2")
    view3d = window.viewer.view3d
    qtbot.waitUntil(lambda: view3d.status.text() == "3D: no OpenGL", timeout=10_000)
    assert "'offscreen' platform cannot show OpenGL widgets" in view3d.message.text()
    axial = window.viewer.views["axial"]
    corner = lambda widget: widget.mapTo(window.viewer, QPoint(0, 0))  # noqa: E731
    assert view3d.isVisible()  # the fourth pane: right of and below the axial view (top left)
    assert corner(view3d).x() > corner(axial).x() and corner(view3d).y() > corner(axial).y()
    assert not view3d.screenshot_action.isEnabled()
    assert "512 × 512 × 48 voxels" in window.details_dock.widget().widget().text()  # the study details left for a dock
    view3d.maximise_requested.emit("3d")
    assert window.viewer.layout_name == "single" and view3d.isVisible()
    assert not window.viewer.views["axial"].isVisible()
    view3d.maximise_requested.emit("3d")
    assert window.viewer.layout_name == "2x2"
    assert window.position_label.status_text().startswith("Axial slice")  # the status bar still follows a slice view


def test_a_click_ray_hits_the_ball_and_picks_a_voxel_inside(ct_dir):
    from medseg.gui.viewer.surface_pick import first_hit, voxel_behind
    from medseg.io import read_image
    from medseg.io.surface_bricks import SurfaceBricks

    image = read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    labels = np.zeros(image.shape_zyx, np.uint8)
    z, y, x = np.ogrid[: image.shape_zyx[0], : image.shape_zyx[1], : image.shape_zyx[2]]
    center_xyz = np.array([300.0, 250.0, 24.0])
    center = image.index_to_physical(center_xyz)
    radius_mm = 40.0
    points = image.index_to_physical(np.stack(np.broadcast_arrays(x, y, z), -1).reshape(-1, 3).astype(float))
    labels.reshape(-1)[np.linalg.norm(points - center, axis=1) <= radius_mm] = 5
    surfaces = SurfaceBricks(image).rebuild(labels)
    origin = center + np.array([0.0, -500.0, 10.0])  # from anterior, a little above the centre
    direction = np.array([0.0, 1.0, 0.0])
    value, point = first_hit(surfaces.values(), origin, direction)
    assert value == 5
    # where the ray enters the ball, give or take the surface's half voxel and its smoothing
    expected_y = center[1] - np.sqrt(radius_mm ** 2 - 10.0 ** 2)
    assert abs(point[1] - expected_y) < 2.0 and np.allclose(point[[0, 2]], origin[[0, 2]])
    vx, vy, vz = voxel_behind(image, labels, value, point, direction)
    assert labels[vz, vy, vx] == 5
    assert first_hit(surfaces.values(), origin, -direction) is None  # looking away: nothing


def test_label_opacity_lives_in_the_label_table(qtbot, ct_dir):
    """The 3D opacity is the label's own (kept by the sidecar and journal rows); a body label that wraps
    the others is see-through until the user says otherwise."""
    from medseg.core.labels import Label
    from medseg.edit.document import SegmentationDocument
    from medseg.gui.common.view_state import ViewState
    from medseg.gui.viewer.view3d import ENVELOPE_OPACITY, View3D
    from medseg.io import read_image

    image = read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    doc = SegmentationDocument()
    doc.set_volume(image)
    labels = np.zeros(image.shape_zyx, np.uint8)
    labels[20:30, 100:200, 100:200], labels[22:28, 120:180, 120:180] = 1, 2
    doc.set_label_map(image.with_array(labels), {1: Label(1, "body"), 2: Label(2, "lungs")})
    view = View3D(doc, ViewState(doc))
    qtbot.addWidget(view)
    assert view.opacity(1) == ENVELOPE_OPACITY and view.opacity(2) == 1.0
    doc.set_label_opacity(2, 0.4)
    doc.set_label_opacity(1, 1.0)
    assert view.opacity(2) == pytest.approx(0.4) and view.opacity(1) == 1.0
    row = doc.labels[2].as_dict()
    assert Label.from_dict(row).opacity == pytest.approx(0.4)
    assert Label.from_dict({k: v for k, v in row.items() if k != "opacity"}).opacity is None  # older rows
