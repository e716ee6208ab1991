"""What the readers find reaches the window (issue 43): a NIfTI slice of NaN is stated in the findings
banner (ITK had turned it into 0, water, without a word), a header spacing of 0 is an error dialog in
the user's words, and a series description holding markup is shown as text. Real CT, changed here."""

from __future__ import annotations

import struct

import nibabel as nib
import numpy as np
import pydicom
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog


def test_a_nan_slice_is_stated_in_the_banner(window, driver, ct_dir, tmp_path, qtbot, artifacts_dir) -> None:
    source = nib.load(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"))
    voxels = np.asanyarray(source.dataobj).astype(np.float32)
    voxels[:, :, 15] = np.nan
    nib.save(nib.Nifti1Image(voxels, source.affine), str(tmp_path / "nan.nii.gz"))
    volume = driver.open_image_file(tmp_path / "nan.nii.gz")
    assert "non_finite_voxels" in {f.kind for f in volume.meta.findings}
    banner = window.findings_banner
    qtbot.waitUntil(banner.isVisible, timeout=10_000)
    assert "not a number (NaN or infinite) in slice 16" in banner.label.text()
    assert "hold no number at all" in banner.details
    window.grab().save(str(artifacts_dir / "banner_nan_slice.png"))


def test_a_spacing_of_zero_is_an_error_dialog_in_words(window, ct_dir, tmp_path, qtbot, monkeypatch) -> None:
    path = tmp_path / "zero.nii"
    sitk.WriteImage(sitk.ReadImage(str(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")), str(path))
    data = bytearray(path.read_bytes())
    data[80:84] = struct.pack("<f", 0.0)  # pixdim[1]
    data[280:284] = struct.pack("<f", 0.0)  # the sform's x column
    path.write_bytes(bytes(data))
    monkeypatch.setattr(QFileDialog, "getOpenFileNames", lambda *a, **k: ([str(path)], ""))
    with qtbot.waitSignal(window.error_shown, timeout=60_000) as blocker:
        window.open_files_action.trigger()
    assert blocker.args[0].startswith("the voxel spacing in the header is 0 mm along x")
    assert str(path) in window.error_box.informativeText()


def test_markup_in_a_series_description_is_shown_as_text(window, driver, ct_dir, tmp_path, qtbot,
                                                         artifacts_dir) -> None:
    folder = tmp_path / "series"
    folder.mkdir()
    for source in sorted((ct_dir / "dcmqi_ct3slice_masks" / "image").iterdir()):
        dataset = pydicom.dcmread(source)
        dataset.SeriesDescription = "<h1>BIG</h1><img src=x>"
        dataset.PixelSpacing = [0.0, 0.0]  # refused: the error dialog quotes the file's text
        dataset.save_as(folder / source.name)
    browser = driver.open_folder(folder)
    assert browser.result.series[0].series_description == "<h1>BIG</h1><img src=x>"
    with qtbot.waitSignal(window.error_shown, timeout=60_000):
        browser.table.cellDoubleClicked.emit(0, 0)
    from PySide6.QtCore import Qt

    assert window.error_box.textFormat() == Qt.TextFormat.PlainText
    window.error_box.grab().save(str(artifacts_dir / "error_box_plain_text.png"))
