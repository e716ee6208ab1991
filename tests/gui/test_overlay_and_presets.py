"""Window presets and the TotalSegmentator label map over its DICOM series."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from PySide6.QtCore import Qt
from PySide6.QtGui import QColor, QImage
from qt_conditions import views_laid_out

LIVER = 5


def _published_color(name: str) -> tuple[int, int, int]:
    """TotalSegmentator's own colour for a structure (its mapping table, read with the csv module): what the
    "TotalSegmentator v2 (total)" name set gives a label with its name and codes."""
    import csv
    from pathlib import Path

    table = Path(__import__("totalsegmentator").__file__).parent / "resources" / "totalsegmentator_snomed_mapping.csv"
    with open(table, newline="", encoding="utf-8") as handle:
        row = next(r for r in csv.DictReader(handle) if r["Structure"] == name)
    return tuple(int(c) for c in row["DicomRGBColor"].split(","))  # type: ignore[return-value]


def _pixel(view, xyz) -> QColor:
    image = view.render_slice()
    column, row = view.axes.index_to_pixel(xyz, view.document.volume.size_xyz)
    return image.pixelColor(int(column), int(row))


def _expected_blend(grey: int, color, opacity: float) -> tuple[int, int, int]:
    return tuple(int(round(grey * (1 - opacity) + c * opacity)) for c in color)


def _grey(center: float, width: float, hu: float) -> int:
    return int(round(np.clip((hu - (center - width / 2)) * 255.0 / width, 0, 255)))


@pytest.fixture
def ct_with_liver(driver, window, ct_dir):
    """The TotalSegmentator DICOM series with its LAS-stored label map opened onto it."""
    folder = ct_dir / "totalsegmentator"
    volume = driver.open_series(folder / "example_ct_dicom")
    result = driver.open_segmentation(folder / "example_seg_dicom.nii.gz")
    return volume, result


def test_label_map_lines_up_and_colours_liver(ct_with_liver, window, ct_dir, qtbot):
    volume, result = ct_with_liver
    doc = window.document
    assert result.placement == "resampled"  # stored LAS: resampled onto the DICOM grid, with a notice
    assert window.notice_banner.isVisible() and "resampled" in window.notice_banner.label.text()
    assert LIVER in doc.labels and len(doc.labels) == 31
    liver = doc.label_map.array == LIVER
    # Done right the liver reads about 89 HU (data README); flipped it would read about -75.
    assert 80 < float(volume.array[liver].mean()) < 100
    # Independent check of the voxel correspondence: physical point of a liver voxel in
    # the NIfTI (read by SimpleITK) maps to a liver voxel of the display.
    seg = sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_seg_dicom.nii.gz"))
    seg_array = sitk.GetArrayFromImage(seg)
    z, y, x = (int(v) for v in np.argwhere(seg_array == LIVER)[len(np.argwhere(seg_array == LIVER)) // 2])
    point = seg.TransformIndexToPhysicalPoint((x, y, z))
    index = tuple(int(round(v)) for v in volume.physical_to_index(point))
    assert doc.label_map.array[index[2], index[1], index[0]] == LIVER
    # Click on it in the axial view: the crosshair goes there and the status names it.
    axial = window.viewer.views["axial"]
    # > 1 screen pixel per voxel, so a click is exact: the docks leave the single view about
    # 400 px of the fixture's 820 px window, so this check uses a taller one.
    window.resize(1400, 1500)
    window.viewer.set_layout("single", "axial")
    qtbot.waitUntil(lambda: views_laid_out(window.viewer, "single") and axial.image_rect().height() > 512)
    window.view.set_cursor((0, 0, index[2]))
    qtbot.mouseClick(axial, Qt.MouseButton.LeftButton, pos=axial.index_to_widget(index).toPoint())
    assert window.view.cursor_xyz == index
    assert f"label {LIVER}" in window.position_label.status_text()
    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")
    assert "liver" in window.position_label.status_text()
    window.viewer.set_layout("1x3")
    # The pixel at the liver voxel is grey blended with the liver colour at the opacity.
    hu = float(volume.array[index[2], index[1], index[0]])
    grey = _grey(window.view.window_center, window.view.window_width, hu)
    color = _pixel(axial, index)
    expected = _expected_blend(grey, _published_color("liver"), window.view.overlay_opacity)
    assert (color.red(), color.green(), color.blue()) == pytest.approx(expected, abs=1)
    # Same voxel in the coronal and sagittal views.
    for name in ("coronal", "sagittal"):
        c = _pixel(window.viewer.views[name], index)
        assert (c.red(), c.green(), c.blue()) == pytest.approx(expected, abs=1)
    # Opacity slider: 100 % shows the pure label colour.
    window.overlay_panel.opacity_slider.setValue(100)
    c = _pixel(axial, index)
    assert (c.red(), c.green(), c.blue()) == _published_color("liver")
    # Per-label visibility: hiding the liver shows plain grey there.
    labels = window.overlay_panel.labels
    labels.model.setData(labels.model.index_of(LIVER), Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole)
    assert not doc.labels[LIVER].visible
    c = _pixel(axial, index)
    assert (c.red(), c.green(), c.blue()) == (grey, grey, grey)


def test_a_uint16_label_map_opens_and_is_drawn_in_its_own_colours(driver, window, ct_dir, tmp_path):
    """Values above 255 (uint16 label maps) are opened, kept and drawn: one MAX_LABEL_VALUE everywhere."""
    folder = ct_dir / "totalsegmentator"
    seg = sitk.ReadImage(str(folder / "example_seg.nii.gz"))
    coded = sitk.GetArrayFromImage(seg).astype(np.uint16)
    coded[coded == LIVER] = 1000 + LIVER  # a foreign scheme: liver 1005, the rest as they were
    coded[coded == 1] = 65535  # and the largest value there is (was spleen)
    written = sitk.GetImageFromArray(coded)
    written.CopyInformation(seg)
    sitk.WriteImage(written, str(tmp_path / "coded.nii.gz"))
    volume = driver.open_image_file(folder / "example_ct_sm.nii.gz")  # the grid example_seg was made on
    driver.open_segmentation(tmp_path / "coded.nii.gz")
    doc = window.document
    assert doc.label_map.array.dtype == np.uint16 and np.array_equal(doc.label_map.array, coded)
    assert {1005, 65535} <= set(doc.labels)
    axial = window.viewer.views["axial"]
    for value in (1005, 65535, 2):
        z, y, x = (int(v) for v in np.argwhere(coded == value)[np.count_nonzero(coded == value) // 2])
        window.view.set_cursor((x, y, z))
        grey = _grey(window.view.window_center, window.view.window_width, float(volume.array[z, y, x]))
        expected = _expected_blend(grey, doc.labels[value].color, window.view.overlay_opacity)
        c = _pixel(axial, (x, y, z))
        assert (c.red(), c.green(), c.blue()) == pytest.approx(expected, abs=1), value
    assert doc.labels[1005].color != doc.labels[65535].color != doc.labels[2].color
    # and a label above 255 can be added and painted by hand
    entry = doc.add_label("lesion", value=4000)
    assert doc.labels[4000] == entry


def test_outline_mode_colours_only_the_border(ct_with_liver, window):
    doc = window.document
    axial = window.viewer.views["axial"]
    liver = doc.label_map.array == LIVER
    z = int(np.argmax(liver.sum(axis=(1, 2))))
    from scipy import ndimage

    interior = ndimage.binary_erosion(liver[z], iterations=3)
    y, x = (int(v) for v in np.argwhere(interior)[0])
    window.overlay_panel.outline_button.setChecked(True)
    assert window.view.overlay_outline
    c = _pixel(axial, (x, y, z))
    assert c.red() == c.green() == c.blue()  # inside: grey
    border = liver[z] & ~ndimage.binary_erosion(liver[z])
    by, bx = (int(v) for v in np.argwhere(border)[0])
    c = _pixel(axial, (bx, by, z))
    assert not (c.red() == c.green() == c.blue())  # border: coloured


def test_presets_change_the_pixels(driver, window, ct_dir, qtbot):
    volume = driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    axial = window.viewer.views["axial"]
    xyz = window.view.cursor_xyz
    before = axial.render_slice().copy()
    hu = float(volume.array[xyz[2], xyz[1], xyz[0]])
    for name, key in (("Lung", Qt.Key.Key_2), ("Bone", Qt.Key.Key_3), ("Brain", Qt.Key.Key_4)):
        window.preset_actions[name].trigger()  # what the menu and the key (see shortcut) do
        assert window.preset_actions[name].shortcut().toString() == chr(key)
        center, width = window.view.presets[name]
        assert (window.view.window_center, window.view.window_width) == (center, width)
        grey = _grey(center, width, hu)
        c = _pixel(axial, xyz)
        assert (c.red(), c.green(), c.blue()) == (grey, grey, grey)
        assert window.window_panel.preset_box.currentData() == name
    assert axial.render_slice() != before
    # The panel's spin boxes edit the window too, and the views follow.
    window.window_panel.width_box.setValue(123)
    assert window.view.window_width == 123
    # Auto: the DICOM header's window, read here with pydicom. This series stores two (40/300 and
    # 300/1500); the first is the one a viewer shows first.
    header = pydicom.dcmread(next((ct_dir / "totalsegmentator" / "example_ct_dicom").iterdir()), stop_before_pixels=True)
    header_window = (float(header.WindowCenter[0]), float(header.WindowWidth[0]))
    assert header_window == (40.0, 300.0)
    window.preset_actions["Auto (header)"].trigger()
    assert (window.view.window_center, window.view.window_width) == header_window
    c = _pixel(axial, xyz)
    assert (c.red(), c.green(), c.blue()) == (_grey(*header_window, hu),) * 3
    assert window.window_panel.width_box.value() == 300


def test_user_edited_preset_is_saved(window):
    from medseg.gui.common import app_settings
    from medseg.gui.common.view_state import DEFAULT_PRESETS

    window.presets_editor.edit()
    dialog = window.presets_editor.dialog
    from PySide6.QtWidgets import QPushButton

    next(b for b in dialog.findChildren(QPushButton) if b.text() == "Add").click()  # a new row, as the user adds one
    row = dialog.table.rowCount() - 1
    for column, text in enumerate(("Stroke", "35", "30")):  # typed into its cells
        dialog.table.item(row, column).setText(text)
    dialog.accept()
    assert window.view.presets["Stroke"] == (35.0, 30.0)
    assert app_settings.load_presets(DEFAULT_PRESETS)["Stroke"] == (35.0, 30.0)
    assert any(window.window_panel.preset_box.itemData(i) == "Stroke" for i in range(window.window_panel.preset_box.count()))


def test_screenshot_with_real_ct_and_overlay(ct_with_liver, window, artifacts_dir, qtbot):
    doc = window.document
    window.overlay_panel.names_box.setCurrentText("TotalSegmentator v2 (total)")
    liver = np.argwhere(doc.label_map.array == LIVER)
    z, y, x = (int(v) for v in liver[len(liver) // 2])
    window.view.set_cursor((x, y, z))
    window.preset_actions["Soft tissue"].trigger()
    window.layout_actions["1x3"].trigger()
    qtbot.waitUntil(lambda: views_laid_out(window.viewer, "1x3"))
    path = artifacts_dir / "gui_ct_overlay_1x3.png"
    assert window.grab().save(str(path))
    # What was saved shows the overlay where the liver is: in the 1x3 screenshot, a liver voxel next to
    # the crosshair (off its lines) has the grey of its HU blended with the liver colour (axial and coronal;
    # the sagittal view, stretched 2 mm slices, is checked voxel by voxel in the test above).
    volume, _ = ct_with_liver
    shot = QImage(str(path))
    assert shot.size() == window.size()
    # (the views are read in the layout the screenshot was taken in, before any re-layout)
    for name in ("axial", "coronal"):
        view = window.viewer.views[name]
        in_plane = [axis for axis in range(3) if axis != view.axes.normal_axis]
        near = None
        for step in ((16, 16), (-16, 16), (16, -16), (-16, -16), (16, 4), (-16, 4), (16, -4), (-16, -4)):  # pixels clear of the crosshair
            voxel = [x, y, z]
            voxel[in_plane[0]] += step[0]
            voxel[in_plane[1]] += step[1]
            inside = all(0 <= v < n for v, n in zip(voxel, doc.volume.size_xyz))
            if inside and doc.label_map.array[voxel[2], voxel[1], voxel[0]] == LIVER:
                near = tuple(voxel)
                break
        assert near is not None, name
        point = view.mapTo(window, view.index_to_widget(near).toPoint())
        colour = shot.pixelColor(point)
        grey = _grey(window.view.window_center, window.view.window_width, float(volume.array[near[2], near[1], near[0]]))
        expected = _expected_blend(grey, _published_color("liver"), window.view.overlay_opacity)
        assert (colour.red(), colour.green(), colour.blue()) == pytest.approx(expected, abs=12), name
    window.layout_actions["2x2"].trigger()
    qtbot.waitUntil(lambda: views_laid_out(window.viewer, "2x2"))
    path2 = artifacts_dir / "gui_ct_overlay_2x2.png"
    assert window.grab().save(str(path2))
