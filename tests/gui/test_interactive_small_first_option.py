"""The Interactive AI tool's *Small first patch* check box in the real window, on the lung1 tumour crop: shown with
the tool's options and off by default; checked, a click runs the half patch first, and the status line says what
ran. On this checkpoint (nnInteractive's layout, random weights, small: tests/gui/interactive_window_setup.py) the
object reaches the half patch's faces, so the prompt falls back to the exact path: the preview must be
nnInteractive 2.6.0's own object for the same click (the oracle). The mode itself, kept and fallen back:
tests/model/test_interactive_small_first.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from interactive_window_setup import Oracle, chest_crop, model_folder  # noqa: F401 (pytest fixtures)
from PySide6.QtCore import QPoint, Qt


@pytest.fixture
def model_chosen(model_folder, monkeypatch):
    from medseg.settings import SETTINGS

    monkeypatch.setattr(SETTINGS, "interactive_model", str(model_folder))
    monkeypatch.setattr(SETTINGS, "interactive_runtime", "torch")  # nnInteractive's runtime: the oracle's arithmetic
    monkeypatch.setattr(SETTINGS, "interactive_mode", "exact")  # the app's default, restored after the test
    return SETTINGS


def tick(qtbot, box) -> None:
    """A click on the check box's square (the widget spans the row; its middle is empty space)."""
    qtbot.mouseClick(box, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(8, box.height() // 2))


def test_small_first_check_box_runs_the_half_patch_first(model_chosen, model_folder, chest_crop, window, driver, qtbot,
                                                         artifacts_dir):
    image_path, tumour = chest_crop
    driver.open_image_file(image_path)
    doc, panel, tools = window.document, window.editing.panel, window.view.tools
    z, y, x = (int(round(c.mean())) for c in np.nonzero(tumour))
    doc.new_label_map()
    panel.add_label("tumour")
    label = window.view.active_label
    before = doc.label_map.array.copy()
    runner, options, view = panel.prompt_runner, panel.prompt_options, window.viewer.views["axial"]
    qtbot.mouseClick(panel.tool_buttons["prompt"], Qt.MouseButton.LeftButton)
    assert options.small_first.isVisible() and not options.small_first.isChecked()  # off by default
    tick(qtbot, options.small_first)
    assert model_chosen.interactive_mode == "small-first"

    window.view.set_cursor((x, y, z))
    p = view.index_to_widget((x, y, z))
    with qtbot.waitSignal(runner.preview_shown, timeout=120_000):
        qtbot.mouseClick(view, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier, QPoint(round(p.x()), round(p.y())))
    qtbot.waitUntil(lambda: not runner.busy(), timeout=10_000)
    # the status line is rewritten by the runner's finished slot, which may run after busy() turned false
    qtbot.waitUntil(lambda: "last prompt: small patch, then exact" in options.status.text(), timeout=10_000)
    prompts = list(tools.prompt.prompts)
    expected = Oracle(model_folder, doc.volume.array).follow(prompts)
    assert 0.001 < expected.mean() < 0.9, "the object is empty or everything: the comparison would say nothing"
    preview = tools.prompt.preview
    shown = before.copy()
    shown[tuple(slice(lo, hi) for lo, hi in zip(*preview.box))] = preview.labels
    assert np.array_equal(shown, np.where(expected, np.uint16(label), before).astype(before.dtype))
    options.grab().save(str(artifacts_dir / "interactive_small_first_option.png"))
    window.grab().save(str(artifacts_dir / "interactive_small_first_window.png"))
    tick(qtbot, options.small_first)
    assert model_chosen.interactive_mode == "exact"
