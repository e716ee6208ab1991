"""Segment never destroys what is on screen unasked: over a label the user opened, it asks first, and "add"
keeps every voxel of it. Real data: pyradiomics' chest CT and its nodule mask, the built-in starter model."""

from __future__ import annotations

import numpy as np
import SimpleITK as sitk
from PySide6.QtWidgets import QMessageBox


def test_segment_over_an_opened_tumour_asks_and_add_keeps_every_voxel(window, driver, ct_dir, qtbot, monkeypatch,
                                                                      artifacts_dir):
    folder = ct_dir / "pyradiomics_lung1"
    driver.open_image_file(folder / "lung1_image.nrrd")
    driver.open_segmentation(folder / "lung1_label.nrrd")
    doc = window.document
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "lung1_label.nrrd"))) == 1  # SimpleITK's reading
    assert int(tumour.sum()) == 837 and np.array_equal(doc.label_map.array == 1, tumour)

    window.segment_action.trigger()
    box = window.editing.segment_box
    assert box is not None and box.isVisible() and not window.loader.busy  # nothing runs before the answer
    assert "label 1 (drawn or opened)" in box.text()
    qtbot.waitExposed(box)
    box.grab().save(str(artifacts_dir / "segment_asks_over_an_opened_label.png"))
    box.button(QMessageBox.StandardButton.Cancel).click()  # cancel: nothing changes
    assert window.editing.segment_box is None and not window.loader.busy
    assert np.array_equal(doc.label_map.array == 1, tumour) and doc.label_map.array.max() == 1

    window.segment_action.trigger()
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.editing.segment_add_button.click()
    after = doc.label_map.array
    assert np.array_equal(after == 1, tumour)  # every tumour voxel kept, and no other voxel became the tumour
    names = {entry.name: value for value, entry in doc.labels.items()}
    assert {"body", "lungs", "bones"} <= set(names) and names["body"] != 1  # the model's body moved to a free value
    result = blocker.args[0]
    model = {entry.name: value for value, entry in result.labels.items()}
    for name in ("body", "lungs", "bones"):  # the model's labels went exactly where there was no label
        np.testing.assert_array_equal(after == names[name], (result.label_map.array == model[name]) & ~tumour)
    source = window.overlay_panel.source_label
    assert "3 labels found" in source.text()
    window.grab().save(str(artifacts_dir / "segment_added_around_an_opened_label.png"))

    # the result's message stays while the result is on screen, and goes with it
    doc.undo()
    assert np.array_equal(doc.label_map.array == 1, tumour) and doc.label_map.array.max() == 1
    assert "found" not in source.text()
    doc.redo()
    assert "3 labels found" in source.text()  # redo brings the result back, and its message
    window.segment_action.trigger()  # the tumour is still the user's: asked again
    assert window.editing.segment_box is not None
    window.editing.segment_box.button(QMessageBox.StandardButton.Cancel).click()
    monkeypatch.setattr(QMessageBox, "exec", lambda box: QMessageBox.StandardButton.Discard)  # "Don't save"
    driver.open_image_file(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")  # another study
    assert doc.label_map is None and "found" not in source.text()
