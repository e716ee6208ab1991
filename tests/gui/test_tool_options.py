"""The Edit panel shows the active tool's options only (issue #42.15: it showed every tool's options at once,
a long scroll where the brush's radius sat beside the trace tolerance and the scissors' slab).

Oracle: the operation catalogue. A tool's options are the settings its operation declares, plus the ones a user
needs with it that the catalogue does not declare for it (grow from seeds paints its seeds with the brush's radius;
the scissors' operation and slab). Driven by the real tool buttons and keys on a real chest CT with its nodule."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QApplication, QWidget

from medseg.core.labels import Label
from medseg.edit.operations import CATALOGUE, tools
from medseg.io import read_image

# what a user needs with a tool besides its catalogue settings (object names of the widgets)
ALSO = {"grow-from-seeds": {"radius_mm", "sphere", "seed_kind", "existing_seeds"},
        "scissors": {"scissors_operation", "scissors_slab", "slab_mm"}}


@pytest.fixture
def chest(driver, ct_dir, window):
    volume = driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd")
    window.document.set_label_map(volume.with_array(np.array(nodule.array, dtype=np.uint8)), {1: Label(1, "nodule")})
    return volume


def _tool_option_names() -> set[str]:
    """Every option that belongs to a mouse tool (the button operations' settings stay: they act on the label)."""
    buttons = {p.name for op in CATALOGUE.values() if op.gesture is None for p in op.settings}
    declared = {p.name for tool in tools().values() if tool.operation is not None for p in tool.operation.settings}
    return (declared - buttons) | set().union(*ALSO.values())


def _expected(name: str) -> set[str]:
    operation = tools()[name].operation
    return ({p.name for p in operation.settings} if operation is not None else set()) | ALSO.get(name, set())


def test_each_tool_shows_its_own_options_and_no_other_tools(window, chest, qtbot, artifacts_dir):
    panel = window.editing.panel
    box = panel.tool_options
    everything = _tool_option_names()
    assert {"radius_mm", "fill_3d", "trace_tolerance_hu", "confidence_k", "seed_locality", "slab_mm"} <= everything
    heights = {}
    for name, tool in tools().items():
        qtbot.mouseClick(panel.tool_buttons[name], Qt.MouseButton.LeftButton)
        assert window.view.tools.active == name
        QApplication.processEvents()
        shown = {n for n in everything if panel.findChild(QWidget, n).isVisible()}
        assert shown == _expected(name) & everything, name
        assert box.title() == f"{tool.title} ({tool.shortcut})"
        # the Interactive AI tool's options (the prompt kind, Apply, Cancel) are no catalogue settings
        assert panel.prompt_options.isVisible() == (name == "prompt")
        assert box.no_options.isVisible() == (not shown and name != "prompt")
        # the paint rules and the operations on the active label are there whatever the tool
        for always in ("hu_low", "hu_high", "margin_mm", "island_ml", "smooth_mm"):
            assert panel.findChild(QWidget, always).isVisible(), (name, always)
        assert panel.operation_buttons["smooth"].isVisible()
        heights[name] = panel.height()
        if name in ("navigate", "brush", "grow-from-seeds", "scissors"):
            panel.grab().save(str(artifacts_dir / f"tool_options_{name}.png"))
    # the panel is as long as the tool's options (it was as long as all of them, whatever the tool)
    assert heights["navigate"] < heights["brush"] < heights["grow-from-seeds"]

    # the key chooses the tool, and with it the options (the options follow the tool, not the button)
    view = window.viewer.views["axial"]
    view.setFocus()
    qtbot.waitUntil(view.hasFocus)
    qtbot.keyClick(view, Qt.Key.Key_L)
    assert window.view.tools.active == "level-trace"
    assert panel.options.widgets["trace_tolerance_hu"].isVisible() and not panel.radius.isVisible()
    # an option shown drives the tool: the trace tolerance typed in its box is the one the trace uses
    panel.options.widgets["trace_tolerance_hu"].setFocus()
    panel.options.widgets["trace_tolerance_hu"].selectAll()
    qtbot.keyClicks(panel.options.widgets["trace_tolerance_hu"], "120")
    qtbot.keyClick(panel.options.widgets["trace_tolerance_hu"], Qt.Key.Key_Tab)
    assert window.view.tools.trace_tolerance_hu.value == 120.0
