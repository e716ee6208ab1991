"""Open every real study of shared/data through the window, as a user would."""

from __future__ import annotations

import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from PySide6.QtCore import Qt

from medseg.gui.study.series_browser import KIND_TEXT


def _hu_in_status(window) -> float:
    text = window.position_label.status_text()
    token = [part for part in text.split("|") if part.strip().endswith("HU")][0]
    return float(token.split()[0])


def _coronal_aspect(view) -> float:
    rect = view.image_rect()
    return rect.width() / rect.height()


def test_totalsegmentator_series_slices_aspect_and_hu(driver, window, ct_dir):
    folder = ct_dir / "totalsegmentator" / "example_ct_dicom"
    volume = driver.open_series(folder)
    axial, coronal = window.viewer.views["axial"], window.viewer.views["coronal"]
    assert axial.slice_count == 20 and coronal.slice_count == 512
    # 512 × 0.977 mm wide, 20 × 2 mm high: the coronal view keeps that physical shape.
    assert _coronal_aspect(coronal) == pytest.approx(512 * 0.977 / (20 * 2.0), rel=0.02)
    # HU under the crosshair equals the HU pydicom decodes from the file of that slice.
    window.view.set_cursor((300, 260, 7))
    reference = pydicom.dcmread(volume.meta.source_files[7])
    hu = reference.pixel_array[260, 300] * float(reference.RescaleSlope) + float(reference.RescaleIntercept)
    assert _hu_in_status(window) == pytest.approx(hu)
    assert "Axial slice 8/20" in window.position_label.status_text()
    assert axial.axes.letters == ("R", "L", "A", "P")
    assert coronal.axes.letters == ("R", "L", "S", "I")
    assert window.viewer.views["sagittal"].axes.letters == ("A", "P", "S", "I")


