"""Every key of the window is bound once, and the tool and preset keys work wherever the focus is except where
text is being typed (issue 42, items 7 and 8): O was both "Show label overlay" and Lasso and did neither; after
renaming a label B did not select the brush; after Apply the focus fell into the "Trace ±" box and a preset
digit changed it. Real widgets, real key events, on lung1's real chest CT."""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtGui import QAction, QKeySequence, QShortcut
from PySide6.QtWidgets import QAbstractButton, QApplication, QLineEdit
from test_grow_gui import paint_seeds

from medseg.core.labels import Label
from medseg.edit.operations import tools
from medseg.gui.viewer.slice_view import VIEW_KEYS
from medseg.io import read_image

KEYS = {"B": Qt.Key.Key_B, "E": Qt.Key.Key_E, "F": Qt.Key.Key_F, "K": Qt.Key.Key_K, "G": Qt.Key.Key_G,
        "L": Qt.Key.Key_L, "C": Qt.Key.Key_C, "X": Qt.Key.Key_X, "O": Qt.Key.Key_O, "N": Qt.Key.Key_N,
        "S": Qt.Key.Key_S, "I": Qt.Key.Key_I}


def _bindings(window) -> dict[str, list[str]]:
    """Every key sequence the window reacts to, with what it is bound to: actions (menus, tools, presets),
    buttons' own shortcuts, QShortcuts, and the keys the slice views handle themselves."""
    bound: dict[str, list[str]] = defaultdict(list)
    for action in window.findChildren(QAction):
        for sequence in action.shortcuts():
            bound[sequence.toString()].append(f"action {action.text()!r}")
    for button in window.findChildren(QAbstractButton):
        if not button.shortcut().isEmpty():
            bound[button.shortcut().toString()].append(f"button {button.text()!r}")
    for shortcut in window.findChildren(QShortcut):
        bound[shortcut.key().toString()].append(f"shortcut {shortcut.objectName()!r}")
    for key in VIEW_KEYS:
        bound[QKeySequence(key).toString()].append("the slice views")
    return bound


@pytest.fixture
def chest(driver, ct_dir, qtbot, window):
    volume = driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd")
    window.document.set_label_map(volume.with_array(np.array(nodule.array, dtype=np.uint8)), {1: Label(1, "nodule")})
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)  # shortcuts reach the active window only
    return volume


def _press(qtbot, key) -> None:
    """A key typed wherever the focus is now."""
    qtbot.keyClick(QApplication.focusWidget(), key)


def test_every_key_in_the_window_is_bound_once_and_does_what_it_says(window, chest, qtbot):
    bound = _bindings(window)
    twice = {key: what for key, what in bound.items() if len(what) > 1}
    assert not twice, twice
    panel = window.editing.panel
    assert {name: action.shortcut().toString() for name, action in panel.tool_actions.items()} == \
        {name: tool.shortcut for name, tool in tools().items()}  # generated from the catalogue
    assert window.overlay_action.shortcut().toString() == "S"  # ITK-SNAP's key; O is the Lasso's
    view = window.viewer.views["axial"]
    view.setFocus()
    for name, tool in tools().items():
        _press(qtbot, KEYS[tool.shortcut])
        assert window.view.tools.active == name, tool.shortcut
        assert [n for n, button in panel.tool_buttons.items() if button.isChecked()] == [name]  # one lit button
    assert window.view.overlay_visible  # O selected the lasso and left the overlay alone
    _press(qtbot, KEYS["S"])
    assert not window.view.overlay_visible and not window.overlay_panel.show_box.isChecked()
    _press(qtbot, KEYS["S"])
    assert window.view.overlay_visible


def test_tool_and_preset_keys_work_with_the_focus_in_the_side_panel(window, chest, qtbot, artifacts_dir):
    tools_now = window.view.tools
    panel, table = window.editing.panel, window.overlay_panel.table
    # rename the label in the table: click its name, F2 (or a double-click), type, Enter
    window.side_scroll.ensureWidgetVisible(table)
    cell = table.visualRect(table.model().index(0, 0)).center()  # the first label's name
    qtbot.mouseClick(table.viewport(), Qt.MouseButton.LeftButton, pos=cell)
    qtbot.keyClick(table, Qt.Key.Key_F2)
    qtbot.waitUntil(lambda: isinstance(QApplication.focusWidget(), QLineEdit))
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, "tumour")  # letters that are tool keys (O, M…) go into the name being typed
    assert tools_now.active == "navigate"
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: window.document.labels[1].name == "tumour")  # the delegate commits on its next turn
    qtbot.waitUntil(lambda: QApplication.focusWidget() is table)
    _press(qtbot, KEYS["B"])
    assert tools_now.active == "brush"

    # a number box that has the focus types digits, but a letter is still a tool key
    radius = panel.radius
    qtbot.mouseClick(radius, Qt.MouseButton.LeftButton)
    assert QApplication.focusWidget() is radius
    _press(qtbot, KEYS["E"])
    assert tools_now.active == "erase" and tools_now.radius_mm.value == 5.0
    preset = window.view.window_preset
    radius.selectAll()
    _press(qtbot, Qt.Key.Key_7)
    assert tools_now.radius_mm.value == 7.0 and window.view.window_preset == preset  # typed, not a preset

    # a list box and a check box: digits are presets, letters tools
    panel.label_box.setFocus()
    _press(qtbot, Qt.Key.Key_2)
    assert window.view.window_preset == "Lung" and (window.view.window_center, window.view.window_width) == \
        window.view.presets["Lung"]
    panel.sphere.setFocus()
    _press(qtbot, KEYS["F"])
    assert tools_now.active == "fill" and not panel.sphere.isChecked()
    window.grab().save(str(artifacts_dir / "tool_keys_side_panel_focus.png"))


def test_after_apply_the_keys_belong_to_the_view_again(window, chest, qtbot, artifacts_dir):
    doc, panel = window.document, window.editing.panel
    options, runner = panel.options, panel.grow_runner
    nodule = doc.label_map.array == 1
    centre = tuple(int(v) for v in np.rint(np.argwhere(nodule).mean(axis=0))[::-1])  # (x, y, z)
    panel.add_label("grown")
    panel.tool_buttons["grow-from-seeds"].click()
    with qtbot.waitSignal(runner.preview_shown, timeout=60_000):
        paint_seeds(qtbot, window, centre, (centre[2],), "structure")
        paint_seeds(qtbot, window, centre, (centre[2],), "background")
    qtbot.waitUntil(lambda: not runner.busy() and not window.view.tools.grow.pending(), timeout=60_000)
    depth = doc.history.depth
    tolerance = window.view.tools.trace_tolerance_hu.value
    qtbot.mouseClick(options.buttons["seeds", "apply"], Qt.MouseButton.LeftButton)  # the click gives the button the focus
    assert doc.history.depth == depth + 1 and not options.buttons["seeds", "apply"].isEnabled()
    assert QApplication.focusWidget() is window.viewer.views[window.viewer.active_view]
    _press(qtbot, Qt.Key.Key_3)
    assert window.view.window_preset == "Bone"
    assert window.view.tools.trace_tolerance_hu.value == tolerance  # the "Trace ±" box got nothing
    _press(qtbot, KEYS["B"])
    assert window.view.tools.active == "brush"
    window.grab().save(str(artifacts_dir / "tool_keys_after_apply.png"))
