"""Interactive AI tells the user what it does, in the real window on lung1 (issue 52 item 10, issue 53 item 5).

* Every prompt kind is drawn on the slice it was given, from the moment it is drawn (while the model still
  runs) until the object is applied or dropped: a box as its rectangle, a negative lasso as its outline in red,
  a scribble as its stroke, a click as a ring; positive green, negative red. Checked in grabbed images of the
  axial view against where the mouse went (the drag's corners, the outline's vertices, the stroke's points),
  and gone after Cancel. Screenshots: tests/artifacts/interactive_ai_prompts_drawn*.png.
* Before a prompt runs, the panel says what it costs on this computer: under the prompt kind (from the model's
  calibration record, read back here as JSON) and in the status line as the prompt is drawn; while it runs,
  the status line follows it pass by pass ("prompt 1 (box), pass 2 of 3: …"), each pass numbered in order.
* A box drawn with a click (its two corners in one voxel) is refused with a message that says why.

The model is nnInteractive's folder layout with random weights (tests/model/interactive_fixture.py), small for
CI time, calibrated here as installing it does.
"""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pytest
from interactive_window_setup import chest_crop, model_folder  # noqa: F401 (pytest fixtures)
from PySide6.QtCore import QObject, QPoint, Qt, Slot
from PySide6.QtGui import QImage

GREEN, RED = (80, 230, 80), (240, 70, 70)  # what a positive and a negative prompt are drawn in


@pytest.fixture(scope="module")
def calibrated(model_folder, tmp_path_factory):
    """The model folder with the runtime choice installing it writes (runtime.json: a pass's measured seconds)."""
    from medseg.model.interactive.calibration import calibrate
    from medseg.model.interactive.model_files import import_nninteractive

    folder = shutil.copytree(model_folder, tmp_path_factory.mktemp("calibrated") / model_folder.name)
    calibrate(import_nninteractive(folder), folder, candidates=["torch"])
    return folder


@pytest.fixture
def model_chosen(calibrated, monkeypatch):
    from medseg.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "interactive_model", str(calibrated))
    monkeypatch.setattr(SETTINGS, "interactive_runtime", "torch")


def widget_point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def drag(qtbot, view, points, modifier=Qt.KeyboardModifier.NoModifier) -> None:
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, modifier, points[0])
    for point in points[1:]:
        qtbot.mouseMove(view, point)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, modifier, points[-1])


def pixels(view) -> np.ndarray:
    """The view as it is on screen: (rows, columns, RGB)."""
    image = view.grab().toImage().convertToFormat(QImage.Format.Format_RGB888)
    width, height = image.width(), image.height()
    data = np.frombuffer(image.constBits(), np.uint8, count=image.bytesPerLine() * height)
    return data.reshape(height, image.bytesPerLine())[:, :width * 3].reshape(height, width, 3).copy()


def on_image(view, rgb: np.ndarray) -> np.ndarray:
    """The part of the grab where the slice image is (not the view's red axial frame, nor its corner text)."""
    rect = view.image_rect().toRect().adjusted(2, 2, -2, -2)
    return rgb[max(0, rect.top()):rect.bottom(), max(0, rect.left()):rect.right()]


def of_color(rgb: np.ndarray, color) -> np.ndarray:
    """Where the pixels are ``color``, give or take the smoothing of the scaled slice image (a grey CT pixel, R = G
    = B, is never near either prompt colour)."""
    return (np.abs(rgb.astype(int) - color) <= 24).all(axis=-1)


def near(rgb: np.ndarray, color, point: QPoint, reach: int) -> bool:
    """Whether a pixel of ``color`` lies within ``reach`` pixels of ``point``."""
    x, y = point.x(), point.y()
    return bool(of_color(rgb[max(0, y - reach):y + reach + 1, max(0, x - reach):x + reach + 1], color).any())


class Shown(QObject):
    """The status line's text each time the model reported a step (queued to the GUI thread, after the panel)."""

    def __init__(self, options) -> None:
        super().__init__()
        self.options, self.texts = options, []

    @Slot(object)
    def step(self, _step) -> None:
        self.texts.append(self.options.status.text())


