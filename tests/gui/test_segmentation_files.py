"""File ▸ Save / Save as / Open segmentation, the statistics table and its CSV, the raw-stack action,
driven through the window's own actions on the tilted, variably spaced GE head series. What is written
is read back by the libraries made for it (highdicom, SimpleITK, pydicom), not by medseg."""

from __future__ import annotations

import csv
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog, QMessageBox
from qt_conditions import on_screen

from medseg.core.labels import Label, Provenance
from medseg.edit.tools.brush import stroke
from medseg.edit.tools.threshold import threshold
from medseg.gui.common import save_dialog
from medseg.gui.study import segmentation_files

TILTED = ("dcm_qa_ct", "GE_HiSpeedDual_head_tilt_varspacing")


@pytest.fixture
def edited(driver, window, ct_dir):
    """The tilted series, a 'bone' label from a model (simulated: AUTOMATIC), touched by a brush stroke,
    and a 'lesion' label drawn by hand."""
    volume = driver.open_series(ct_dir.joinpath(*TILTED))
    doc = window.document
    doc.new_label_map()
    doc.apply(threshold(doc.label_map, doc.volume, 300, 3000, 1), "model output",
              {1: Label(1, "bone", provenance=Provenance.model("medseg-starter", "epoch 40"))})
    doc.add_label("lesion", value=2)
    nz, ny, nx = volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, ny // 2, nx // 2), (nz // 2, ny // 2, nx // 2 + 40)], 8.0, 2,
                     image=doc.volume), "brush")
    doc.apply(stroke(doc.label_map, [(nz // 2, ny // 3, nx // 3)], 5.0, 1, image=doc.volume), "brush bone")
    assert doc.unsaved
    return volume


def _save_as(qtbot, window, monkeypatch, path: Path, chosen: str = "", deidentify: bool = False) -> None:
    monkeypatch.setattr(save_dialog, "ask_save_path_with_option", lambda *a, **k: (str(path), chosen, deidentify))
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
    assert not np.array_equal(edited_again, drawn)  # (so the comparison below can tell the two saves apart)
    np.testing.assert_array_equal(_seg_on_image(path, doc.volume), edited_again)  # highdicom reads the new edit

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


def _seg_on_image(path: Path, image) -> np.ndarray:
    """The SEG as highdicom reads it (its own frame placement), mapped voxel by voxel onto ``image``'s grid in
    patient space, each segment painted with the label value its description records."""
    seg = hd.seg.segread(str(path))
    value = {n: int(str(seg.get_segment_description(n).SegmentDescription).rsplit(" ", 1)[1])
             for n in seg.get_segment_numbers()}
    volume = seg.get_volume(combine_segments=True, skip_overlap_checks=True)
    placed = np.zeros(image.shape_zyx, dtype=np.uint8)
    k, j, i = np.nonzero(volume.array)
    points = (volume.affine @ np.vstack([k, j, i, np.ones_like(k)]))[:3].T  # highdicom: (slice, row, column)
    index = image.physical_to_index(points)
    assert np.allclose(index, np.round(index), atol=1e-2)  # every set pixel sits on a voxel centre
    x, y, z = np.round(index).astype(int).T
    placed[z, y, x] = [value[n] for n in volume.array[k, j, i]]
    return placed


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


def test_a_foreign_seg_numbered_by_its_segments_is_said_in_the_banner(window, driver, ct_dir):
    """dcmqi's liver SEG records no medseg label values: its segment number becomes the value, and the banner
    (not a passing status-bar message) says so."""
    folder = ct_dir / "dcmqi_ct3slice_masks"
    driver.open_series(folder / "image")
    opened = driver.open_segmentation(folder / "masks" / "liver_SEG.dcm")
    reference = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "masks" / "liver_seg.nrrd")))
    np.testing.assert_array_equal(window.document.label_map.array, reference)  # liver is 1 in both
    assert opened.format == "dicom-seg" and window.document.labels[1].name == "Liver"
    banner = window.notice_banner
    assert banner.isVisible() and "segment numbers as label values" in banner.label.text()


def test_a_failed_save_is_shown_and_the_edits_stay(window, edited, qtbot, monkeypatch, tmp_path):
    doc = window.document
    before = doc.label_map.array.copy()
    folder = tmp_path / "gone"
    folder.mkdir()
    monkeypatch.setattr(save_dialog, "ask_save_path_with_option", lambda *a, **k: (str(folder / "head.dcm"), "", False))
    folder.rmdir()  # removed while the dialog was open
    with qtbot.waitSignal(window.error_shown, timeout=120_000) as blocker:
        window.save_as_action.trigger()
    assert "does not exist" in blocker.args[0]
    assert window.error_box is not None and "gone" in window.error_box.informativeText()
    assert doc.unsaved and np.array_equal(doc.label_map.array, before)
    assert doc.history.can_undo()  # the strokes are still undoable (and in the journal)


def test_statistics_table_and_csv(window, edited, qtbot, monkeypatch, tmp_path, artifacts_dir):
    panel = window.stats_panel
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh_button.click()
    assert panel.table.rowCount() == 2
    labels = window.document.label_map
    intensity = sitk.LabelStatisticsImageFilter()
    intensity.Execute(window.document.volume.to_sitk(), sitk.Cast(labels.to_sitk(), sitk.sitkUInt8))
    shown = {panel.table.item(r, 0).text(): panel.table.item(r, 1).text() for r in range(2)}
    assert shown == {"1  bone": f"{intensity.GetCount(1):,}", "2  lesion": f"{intensity.GetCount(2):,}"}
    out = tmp_path / "stats.csv"
    monkeypatch.setattr(save_dialog, "ask_save_path", lambda *a, **k: (str(out), ""))
    panel.export_button.click()
    rows = list(csv.DictReader(out.open()))
    assert [r["name"] for r in rows] == ["bone", "lesion"]
    assert float(rows[0]["hu_mean"]) == pytest.approx(intensity.GetMean(1), abs=1e-3)
    # an edit makes the figures old: said so, and they cannot be exported until recounted
    doc = window.document
    nz, ny, nx = doc.volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, 2 * ny // 3, 2 * nx // 3)], 6.0, 2, image=doc.volume), "brush")
    assert "changed since these figures" in panel.summary.text() and not panel.export_button.isEnabled()
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh_button.click()
    assert panel.export_button.isEnabled() and panel.summary.text().startswith("2 labels")
    lesion = next(r for r in range(2) if panel.table.item(r, 0).text() == "2  lesion")
    assert panel.table.item(lesion, 1).text() == f"{int((doc.label_map.array == 2).sum()):,}"
    window.stats_dock.show()
    qtbot.waitUntil(lambda: on_screen(panel.table))
    window.grab().save(str(artifacts_dir / "segmentation_statistics.png"))



def test_statistics_count_off_the_gui_thread_and_an_edit_meanwhile_makes_them_stale(window, edited, qtbot):
    """The count runs in a worker (the click returns at once, saying so); a brush stroke made before its figures
    arrive leaves them marked stale and kept out of an export, and the next count is current again."""
    panel, doc = window.stats_panel, window.document
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh_button.click()
        assert panel.summary.text() == "Counting…" and not panel.export_button.isEnabled()
        nz, ny, nx = doc.volume.shape_zyx
        doc.apply(stroke(doc.label_map, [(nz // 2, 2 * ny // 3, 2 * nx // 3)], 6.0, 2, image=doc.volume), "brush")
    assert "changed since these figures" in panel.summary.text() and not panel.export_button.isEnabled()
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh_button.click()
    lesion = next(s for s in panel.stats if s.name == "lesion")
    assert lesion.voxels == int(np.count_nonzero(doc.label_map.array == 2)) and panel.export_button.isEnabled()


def test_closing_while_counts_run_waits_for_every_one(window, edited, qtbot, monkeypatch):
    """A count superseded by a newer one still runs in its thread; closing the window waits for it too (Qt
    aborts the process when a thread object is destroyed while it runs: the whole suite stopped so). The
    first count is held until a moment after the window is asked to close."""
    import threading

    from medseg.edit.stats import label_statistics
    from medseg.gui.labels import stats_panel

    release, returned, calls = threading.Event(), [], []

    def held_first(*args, **kwargs):
        calls.append(1)
        if len(calls) == 1:
            release.wait(30)
            returned.append(True)
        return label_statistics(*args, **kwargs)

    monkeypatch.setattr(stats_panel, "label_statistics", held_first)
    panel, doc = window.stats_panel, window.document
    panel.refresh_button.click()
    nz, ny, nx = doc.volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(nz // 2, ny // 4, nx // 4)], 6.0, 2, image=doc.volume), "brush")
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh_button.click()  # the label map changed: a second count; the first one's figures are dropped
    threading.Timer(0.3, release.set).start()
    doc.mark_saved()
    window.close()
    try:
        assert returned == [True]  # close() came back only after the held count had finished
    finally:
        release.set()

def _acquired_slices(folder: Path, normal: np.ndarray) -> list:
    """The series' files read by pydicom, in the order of their positions along the slice normal."""
    datasets = [pydicom.dcmread(path) for path in sorted(folder.iterdir()) if path.is_file()]
    return sorted(datasets, key=lambda ds: float(np.asarray(ds.ImagePositionPatient, dtype=float) @ normal))


def test_raw_stack_action_shows_the_slices_as_acquired(window, driver, ct_dir, qtbot):
    folder = ct_dir.joinpath(*TILTED)
    volume = driver.open_series(folder)
    assert volume.shape_zyx[0] == 37  # regular grid
    assert window.raw_stack.button.isVisibleTo(window) and window.raw_stack.action.isEnabled()
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as blocker:
        window.raw_stack.button.click()
    raw = blocker.args[0]
    assert window.raw_stack.action.isChecked() and window.document.volume is raw
    # pydicom, independently: every acquired slice at its own position, its pixels in HU, as the scanner wrote them
    acquired = _acquired_slices(folder, raw.direction[:, 2])
    assert raw.shape_zyx[0] == len(acquired) == 28
    for k, ds in enumerate(acquired):
        np.testing.assert_allclose(raw.meta.extra["slice_positions_mm"][k], [float(v) for v in ds.ImagePositionPatient],
                                   atol=1e-3)
        hu = ds.pixel_array * float(ds.RescaleSlope) + float(ds.RescaleIntercept)
        np.testing.assert_array_equal(raw.array[k], hu)
    # Unsaved edits on this grid: switching is refused, nothing is dropped.
    doc = window.document
    doc.add_label("mark", value=1)
    doc.apply(stroke(doc.label_map, [(14, 256, 256)], 5.0, 1, image=doc.volume), "brush")
    with qtbot.waitSignal(window.error_shown, timeout=10_000) as refused:
        window.raw_stack.action.trigger()
    assert "unsaved edits" in refused.args[0]
    assert doc.label_map is not None and doc.volume.shape_zyx[0] == 28
    window.error_box.done(0)
    # Undo back to the state it was opened in: nothing is unsaved, and the switch goes ahead.
    doc.undo()
    assert not doc.unsaved
    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000) as blocker:
        window.raw_stack.action.trigger()
    assert blocker.args[0].shape_zyx[0] == 37 and not window.raw_stack.action.isChecked()


def test_an_opened_segmentation_comes_along_to_the_acquired_slices_and_back(window, driver, ct_dir, qtbot, tmp_path,
                                                                            artifacts_dir):
    """A label map opened from a file stays on screen through View ▸ Acquired slices (placed where the acquired
    slices are, in patient space) and comes back voxel for voxel on the regular grid."""
    folder = ct_dir.joinpath(*TILTED)
    regular = driver.open_series(folder)
    labels = np.zeros(regular.shape_zyx, dtype=np.uint8)
    labels[regular.array > 300] = 1
    labels[8:30, 250:360, 200:300] = 2
    written = sitk.GetImageFromArray(labels)  # written by SimpleITK, with the regular grid's geometry
    written.SetSpacing(regular.spacing_mm)
    written.SetOrigin(regular.origin_mm)
    written.SetDirection(tuple(regular.direction.reshape(-1)))
    path = tmp_path / "head.nrrd"
    sitk.WriteImage(written, str(path))
    driver.open_segmentation(path)
    doc = window.document
    np.testing.assert_array_equal(doc.label_map.array, labels)
    doc.rename_label(2, "block")

    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
        window.raw_stack.button.click()
    raw = doc.volume
    assert raw.shape_zyx[0] == 28 and doc.label_map is not None and doc.label_map.same_grid(raw)
    assert doc.labels[2].name == "block" and not doc.unsaved
    # Every labelled voxel of the acquired slices (placed where pydicom says each slice is) has, in the file
    # (indexed by SimpleITK), the same label at the nearest voxel -- or, on the 7 mm slices (the second half,
    # where the 4 mm grid has slices no acquired slice is nearest to), a label with fewer voxels that lies in
    # it: the thinner structure is kept, not dropped (tests/io/test_label_placement.py).
    acquired = _acquired_slices(folder, raw.direction[:, 2])
    z, y, x = np.nonzero(doc.label_map.array)
    origins = np.array([[float(v) for v in ds.ImagePositionPatient] for ds in acquired])[z]
    points = origins + np.outer(x * raw.spacing_mm[0], raw.direction[:, 0]) + np.outer(y * raw.spacing_mm[1],
                                                                                        raw.direction[:, 1])
    index = np.array([written.TransformPhysicalPointToContinuousIndex(tuple(p)) for p in points])
    ties = np.any(np.abs(index - np.floor(index) - 0.5) < 1e-3, axis=1)  # equally near two voxels: either is right
    i, j, k = np.rint(index[~ties]).astype(int).T
    nearest, placed = labels[k, j, i], doc.label_map.array[z, y, x][~ties]
    other = nearest != placed
    counts = np.bincount(labels.ravel())
    assert np.all(z[~ties][other] >= 14)  # the 4.2 mm slices: exactly the nearest voxel's label
    assert np.all((nearest[other] == 0) | (counts[placed[other]] < counts[nearest[other]]))
    assert other.sum() < 0.2 * other.size
    for value in (1, 2):
        assert np.count_nonzero(doc.label_map.array == value) > 1000
    window.grab().save(str(artifacts_dir / "raw_stack_with_opened_segmentation.png"))

    with qtbot.waitSignal(window.loader.study_loaded, timeout=120_000):
        window.raw_stack.button.click()
    assert doc.volume.shape_zyx[0] == 37
    np.testing.assert_array_equal(doc.label_map.array, labels)  # voxel for voxel what was opened
    assert doc.labels[2].name == "block" and not doc.unsaved


def test_seg_after_a_renumbering_segment_names_who_made_each_segment(window, driver, ct_dir, qtbot, monkeypatch,
                                                                     tmp_path):
    """Draw a label by hand, Segment with the starter (its body has the same value, so it is renumbered), save
    as DICOM SEG: highdicom reads the hand-drawn segment as MANUAL and each model segment as AUTOMATIC with the
    model's name (they were swapped), and each segment records its label value."""
    from medseg.model.package import load_package, starter_model_path

    driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image")
    doc = window.document
    doc.add_label("lesion", value=1)
    nz, ny, nx = doc.volume.shape_zyx
    doc.apply(stroke(doc.label_map, [(1, ny // 2, nx // 2), (1, ny // 2, nx // 2 + 30)], 6.0, 1, image=doc.volume),
              "brush")
    doc.set_label_locked(1, True)
    monkeypatch.setattr(QMessageBox, "question", lambda *a, **k: QMessageBox.StandardButton.Yes)
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        window.segment_action.trigger()
    starter = load_package(starter_model_path())
    _save_as(qtbot, window, monkeypatch, tmp_path / "seg.dcm")
    seg = hd.seg.segread(str(tmp_path / "seg.dcm"))
    described = {d.segment_label: d for d in (seg.get_segment_description(n) for n in seg.get_segment_numbers())}
    assert described["lesion"].algorithm_type.value == "MANUAL" and "body" in described
    for name, description in described.items():
        if name != "lesion":
            assert description.algorithm_type.value == "AUTOMATIC", name
            assert description.algorithm_identification[0].AlgorithmName == starter.name
    values = {name: int(str(d.SegmentDescription).rsplit(" ", 1)[1]) for name, d in described.items()}
    assert values["lesion"] == 1 and values["body"] != 1
    np.testing.assert_array_equal(_seg_on_image(tmp_path / "seg.dcm", doc.volume), doc.label_map.array)


def test_save_as_dialog_has_the_deidentify_checkbox(window, edited, qtbot, monkeypatch, tmp_path, artifacts_dir):
    """Save as offers "De-identify (research export)" under the file list; ticking it makes a de-identified save
    (and Ctrl+S keeps saving that way)."""
    from PySide6.QtWidgets import QLineEdit

    seen = {}

    def user_ticks_deidentify(dialog) -> int:
        dialog.resize(900, 560)
        assert dialog.option is not None
        dialog.option.click()
        dialog.findChild(QLineEdit, "fileNameEdit").setText(str(tmp_path / "export.dcm"))  # typed into the name field
        dialog.show()
        dialog.grab().save(str(artifacts_dir / "save_as_deidentify.png"))
        seen["box"] = dialog.option.isVisible() and dialog.option.text()
        return 1

    monkeypatch.setenv("MEDSEG_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setattr(save_dialog.SaveAsDialog, "exec", user_ticks_deidentify)
    with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000) as blocker:
        window.save_as_action.trigger()
    assert seen["box"] == segmentation_files.DEIDENTIFY_TEXT
    assert blocker.args[0] == str(tmp_path / "export.dcm") and window.segmentation_files.deidentified


def test_save_as_deidentified_dicom_seg(window, edited, qtbot, monkeypatch, tmp_path):
    import pydicom

    monkeypatch.setenv("MEDSEG_CONFIG_DIR", str(tmp_path / "config"))
    source = pydicom.dcmread(window.document.volume.meta.source_files[0], stop_before_pixels=True)
    path = tmp_path / "export.dcm"
    _save_as(qtbot, window, monkeypatch, path, deidentify=True)
    seg = hd.seg.segread(str(path))
    series = sorted((tmp_path / "export_ct").glob("*.dcm"))
    ct = [pydicom.dcmread(p, stop_before_pixels=True) for p in series]
    assert len(ct) == 28 and seg.PatientIdentityRemoved == "YES"
    assert seg.PatientID == ct[0].PatientID != source.PatientID
    assert seg.StudyInstanceUID == ct[0].StudyInstanceUID != source.StudyInstanceUID
    assert {s.SeriesInstanceUID for s in seg.ReferencedSeriesSequence} == {ct[0].SeriesInstanceUID}
    assert "ImageComments" not in seg  # free text may name anything: removed by the profile
    assert (tmp_path / "config" / "deidentify.key").stat().st_mode & 0o077 == 0  # the key is the user's alone
    assert window.segmentation_files.deidentified  # Ctrl+S keeps saving de-identified
