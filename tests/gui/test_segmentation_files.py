"""File ▸ Save / Save as / Open segmentation, the statistics table and its CSV, the raw-stack action,
driven through the window's own actions on the tilted, variably spaced GE head series."""

from __future__ import annotations

import csv
from pathlib import Path

import highdicom as hd
import numpy as np
import pytest
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog

from medseg.edit.tools.brush import stroke
from medseg.edit.tools.threshold import threshold

TILTED = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")


@pytest.fixture
def edited(driver, window, ct_dir):
    """The tilted series, a 'bone' label from a model (simulated: AUTOMATIC), touched by a brush stroke,
    and a 'lesion' label drawn by hand."""
    volume = driver.open_series(ct_dir.joinpath(*TILTED))
    doc = window.document
    doc.add_label("bone", value=1)
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "model output")
    window.segmentation_files.record_model_output("medseg-starter", "epoch 40", [1])
    doc.add_label("lesion", value=2)
    nz, ny, nx = volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, ny // 2, nx // 2), (nz // 2, ny // 2, nx // 2 + 40)], 8.0, 2,
                     image=doc.volume), "brush")
    doc.apply(stroke(doc.label_map, [(nz // 2, ny // 3, nx // 3)], 5.0, 1, image=doc.volume), "brush bone")
    assert doc.unsaved
    return volume


def _save_as(qtbot, window, monkeypatch, path: Path, chosen: str = "") -> None:
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(path), chosen))
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000):
        window.save_as_action.trigger()


def test_save_as_dicom_seg_then_ctrl_s_then_reopen(window, edited, qtbot, monkeypatch, tmp_path):
    doc = window.document
    drawn = doc.label_map.array.copy()
    path = tmp_path / "head.dcm"
    _save_as(qtbot, window, monkeypatch, path)
    assert not doc.unsaved
    seg = hd.seg.segread(str(path))
    algorithms = {d.segment_label: d.algorithm_type.value for d in (seg.get_segment_description(n)
                                                                     for n in seg.get_segment_numbers())}
    assert algorithms == {"bone": "SEMIAUTOMATIC", "lesion": "MANUAL"}
    bone = seg.get_segment_description(1)
    assert bone.algorithm_identification[0].AlgorithmName == "medseg-starter"
    assert "regularised" in seg.ImageComments  # the tilt correction is recorded in the SEG

    # Ctrl+S saves to the same file again after another edit.
    nz, ny, nx = doc.volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, 2 * ny // 3, nx // 2)], 4.0, 2, image=doc.volume), "more")
    edited_again = doc.label_map.array.copy()
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000) as blocker:
        window.save_action.trigger()
    assert blocker.args == [str(path)] and not doc.unsaved
    assert not np.array_equal(edited_again, drawn)

    # Open segmentation: the SEG lands voxel for voxel where it was drawn.
    doc.clear_label_map()
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(path), ""))
    with qtbot.waitSignal(window.segmentation_files.opened, timeout=120_000):
        window.open_segmentation_action.trigger()
    names = {v: e.name for v, e in doc.labels.items()}
    assert sorted(names.values()) == ["bone", "lesion"]
    by_name = {n: v for v, n in names.items()}
    expected = np.zeros_like(doc.label_map.array)
    expected[edited_again == 1] = by_name["bone"]
    expected[edited_again == 2] = by_name["lesion"]
    np.testing.assert_array_equal(doc.label_map.array, expected)


def test_save_as_nifti_and_stl(window, edited, driver, ct_dir, qtbot, monkeypatch, tmp_path):
    doc = window.document
    _save_as(qtbot, window, monkeypatch, tmp_path / "head", "NIfTI label map (*.nii.gz)")
    written = tmp_path / "head.nii.gz"
    assert (tmp_path / "head.labels.json").is_file()
    np.testing.assert_array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(written))), doc.label_map.array)
    _save_as(qtbot, window, monkeypatch, tmp_path / "surfaces.stl")
    assert sorted(p.name for p in (tmp_path / "surfaces").iterdir()) == ["1_bone.stl", "2_lesion.stl"]
    assert window.segmentation_files.path == written  # Ctrl+S keeps saving the label map, not meshes
    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")  # another study
    assert window.segmentation_files.path is None  # Ctrl+S now asks: it never overwrites the last study's file


