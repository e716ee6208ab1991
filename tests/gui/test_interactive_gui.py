"""The Interactive AI tool end to end in the real window, on lung1: the nnInteractive model imported from its
folder in Segmentation ▸ Models… (its CC BY-NC-SA licence shown, nothing installed until it is accepted), then
a click in the tumour, a negative shift-click and a box drawn on the axial view, each previewed once the worker
finishes; Apply writes one undoable, journalled step that never touches a locked label; Undo restores exactly;
Cancel leaves the segmentation as it was.

The oracle is nnInteractive 2.6.0's own inference session, run here on the same image and the same prompts
(read back from the tool's session, so the mouse's sub-voxel positions are the ones both get). The model is
nnInteractive's exact folder layout with random weights (tests/model/interactive_fixture.py), small for CI time.
"""

from __future__ import annotations

import numpy as np
import pytest
from interactive_window_setup import Oracle, chest_crop, model_folder  # noqa: F401 (pytest fixtures)
from PySide6.QtCore import QPoint, Qt
from PySide6.QtWidgets import QScrollArea

MODEL_ID = "nninteractive/v1.0"



@pytest.fixture
def models_home(tmp_path, monkeypatch):
    from medseg.settings import SETTINGS

    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    monkeypatch.setattr(SETTINGS, "interactive_model", MODEL_ID)
    monkeypatch.setattr(SETTINGS, "interactive_runtime", "torch")  # nnInteractive's runtime: the oracle's arithmetic
    return tmp_path / "models"


def widget_point(view, xyz) -> QPoint:
    p = view.index_to_widget(xyz)
    return QPoint(round(p.x()), round(p.y()))


def expected_map(before, obj, label, locked):
    return np.where(obj & ~locked, np.uint16(label), before).astype(before.dtype)


def previewed(tools, before) -> np.ndarray:
    """The label map Apply would write, from the preview the views draw."""
    preview = tools.prompt.preview
    result = before.copy()
    if preview is not None:
        result[tuple(slice(lo, hi) for lo, hi in zip(*preview.box))] = preview.labels
    return result