def test_every_prompt_kind_is_drawn_its_cost_said_before_and_its_passes_while_it_runs(
        model_chosen, calibrated, chest_crop, window, driver, qtbot, artifacts_dir):
    from medseg.model.interactive.cost import duration_text

    image_path, tumour = chest_crop
    driver.open_image_file(image_path)
    doc, panel, tools = window.document, window.editing.panel, window.view.tools
    z = int(np.argmax(tumour.sum(axis=(1, 2))))
    ys, xs = np.nonzero(tumour[z])
    y, x = int(round(ys.mean())), int(round(xs.mean()))
    doc.new_label_map()
    panel.add_label("tumour")
    runner, options, view = panel.prompt_runner, panel.prompt_options, window.viewer.views["axial"]
    panel.tool_buttons["prompt"].click()
    window.view.set_cursor((x, y, z))
    voxel = max(1, round(view.image_rect().width() / doc.volume.size_xyz[0]))  # screen pixels a voxel spans

    # --- the cost, before any prompt: from the calibration record ----------------------------------------------
    recorded = json.loads((calibrated / "runtime.json").read_text())["measured"]["torch"]["seconds"]
    assert options.cost.isVisible()
    assert options.cost.text().startswith(f"A click: about {duration_text(recorded)} on this computer (1 network "
                                          f"pass of about {duration_text(recorded)}, as measured when the model was "
                                          "installed; more if the object reaches past the patch)")
    options.kind.setCurrentText("box")
    # (54 + 80 // 3) / 80 <= 1 < (55 + 80 // 3) / 80: up to 54 voxels a box runs one pass, as a click
    assert options.cost.text().startswith(f"A box up to 54 voxels, 3 cm here: about {duration_text(recorded)} on "
                                          "this computer (1 pass), as a click. Larger: it zooms out and refines")

    # --- a box dragged round the tumour: drawn at once, its cost said before it runs, then its passes ------------
    shown = Shown(options)
    runner.progress.connect(shown.step)
    while_running = {}

    def on_prompt(_box=None):
        if tools.prompt is not None and tools.prompt.pending() and "status" not in while_running:
            while_running["status"] = options.status.text()  # right after the prompt was drawn, before it runs
            while_running["rgb"] = pixels(view)

    tools.effects["prompts"].layer_changed.connect(on_prompt)
    corners = [widget_point(view, (x - 14, y - 12, z)), widget_point(view, (x + 14, y + 12, z))]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        drag(qtbot, view, [corners[0], QPoint(corners[0].x() + 9, corners[0].y() + 7), corners[1]])
    # the box fits the patch with a third around it: one pass, as calibration measured it
    assert while_running["status"] == f"prompt 1 (box): about {duration_text(recorded)} on this computer (1 pass)…"
    assert shown.texts[0] == "prompt 1 (box): preparing the model…"
    # each pass's start and end, and (when the object reached the patch's faces) the planning of the refinement
    steps = [t for t in shown.texts[1:] if not re.match(r"prompt 1 \(box\), pass \d+ done; planning the refinement", t)]
    assert len(shown.texts) - 1 - len(steps) <= 1
    starts = [re.match(r"prompt 1 \(box\), pass (\d+) of (\d+)(?: or more)?(?:: | done in )", t) for t in steps]
    assert all(starts), shown.texts
    numbers = [int(m.group(1)) for m in starts]
    assert numbers == sorted(numbers) and numbers[0] == 1  # each pass in order, its start and its end
    passes = tools.prompt.started_engine.last_result.passes
    assert numbers[-1] == passes and shown.texts[-1].startswith(f"prompt 1 (box), pass {passes} of {passes} done in ")
    assert len(steps) == 2 * passes
    # the finished slot rewrites the status line after the preview arrives (it showed "pass 4 of 4 done" once)
    qtbot.waitUntil(lambda: options.status.text().startswith("1 prompt; runtime torch; the last took "), timeout=10_000)
    assert options.status.text().endswith(f"({passes} pass{'es' if passes != 1 else ''})")

    left, top = min(c.x() for c in corners), min(c.y() for c in corners)
    right, bottom = max(c.x() for c in corners), max(c.y() for c in corners)
    for rgb in (while_running["rgb"], pixels(view)):  # drawn while the model ran, and still after
        columns = range(left + 3 * voxel, right - 3 * voxel, 2)
        rows = range(top + 3 * voxel, bottom - 3 * voxel, 2)
        assert all(near(rgb, GREEN, QPoint(c, top), voxel) and near(rgb, GREEN, QPoint(c, bottom), voxel)
                   for c in columns)
        assert all(near(rgb, GREEN, QPoint(left, r), voxel) and near(rgb, GREEN, QPoint(right, r), voxel)
                   for r in rows)
    inside = while_running["rgb"][top + 3 * voxel:bottom - 3 * voxel, left + 3 * voxel:right - 3 * voxel]
    assert not of_color(inside, GREEN).any()  # a frame, not a filled box
    assert not of_color(on_image(view, while_running["rgb"]), RED).any()

    # --- a negative lasso (shift-drag) in the box's right half, then a scribble and a click on its left ---------
    options.kind.setCurrentText("lasso")
    outline = [(x + 8, y - 6), (x + 12, y), (x + 8, y + 6), (x + 4, y), (x + 8, y - 6)]
    lasso = [widget_point(view, (px, py, z)) for px, py in outline]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        drag(qtbot, view, lasso, Qt.KeyboardModifier.ShiftModifier)
    options.kind.setCurrentText("scribble")
    stroke = [widget_point(view, (px, py, z)) for px, py in ((x - 10, y - 6), (x - 8, y), (x - 10, y + 6))]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        drag(qtbot, view, stroke)
    options.kind.setCurrentText("point")
    click = widget_point(view, (x - 3, y + 8, z))
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, click)
    assert [p.describe() for p in tools.prompt.prompts] == ["box", "negative lasso", "scribble", "point"]

    rgb = pixels(view)
    view.grab().save(str(artifacts_dir / "interactive_ai_prompts_drawn.png"))
    window.grab().save(str(artifacts_dir / "interactive_ai_prompts_drawn_window.png"))
    # the lasso's outline at its vertices (a vertex may fall just outside the voxels its filling holds)
    assert all(near(rgb, RED, vertex, 2 * voxel) for vertex in lasso)
    assert all(near(rgb, GREEN, point, voxel) for point in stroke)  # the stroke where the mouse went
    ring = [QPoint(click.x() + dx, click.y() + dy) for dx, dy in ((5, 0), (-5, 0), (0, 5), (0, -5))]
    assert all(near(rgb, GREEN, point, 1) for point in ring)  # the click's ring (5 px), its centre left clear
    assert not near(rgb, GREEN, click, 2)
    lasso_centre = widget_point(view, (x + 8, y, z))
    assert not near(rgb, RED, lasso_centre, voxel)  # an outline: the object under it stays in sight

    # --- the prompts are drawn on their slice only, and until the object is dropped --------------------------------
    window.view.set_cursor((x, y, z + 3))
    qtbot.waitUntil(lambda: view.slice_position == z + 3)
    elsewhere = pixels(view)
    assert not of_color(on_image(view, elsewhere), GREEN).any() and not of_color(on_image(view, elsewhere), RED).any()
    window.view.set_cursor((x, y, z))
    options.cancel_button.click()
    dropped = pixels(view)
    view.grab().save(str(artifacts_dir / "interactive_ai_prompts_drawn_cancelled.png"))
    assert not of_color(on_image(view, dropped), GREEN).any() and not of_color(on_image(view, dropped), RED).any()


