"""Interactive AI in the real window: a scribble and a lasso drawn with the mouse on the axial view of lung1.

tests/gui/test_interactive_gui.py covers the click, negative click, box, Apply, Undo and Cancel; here the
two freehand kinds, chosen in the Edit panel's AI prompt row: a positive scribble dragged across the tumour,
then a negative lasso drawn round part of the object on the next slice. After each prompt the preview must be
what nnInteractive 2.6.0's own session makes of the same prompts (the masks read back from the tool's session,
so both get the voxels the mouse drew), on the same checkpoint: nnInteractive's folder layout with random
weights (tests/model/interactive_fixture.py), a small network on a small crop for CI time.
"""

from __future__ import annotations

import numpy as np
import pytest
from interactive_window_setup import Oracle, chest_crop, model_folder  # noqa: F401 (pytest fixtures)
from PySide6.QtCore import QPoint, Qt


@pytest.fixture
def model_chosen(model_folder, monkeypatch):
    from medseg.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "interactive_model", str(model_folder))  # a model folder chosen as it is
    monkeypatch.setattr(SETTINGS, "interactive_runtime", "torch")  # nnInteractive's runtime: the oracle's arithmetic


def widget_point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def drag(qtbot, view, points: list[QPoint], modifier=Qt.KeyboardModifier.NoModifier) -> None:
    qtbot.mousePress(view, Qt.MouseButton.LeftButton, modifier, points[0])
    for point in points[1:]:
        qtbot.mouseMove(view, point)
    qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, modifier, points[-1])


def test_scribble_then_negative_lasso_preview_nninteractives_object(model_chosen, model_folder, chest_crop, window,
                                                                     driver, qtbot, artifacts_dir):
    image_path, tumour = chest_crop
    driver.open_image_file(image_path)
    doc, panel, tools = window.document, window.editing.panel, window.view.tools
    z = int(np.argmax(tumour.sum(axis=(1, 2))))  # the slice where the tumour is largest
    ys, xs = np.nonzero(tumour[z])
    y, x = int(round(ys.mean())), int(round(xs.mean()))
    doc.new_label_map()
    panel.add_label("tumour")
    label = window.view.active_label
    before = doc.label_map.array.copy()
    runner, options, view = panel.prompt_runner, panel.prompt_options, window.viewer.views["axial"]
    panel.tool_buttons["prompt"].click()
    window.view.set_cursor((x, y, z))

    # --- a scribble dragged across the tumour, left to right with a bend -----------------------------------------
    options.kind.setCurrentText("scribble")
    stroke = [(x - 6, y - 2), (x - 3, y), (x, y + 1), (x + 3, y), (x + 6, y - 2)]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        drag(qtbot, view, [widget_point(view, (px, py, z)) for px, py in stroke])
    prompts = list(tools.prompt.prompts)
    assert [p.describe() for p in prompts] == ["scribble"]
    drawn = np.argwhere(prompts[0].mask) + prompts[0].origin
    assert set(drawn[:, 0]) == {z} and len(drawn) >= 12  # one slice, the whole stroke
    oracle = Oracle(model_folder, doc.volume.array)
    first = oracle.follow(prompts)
    assert 0.001 < first.mean() < 0.9, "the object is empty or everything: the comparison would say nothing"
    assert len(np.unique(np.nonzero(first)[0])) > 1  # 3D from a stroke on one slice
    preview = tools.prompt.preview
    shown = before.copy()
    shown[tuple(slice(lo, hi) for lo, hi in zip(*preview.box))] = preview.labels
    assert np.array_equal(shown, np.where(first, np.uint16(label), before).astype(before.dtype))

    # --- a negative lasso (shift-drag), a 13-voxel diamond on the object right of the stroke, on the next slice -----
    options.kind.setCurrentText("lasso")
    on_slice = np.argwhere(first[z + 1])
    right = on_slice[on_slice[:, 1] > x + 4]
    assert len(right) > 20, "no object right of the stroke"
    r, c = (int(v) for v in np.median(right, axis=0))
    outline = [(c, r - 6), (c + 6, r), (c, r + 6), (c - 6, r), (c, r - 6)]  # small: no zoom-out for the lasso
    window.view.set_cursor((x, y, z + 1))  # the axial view on the next slice
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        drag(qtbot, view, [widget_point(view, (px, py, z + 1)) for px, py in outline], Qt.KeyboardModifier.ShiftModifier)
    prompts = list(tools.prompt.prompts)
    assert [p.describe() for p in prompts] == ["scribble", "negative lasso"]
    filled = np.argwhere(prompts[1].mask) + prompts[1].origin
    assert set(filled[:, 0]) == {z + 1} and len(filled) > len(outline) * 4  # filled, not just the outline
    second = oracle.follow(prompts)
    assert not np.array_equal(second, first)  # (random weights: what a negative prompt does is the weights' say)
    preview = tools.prompt.preview
    shown = before.copy()
    shown[tuple(slice(lo, hi) for lo, hi in zip(*preview.box))] = preview.labels
    assert np.array_equal(shown, np.where(second, np.uint16(label), before).astype(before.dtype))
    window.viewer.views["axial"].grab().save(str(artifacts_dir / "interactive_ai_scribble_lasso.png"))
    window.grab().save(str(artifacts_dir / "interactive_ai_scribble_lasso_window.png"))
    assert np.array_equal(doc.label_map.array, before)  # a preview only: nothing written before Apply
