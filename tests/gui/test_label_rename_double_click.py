"""Issue 52 (12): a double-click on a label's name renames it and the slices stay where they are; a
double-click on its value still jumps there. Real data: pyradiomics' chest CT and its nodule mask."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QAbstractItemView, QApplication, QLineEdit

from medseg.gui.labels.label_tree import VALUE


def test_double_click_on_a_name_renames_without_moving_the_slices(window, driver, ct_dir, qtbot, artifacts_dir):
    folder = ct_dir / "pyradiomics_lung1"
    driver.open_image_file(folder / "lung1_image.nrrd")
    driver.open_segmentation(folder / "lung1_label.nrrd")
    doc, labels = window.document, window.overlay_panel.labels
    tree = labels.tree
    window.view.set_cursor((10, 10, 2))  # far from the nodule
    before = tuple(window.view.cursor_xyz)
    window.side_scroll.ensureWidgetVisible(tree)
    name = labels.proxy.mapFromSource(labels.model.index_of(1))
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualRect(name).center())
    qtbot.mouseDClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualRect(name).center())
    qtbot.waitUntil(lambda: isinstance(QApplication.focusWidget(), QLineEdit))
    assert tree.state() == QAbstractItemView.State.EditingState
    assert tuple(window.view.cursor_xyz) == before  # the rename did not move the slices
    editor = QApplication.focusWidget()
    editor.selectAll()
    qtbot.keyClicks(editor, "nodule")
    window.grab().save(str(artifacts_dir / "rename_by_double_click.png"))
    qtbot.keyClick(editor, Qt.Key.Key_Return)
    qtbot.waitUntil(lambda: doc.labels[1].name == "nodule")
    assert tuple(window.view.cursor_xyz) == before

    value = labels.proxy.mapFromSource(labels.model.index_of(1, VALUE))
    qtbot.mouseClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualRect(value).center())
    qtbot.mouseDClick(tree.viewport(), Qt.MouseButton.LeftButton, pos=tree.visualRect(value).center())
    assert tree.state() != QAbstractItemView.State.EditingState
    z, y, x = tuple(int(c) for c in window.view.cursor_xyz[::-1])
    assert doc.label_map.array[z, y, x] == 1  # the jump: the crosshair is on the nodule