def test_a_failed_save_is_shown_and_the_edits_stay(window, edited, qtbot, monkeypatch, tmp_path):
    doc = window.document
    before = doc.label_map.array.copy()
    folder = tmp_path / "gone"
    folder.mkdir()
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(folder / "head.dcm"), ""))
    folder.rmdir()  # removed while the dialog was open
    with qtbot.waitSignal(window.error_shown, timeout=120_000) as blocker:
        window.save_as_action.trigger()
    assert "does not exist" in blocker.args[0]
    assert window.error_box is not None and "gone" in window.error_box.informativeText()
    assert doc.unsaved and np.array_equal(doc.label_map.array, before)
    assert doc.history.can_undo()  # the strokes are still undoable (and in the journal)


def test_statistics_table_and_csv(window, edited, qtbot, monkeypatch, tmp_path, artifacts_dir):
    panel = window.stats_panel
    panel.refresh_button.click()
    assert panel.table.rowCount() == 2
    labels = window.document.label_map
    intensity = sitk.LabelStatisticsImageFilter()
    intensity.Execute(window.document.volume.to_sitk(), sitk.Cast(labels.to_sitk(), sitk.sitkUInt8))
    shown = {panel.table.item(r, 0).text(): panel.table.item(r, 1).text() for r in range(2)}
    assert shown == {"1  bone": f"{intensity.GetCount(1):,}", "2  lesion": f"{intensity.GetCount(2):,}"}
    out = tmp_path / "stats.csv"
    monkeypatch.setattr(QFileDialog, "getSaveFileName", lambda *a, **k: (str(out), ""))
    panel.export_button.click()
    rows = list(csv.DictReader(out.open()))
    assert [r["name"] for r in rows] == ["bone", "lesion"]
    assert float(rows[0]["hu_mean"]) == pytest.approx(intensity.GetMean(1), abs=1e-3)
    # an edit makes the figures old: said so, and they cannot be exported until recounted
    doc = window.document
    nz, ny, nx = doc.volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, 2 * ny // 3, 2 * nx // 3)], 6.0, 2, image=doc.volume), "brush")
    assert "changed since these figures" in panel.summary.text() and not panel.export_button.isEnabled()
    panel.refresh_button.click()
    assert panel.export_button.isEnabled() and panel.summary.text().startswith("2 labels")
    lesion = next(r for r in range(2) if panel.table.item(r, 0).text() == "2  lesion")
    assert panel.table.item(lesion, 1).text() == f"{int((doc.label_map.array == 2).sum()):,}"
    window.stats_dock.show()
    qtbot.wait(50)
    window.grab().save(str(artifacts_dir / "segmentation_statistics.png"))


def test_raw_stack_action_reloads_the_acquired_slices(window, driver, ct_dir, qtbot):
    volume = driver.open_series(ct_dir.joinpath(*TILTED))
    assert volume.shape_zyx[0] == 37  # regular grid
    assert window.raw_stack.button.isVisibleTo(window) and window.raw_stack.action.isEnabled()
    assert "regularize=False" not in window.findings_banner.label.text()
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as blocker:
        window.raw_stack.button.click()
    assert blocker.args[0].shape_zyx[0] == 28 and window.raw_stack.action.isChecked()
    # Unsaved edits on this grid: switching is refused, nothing is dropped.
    doc = window.document
    doc.add_label("mark", value=1)
    doc.apply(stroke(doc.label_map, [(14, 256, 256)], 5.0, 1, image=doc.volume), "brush")
    with qtbot.waitSignal(window.error_shown, timeout=10_000):
        window.raw_stack.action.trigger()
    assert doc.label_map is not None and doc.volume.shape_zyx[0] == 28