def test_browser_lists_localizer_and_secondary_captures_as_not_loadable(driver, window, ct_dir):
    browser = driver.open_folder(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series")
    kinds = {s.kind for s in browser.result.series}
    assert "localizer" in kinds
    not_loadable = [i for i, s in enumerate(browser.result.series) if not s.loadable]
    assert not_loadable
    for index in not_loadable:  # every series that cannot load says why, in the Kind column
        assert browser.table.item(index, 8).text() == KIND_TEXT[browser.result.series[index].kind]
        assert "not a volume" in browser.table.item(index, 8).text()
    row = next(i for i, s in enumerate(browser.result.series) if s.kind == "localizer")
    assert browser.table.item(row, 8).text() == "localizer (not a volume)"
    # Double-clicking a localizer does not load it.
    browser.table.cellDoubleClicked.emit(row, 0)
    assert window.document.volume is None and not window.loader.busy
    # The 5 mm series: 28 slices of 512² at 0.451 mm.
    five_mm = next(i for i, s in enumerate(browser.result.series) if s.loadable and s.size_xyz[2] == 28)
    driver.load_row(browser, five_mm)
    coronal = window.viewer.views["coronal"]
    assert window.viewer.views["axial"].slice_count == 28
    spacing_x = window.document.volume.spacing_mm[0]
    assert spacing_x == pytest.approx(0.451, abs=0.001)
    assert _coronal_aspect(coronal) == pytest.approx(512 * spacing_x / (28 * 5.0), rel=0.02)


@pytest.mark.parametrize(
    "relative, files, traps",
    [  # files: the series' files in the folder; traps: what the data README says is irregular about the series
        ("dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series", 16, ("localizer_excluded", "series_chosen")),  # 1 mm
        ("dcmqi_ct3slice_masks/image", 3, ()),
        ("dicom2nifti_testdata/gantry_tilt_siemens_iop_only", 4, ("gantry_tilt",)),
        ("dicom2nifti_testdata/missing_slice_ge_lightspeed16", 4, ("missing_slices",)),
        ("dicom2nifti_testdata/missing_slice_tilted_siemens", 4, ("gantry_tilt", "missing_slices")),
        ("dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", 28, ("gantry_tilt", "variable_spacing")),
    ],
)
def test_each_real_dicom_series_opens(driver, window, ct_dir, relative, files, traps, artifacts_dir):
    folder = ct_dir / relative
    browser = driver.open_folder(folder)
    # the browser lists the series with its acquired slices, one per file
    (row,) = [i for i, s in enumerate(browser.result.series) if s.loadable and s.size_xyz[2] == files]
    volume = driver.load_row(browser, row)
    axial = window.viewer.views["axial"]
    assert axial.slice_count == volume.size_xyz[2]  # every slice of the grid shown (a regular one may hold more)
    # Every view shows an image with the physical aspect of its plane.
    for view in window.viewer.views.values():
        image = view.render_slice()
        columns, rows_ = view.axes.shape_of(volume.size_xyz)
        assert (image.width(), image.height()) == (columns, rows_)
        mm_x, mm_y = view.axes.pixel_spacing(volume.spacing_mm)
        rect = view.image_rect()
        assert rect.width() / rect.height() == pytest.approx(columns * mm_x / (rows_ * mm_y), rel=0.02)
    # Irregular series are reported in the banner, never silently; a regular one shows no banner.
    found = {finding.kind for finding in volume.meta.findings}
    assert set(traps) <= found and bool(found) == bool(traps), found
    assert window.findings_banner.isVisible() == bool(traps)
    for kind in traps:  # each in the user's words
        assert next(f.message for f in volume.meta.findings if f.kind == kind) in window.findings_banner.details, kind
    # The HU readout is the voxel's value.
    x, y, z = window.view.cursor_xyz
    assert _hu_in_status(window) == pytest.approx(float(volume.array[z, y, x]))
    window.grab().save(str(artifacts_dir / f"gui_series_{folder.name}.png"))


def test_missing_slice_is_reported(driver, window, ct_dir):
    volume = driver.open_series(ct_dir / "dicom2nifti_testdata" / "missing_slice_ge_lightspeed16")
    assert [f.kind for f in volume.meta.findings].count("missing_slices") == 1
    assert window.findings_banner.isVisible()
    assert "missing" in window.findings_banner.label.text().lower()


def test_not_a_volume_is_listed_and_not_loadable(driver, window, ct_dir):
    browser = driver.open_folder(ct_dir / "dicom2nifti_testdata" / "duplicate_positions_siemens")
    assert browser.result.series and not any(s.loadable for s in browser.result.series)
    assert not browser.load_button.isEnabled()
    browser.table.cellDoubleClicked.emit(0, 0)
    assert window.document.volume is None


def test_nrrd_lung_ct_opens_with_thick_slice_aspect(driver, window, ct_dir):
    path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    driver.open_image_file(path)
    coronal = window.viewer.views["coronal"]
    assert window.viewer.views["axial"].slice_count == 48
    assert _coronal_aspect(coronal) == pytest.approx(512 * 0.570 / (48 * 5.0), rel=0.02)
    reference = sitk.GetArrayFromImage(sitk.ReadImage(str(path)))
    window.view.set_cursor((100, 200, 30))
    assert _hu_in_status(window) == pytest.approx(float(reference[30, 200, 100]))


def test_ras_nifti_is_shown_in_radiological_convention(driver, window, ct_dir):
    """example_ct.nii.gz is stored RAS: the screen's left must still be the patient's right."""
    volume = driver.open_image_file(ct_dir / "totalsegmentator" / "example_ct.nii.gz")
    assert window.viewer.views["axial"].slice_count == volume.size_xyz[2] == 112
    for name in ("axial", "coronal", "sagittal"):
        view = window.viewer.views[name]
        rect = view.image_rect()
        middle_y, middle_x = rect.center().y(), rect.center().x()
        left = view.widget_to_index(rect.topLeft() + (rect.bottomLeft() - rect.topLeft()) / 2 + _dx(2))
        right = view.widget_to_index(rect.topRight() + (rect.bottomRight() - rect.topRight()) / 2 - _dx(2))
        top = view.widget_to_index(rect.topLeft() + (rect.topRight() - rect.topLeft()) / 2 + _dy(2))
        bottom = view.widget_to_index(rect.bottomLeft() + (rect.bottomRight() - rect.bottomLeft()) / 2 - _dy(2))
        lps = {k: volume.index_to_physical(v) for k, v in dict(left=left, right=right, top=top, bottom=bottom).items()}
        if name in ("axial", "coronal"):
            assert lps["left"][0] < lps["right"][0]  # LPS x grows to the patient's left
        else:
            assert lps["left"][1] < lps["right"][1]  # anterior on the left of a sagittal view
        if name == "axial":
            assert lps["top"][1] < lps["bottom"][1]  # anterior up
        else:
            assert lps["top"][2] > lps["bottom"][2]  # superior up
        assert middle_x > 0 and middle_y > 0


def _dx(d):
    from PySide6.QtCore import QPointF

    return QPointF(d, 0)


def _dy(d):
    from PySide6.QtCore import QPointF

    return QPointF(0, d)


def test_bad_file_shows_error_dialog_naming_the_file(driver, window, tmp_path, qtbot):
    bad = tmp_path / "broken.nii.gz"
    bad.write_bytes(b"this is not a NIfTI file")
    with qtbot.waitSignal(window.error_shown, timeout=30_000):
        window.opener.open_path(bad)
    assert window.error_box is not None and window.error_box.isVisible()
    assert "broken.nii.gz" in window.error_box.text() + window.error_box.informativeText()
    assert window.document.volume is None


def test_mouse_and_keys_scroll_crosshair_and_window(driver, window, ct_dir, qtbot):
    driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")
    axial = window.viewer.views["axial"]
    z0 = window.view.cursor_xyz[2]
    axial.setFocus()
    qtbot.keyClick(axial, Qt.Key.Key_Up)
    assert window.view.cursor_xyz[2] == z0 + 1
    qtbot.keyClick(axial, Qt.Key.Key_Down)
    qtbot.keyClick(axial, Qt.Key.Key_Down)
    assert window.view.cursor_xyz[2] == z0 - 1
    # Left click sets the crosshair at the voxel under the mouse (all views follow).
    target = axial.index_to_widget((100, 200, window.view.cursor_xyz[2]))
    qtbot.mouseClick(axial, Qt.MouseButton.LeftButton, pos=target.toPoint())
    assert window.view.cursor_xyz[:2] == pytest.approx((100, 200), abs=1)
    assert window.viewer.views["sagittal"].slice_position == window.view.cursor_xyz[0]
    # Right-drag changes window/level.
    before = (window.view.window_center, window.view.window_width)
    qtbot.mousePress(axial, Qt.MouseButton.RightButton, pos=target.toPoint())
    from PySide6.QtCore import QEvent, QPointF
    from PySide6.QtGui import QMouseEvent

    move = QMouseEvent(QEvent.Type.MouseMove, QPointF(target.x() + 60, target.y() + 30), QPointF(), Qt.MouseButton.NoButton,
                       Qt.MouseButton.RightButton, Qt.KeyboardModifier.NoModifier)
    axial.mouseMoveEvent(move)
    qtbot.mouseRelease(axial, Qt.MouseButton.RightButton)
    assert window.view.window_width > before[1] and window.view.window_center > before[0]
    # Layouts: F6 shows the 3D view as the fourth pane, double-click maximises a view, F5 goes back.
    from PySide6.QtGui import QKeySequence

    assert window.layout_actions["2x2"].shortcut() == QKeySequence("F6")
    window.layout_actions["2x2"].trigger()
    assert window.viewer.view3d.isVisible() and window.viewer.layout_name == "2x2"
    qtbot.mouseDClick(window.viewer.views["coronal"], Qt.MouseButton.LeftButton)
    assert window.viewer.layout_name == "single" and not axial.isVisible()
    window.layout_actions["1x3"].trigger()
    assert all(v.isVisible() for v in window.viewer.views.values())
    assert np.isfinite(window.view.window_center)


def test_drag_and_drop_and_recent_studies(window, ct_dir, qtbot):
    from PySide6.QtCore import QMimeData, QPointF, QUrl
    from PySide6.QtGui import QDropEvent

    path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    mime = QMimeData()
    mime.setUrls([QUrl.fromLocalFile(str(path))])
    drop = QDropEvent(QPointF(300, 300), Qt.DropAction.CopyAction, mime, Qt.MouseButton.LeftButton, Qt.KeyboardModifier.NoModifier)
    with qtbot.waitSignal(window.loader.study_loaded, timeout=60_000):
        window.dropEvent(drop)
    assert window.document.volume.size_xyz == (512, 512, 48)
    recent = [a.text() for a in window.recent_menu.actions()]
    assert recent[0] == str(path)
    # Reopen from File ▸ Recent studies.
    window.document.clear_label_map()
    with qtbot.waitSignal(window.loader.study_loaded, timeout=60_000):
        window.recent_menu.actions()[0].trigger()
    assert window.loader.source == str(path)


def test_help_menu_about_and_shortcuts(window):
    window.help.show_about()
    assert "Qt" in window.help.dialog.text() and "medseg" in window.help.dialog.text()
    window.help.show_shortcuts()
    assert "Window/level" in window.help.dialog.text() and "Ctrl + wheel" in window.help.dialog.text()
    assert window.tabs.tabText(1) == "Train && Export"


def test_open_zip_archive(window, ct_dir, tmp_path, qtbot, monkeypatch):
    import zipfile

    from PySide6.QtWidgets import QFileDialog

    archive = tmp_path / "study.zip"
    with zipfile.ZipFile(archive, "w") as zf:
        for path in sorted((ct_dir / "dcmqi_ct3slice_masks" / "image").iterdir()):
            zf.write(path, f"ct/{path.name}")
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(archive), ""))
    window.open_archive_action.trigger()
    browser = window.opener.browser
    with qtbot.waitSignal(browser.scan_finished, timeout=60_000):
        pass
    assert browser.isVisible() and browser.table.rowCount() == 1
    with qtbot.waitSignal(window.loader.study_loaded, timeout=60_000):
        browser.load_button.click()
    assert window.document.volume.size_xyz == (512, 512, 3)