def test_import_accept_licence_click_box_apply_undo_cancel(models_home, model_folder, chest_crop, window, driver,
                                                           qtbot, artifacts_dir):
    from medseg.catalogue.folders import find_installed
    from medseg.edit.delta import Delta
    from medseg.edit.journal import recover

    # --- the model: imported from its folder, the licence shown first -----------------------------------------
    image_path, tumour = chest_crop
    driver.open_image_file(image_path)
    window.segmenting.open_models_dialog()
    dialog = window.segmenting.models_dialog
    dialog.import_folder(model_folder)
    qtbot.waitUntil(lambda: dialog.licence_box is not None and dialog.licence_box.isVisible(), timeout=60_000)
    assert "CC BY-NC-SA 4.0" in dialog.licence_box.terms.toPlainText()
    assert find_installed(MODEL_ID) is None  # nothing installed before the licence is accepted
    with qtbot.waitSignal(dialog.installed, timeout=120_000) as installed:
        dialog.licence_box.accept_button.click()
    assert installed.args == [MODEL_ID]
    assert find_installed(MODEL_ID).licence["accepted_at"]
    assert dialog.use_button.text() == "Use for Interactive AI"
    dialog.close()

    # --- a locked label inside the tumour's neighbourhood, then the label the object goes into -------------------
    doc, panel, tools = window.document, window.editing.panel, window.view.tools
    assert doc.volume.shape_zyx == tumour.shape  # medseg's array is SimpleITK's (z, y, x) here
    z, y, x = (int(v) for v in np.rint(np.argwhere(tumour).mean(axis=0)))
    doc.new_label_map()
    panel.add_label("vessel")
    locked_value = window.view.active_label
    vessel = doc.label_map.array.copy()
    vessel[z - 2:z + 3, y - 3:y + 4, x + 2:x + 6] = locked_value
    doc.apply(Delta.from_blocks((0, 0, 0), doc.label_map.array, vessel), "vessel")  # journalled, as a stroke is
    doc.set_label_locked(locked_value, True)
    locked = doc.label_map.array == locked_value
    panel.add_label("tumour")
    label = window.view.active_label
    before = doc.label_map.array.copy()
    depth = doc.history.depth

    oracle = Oracle(model_folder, doc.volume.array)
    runner, options, view = panel.prompt_runner, panel.prompt_options, window.viewer.views["axial"]
    panel.tool_buttons["prompt"].click()
    window.view.set_cursor((x, y, z))

    # --- a click in the tumour: a 3D object previewed, nothing written yet --------------------------------------
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, widget_point(view, (x, y, z)))
    assert np.array_equal(doc.label_map.array, before)
    first = oracle.follow(tools.prompt.prompts)
    assert [p.describe() for p in tools.prompt.prompts] == ["point"]
    assert 0.001 < first.mean() < 0.9, "the object is empty or everything: the comparison would say nothing"
    assert len(np.unique(np.nonzero(first)[0])) > 1  # 3D: more slices than the one clicked
    assert np.array_equal(previewed(tools, before), expected_map(before, first, label, locked))

    # --- a negative shift-click on the object, away from the first click ----------------------------------------
    on_slice = np.argwhere(first[z])
    far = on_slice[np.argmax(np.abs(on_slice - [y, x]).sum(axis=1))]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.ShiftModifier,
                         widget_point(view, (int(far[1]), int(far[0]), z)))
    assert [p.describe() for p in tools.prompt.prompts] == ["point", "negative point"]
    second = oracle.follow(tools.prompt.prompts)
    assert not np.array_equal(second, first)
    assert np.array_equal(previewed(tools, before), expected_map(before, second, label, locked))

    # --- a box dragged around the tumour on the same slice -----------------------------------------------------
    options.kind.setCurrentText("box")
    ys, xs = np.nonzero(tumour[z])
    corners = [widget_point(view, (xs.min() - 3, ys.min() - 3, z)), widget_point(view, (xs.max() + 3, ys.max() + 3, z))]
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mousePress(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, corners[0])
        qtbot.mouseMove(view, (corners[0] + corners[1]) / 2)
        qtbot.mouseMove(view, corners[1])
        qtbot.mouseRelease(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, corners[1])
    assert [p.describe() for p in tools.prompt.prompts] == ["point", "negative point", "box"]
    third = oracle.follow(tools.prompt.prompts)
    expected = expected_map(before, third, label, locked)
    assert np.array_equal(previewed(tools, before), expected)
    scroll = options.parentWidget()
    while scroll is not None and not isinstance(scroll, QScrollArea):
        scroll = scroll.parentWidget()
    scroll.ensureWidgetVisible(options)  # the side panel scrolled to the AI prompt row, as a user sees it
    qtbot.waitUntil(lambda: "3 prompts" in options.status.text())
    window.grab().save(str(artifacts_dir / "interactive_ai_preview.png"))

    # --- Apply: one undoable step, journalled, the locked label untouched ---------------------------------------
    options.apply_button.click()
    assert np.array_equal(doc.label_map.array, expected)
    assert np.array_equal(doc.label_map.array[locked], before[locked])
    assert doc.history.depth == depth + 1
    assert np.array_equal(recover(doc.journal.folder)[1].array, doc.label_map.array)  # the journal replays it

    # --- Undo restores exactly; a new object then Cancel leaves the segmentation as it was ----------------------
    window.editing.undo_action.trigger()
    assert np.array_equal(doc.label_map.array, before)
    options.kind.setCurrentText("point")
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, widget_point(view, (x, y, z)))
    assert (previewed(tools, before) == label).any()
    options.cancel_button.click()
    assert tools.prompt is None
    assert np.array_equal(doc.label_map.array, before)
    assert doc.history.depth == depth