def test_a_box_drawn_with_a_click_is_refused_with_its_reason(model_chosen, chest_crop, window, driver, qtbot):
    image_path, tumour = chest_crop
    driver.open_image_file(image_path)
    doc, panel, tools = window.document, window.editing.panel, window.view.tools
    doc.new_label_map()
    panel.add_label("tumour")
    panel.tool_buttons["prompt"].click()
    panel.prompt_options.kind.setCurrentText("box")
    view = window.viewer.views["axial"]
    z, y, x = (int(v) for v in np.rint(np.argwhere(tumour).mean(axis=0)))
    window.view.set_cursor((x, y, z))
    qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, widget_point(view, (x, y, z)))
    assert tools.prompt is None  # nothing ran: nnInteractive would have taken a 1 x 1 x 1 box
    message = window.messages.current
    assert message.level == "warning"
    assert "the box's two corners are in the same voxel (a click, not a drag), so no box was drawn" in message.text
    assert "choose AI prompt: point" in message.text
    # a drag along one row only: a line, said as such
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, widget_point(view, (x - 8, y, z)))
    qtbot.mouseMove(view, widget_point(view, (x + 8, y, z)))
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, widget_point(view, (x + 8, y, z)))
    assert tools.prompt is None
    assert "the box is one voxel high or wide (a line, not a box)" in window.messages.current.text
