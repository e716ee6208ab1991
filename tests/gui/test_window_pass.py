"""A clinician's day without surprises (issue #25): each rough edge a new user met, driven through
the real widgets and checked by what the user sees."""

from __future__ import annotations

import numpy as np
import pytest
from PySide6.QtCore import QPoint, QPointF, Qt
from PySide6.QtGui import QWheelEvent
from PySide6.QtWidgets import QApplication, QMenu

from medseg.edit.label_map import build_label_table


def _wheel(widget, steps: int = -1, position: QPointF | None = None) -> None:
    """A real wheel event (one notch = 120) at ``position`` (default: the widget's centre)."""
    local = position if position is not None else QPointF(widget.width() / 2, widget.height() / 2)
    event = QWheelEvent(local, QPointF(widget.mapToGlobal(local.toPoint())), QPoint(0, 0), QPoint(0, 120 * steps),
                        Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier, Qt.ScrollPhase.NoScrollPhase, False)
    QApplication.sendEvent(widget, event)


def _three_labels(window) -> None:
    """A segmentation of three labels on the open image (as Segment would leave it)."""
    doc = window.document
    array = np.zeros(doc.volume.shape_zyx, dtype=np.uint8)
    z = array.shape[0] // 2
    array[z, 10:20, 10:20] = 1
    array[z, 30:40, 30:40] = 2
    array[z, 50:60, 50:60] = 3
    doc.set_label_map(doc.volume.with_array(array), build_label_table([1, 2, 3], {1: "body", 2: "lungs", 3: "bones"}),
                      description="test labels")


def test_result_messages_stay_readable_beside_the_readout(driver, window, ct_dir, qtbot, artifacts_dir):
    """#25.1: a save/segment/open result is not painted over the slice/HU readout, and it stays."""
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    readout = window.position_label.text()
    assert "HU" in readout
    window.notify("tilt_seg.dcm: label values renumbered 3 → 2 (DICOM numbers segments 1..N)", "success")
    qtbot.wait(50)
    message, position = window.messages.geometry(), window.position_label.geometry()
    assert window.messages.isVisible() and window.position_label.isVisible()
    assert not message.intersects(position), (message, position)
    assert window.position_label.text() == readout  # the readout is untouched
    # Hovering a menu item used to paint its status tip over the readout: now nothing covers it.
    file_menu = window.menuBar().findChildren(QMenu)[0]
    file_menu.popup(window.mapToGlobal(QPoint(10, 10)))
    qtbot.waitUntil(file_menu.isVisible)
    file_menu.setActiveAction(window.open_files_action)
    qtbot.wait(50)
    assert window.statusBar().currentMessage() == ""
    file_menu.close()
    qtbot.wait(9000)  # longer than the old 8 s status-bar message lived
    assert "renumbered 3 → 2" in window.messages.text()
    assert "renumbered 3 → 2" in window.messages.label.toolTip()  # the whole text, even when elided
    window.grab().save(str(artifacts_dir / "window_pass_message_area.png"))
    window.messages.dismiss_button.click()
    assert window.messages.text() == ""
    assert any("renumbered" in m.text for m in window.messages.history)  # History keeps it


def test_wheel_over_the_side_panel_scrolls_it_and_changes_no_value(driver, window, ct_dir, qtbot):
    """#25.2: scrolling the side panel over the active-label box scrolls; it never picks another label."""
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    _three_labels(window)
    window.resize(1400, 600)  # short enough that the side panel scrolls
    qtbot.wait(50)
    label_box = window.editing.panel.label_box
    label_box.setCurrentIndex(0)
    before = label_box.currentText()
    assert before.startswith("1")
    scroll_bar = window.side_scroll.verticalScrollBar()
    assert scroll_bar.maximum() > 0, "the side panel should need scrolling at this height"
    scroll_bar.setValue(0)
    window.side_scroll.ensureWidgetVisible(label_box)
    start = scroll_bar.value()
    for _ in range(3):
        _wheel(label_box, steps=-1)
    assert label_box.currentText() == before
    assert scroll_bar.value() > start or scroll_bar.value() == scroll_bar.maximum()
    assert scroll_bar.value() != start
    # Once the user clicks into it (focus), the wheel changes its value as usual.
    window.activateWindow()
    qtbot.waitUntil(window.isActiveWindow)
    label_box.setFocus(Qt.FocusReason.MouseFocusReason)
    qtbot.waitUntil(label_box.hasFocus)
    _wheel(label_box, steps=-1)
    assert label_box.currentText() != before


def test_wheel_scrolling_updates_the_slice_and_hu_readout_at_once(driver, window, ct_dir, qtbot):
    """#25.5: the readout follows the slice under a mouse that did not move."""
    volume = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    view = window.viewer.views["axial"]
    centre = QPointF(view.width() / 2, view.height() / 2)
    from PySide6.QtGui import QMouseEvent

    move = QMouseEvent(QMouseEvent.Type.MouseMove, centre, QPointF(view.mapToGlobal(centre.toPoint())),
                       Qt.MouseButton.NoButton, Qt.MouseButton.NoButton, Qt.KeyboardModifier.NoModifier)
    QApplication.sendEvent(view, move)
    first = window.position_label.text()
    xyz0 = view.widget_to_index(centre)
    assert f"Axial slice {xyz0[2] + 1}/" in first
    _wheel(view, steps=3, position=centre)
    xyz1 = view.widget_to_index(centre)
    assert xyz1[2] != xyz0[2]
    text = window.position_label.text()
    assert f"Axial slice {xyz1[2] + 1}/" in text
    hu = float(volume.array[xyz1[2], xyz1[1], xyz1[0]])
    assert f"{hu:.0f} HU" in text
