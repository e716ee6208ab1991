"""Segmentation ▸ Segment: the built-in starter model runs in a worker and its masks are shown."""

from __future__ import annotations

import json

import numpy as np
import pytest
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog

from medseg.errors import Cancelled
from medseg.model.package import load_package, starter_model_path


@pytest.fixture
def chest(driver, ct_dir):
    return driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")  # 512 x 512 x 48, 5 mm


def _table(window) -> dict[str, tuple[str, float]]:
    """name -> (value, ml) as the label table shows them (the starter's labels have no groups: a flat list)."""
    from medseg.gui.labels.label_tree import NAME, VALUE, VOLUME

    model = window.overlay_panel.labels.proxy
    return {model.index(row, NAME).data(): (model.index(row, VALUE).data(), float(model.index(row, VOLUME).data()))
            for row in range(model.rowCount())}


@pytest.fixture
def held_out(driver, ct_dir):
    """A DICOM series the starter never saw (its training_set.json holds it out), with TotalSegmentator's labels."""
    return driver.open_series(ct_dir / "totalsegmentator" / "example_ct_dicom")  # upper abdomen, 512 x 512 x 20


def _totalsegmentator_on(volume, path) -> np.ndarray:
    """TotalSegmentator's label map (stored LAS) on the series' grid, placed by SimpleITK from the two geometries."""
    grid = sitk.Image([int(n) for n in volume.size_xyz], sitk.sitkUInt8)
    grid.SetSpacing([float(s) for s in volume.spacing_mm])
    grid.SetOrigin([float(o) for o in volume.origin_mm])
    grid.SetDirection([float(d) for d in np.asarray(volume.direction).ravel()])
    placed = sitk.Resample(sitk.ReadImage(str(path)), grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    return sitk.GetArrayFromImage(placed)


def test_segment_shows_the_starter_masks_with_volumes(window, held_out, ct_dir, qtbot, artifacts_dir):
    series = held_out
    with qtbot.waitSignal(window.loader.segmented, timeout=600_000) as blocker:
        window.segment_action.trigger()
        assert window.cancel_button.isVisible()  # it runs in the background, cancellable
    result = blocker.args[0]
    doc = window.document
    starter = load_package(starter_model_path())
    assert result.model.name == starter.name
    assert np.array_equal(doc.label_map.array, result.label_map.array) and doc.label_map.same_grid(series)
    assert doc.history.depth == 1  # one undoable step
    assert {entry.name for entry in doc.labels.values()} == {"body", "bones"}  # the labels found (no lungs here)
    for value, entry in doc.labels.items():
        assert entry.color == starter.labels[value].color
        assert (entry.category, entry.type) == (starter.labels[value].category, starter.labels[value].type)  # coded
    # The table's ml column is voxel count x voxel volume, as the model reported it.
    rows = _table(window)
    voxel_ml = series.voxel_volume_ml
    for name, (value, ml) in rows.items():
        assert ml == pytest.approx(np.count_nonzero(doc.label_map.array == int(value)) * voxel_ml, abs=0.05)
        assert ml == pytest.approx(result.volumes_ml[name], abs=0.05)
    # Real anatomy, judged by an independent reference on a scan the starter never saw: TotalSegmentator's
    # own output for this series (not the rule labels the starter learned from; data README).
    reference = _totalsegmentator_on(series, ct_dir / "totalsegmentator" / "example_seg_dicom.nii.gz")
    label = {name: doc.label_map.array == int(value) for name, (value, _) in rows.items()}
    bones = np.isin(reference, [32, 33, 69, 70, *range(97, 104), *range(109, 116)])  # vertebrae, humeri, ribs
    assert 2 * np.count_nonzero(label["bones"] & bones) / (label["bones"].sum() + bones.sum()) > 0.6  # 0.68
    organs = reference > 0
    assert np.count_nonzero(organs & (doc.label_map.array > 0)) / organs.sum() > 0.99  # every organ in the body
    assert result.volumes_ml.get("lungs", 0.0) < 1.0  # TotalSegmentator finds no lung in this series either
    found = len(rows)
    assert starter.name in window.overlay_panel.source_label.text()
    assert f"{found} labels found" in window.overlay_panel.source_label.text()
    assert window.segment_panel.result_label.text() == window.overlay_panel.source_label.text()  # under the button too
    # the statistics dock counts the new segmentation without being asked
    stats = window.stats_panel  # in a worker: the table fills once the count is done
    qtbot.waitUntil(lambda: stats.table.rowCount() == found and stats.summary.text().startswith(f"{found} labels"),
                    timeout=60_000)
    # the model's post-processing ran (each step its model.json declares, read here with json), and the user
    # can see what it changed and that it is planned
    declared = json.loads((starter_model_path() / "model.json").read_text())["postprocessing"]
    assert len(result.postprocessing) == len(declared) == 4
    for note, step in zip(result.postprocessing, declared):
        assert step.get("label", "") in note and note.endswith("ml changed"), (note, step)
    tooltip = window.overlay_panel.source_label.toolTip()
    assert tooltip.startswith("After the network:") and all(note in tooltip for note in result.postprocessing)
    assert "then: lungs only inside the silhouette of body and bones" in window.segment_panel.plan_label.toPlainText()
    assert not window.cancel_button.isVisible()
    window.grab().save(str(artifacts_dir / "gui_segment_starter_held_out.png"))


def test_cancelled_segmentation_changes_nothing(window, chest, qtbot):
    assert window.document.label_map is None
    with qtbot.waitSignal(window.loader.failed, timeout=300_000) as blocker:
        window.segment_action.trigger()
        window.cancel_button.click()
    assert isinstance(blocker.args[0], Cancelled)
    assert window.document.label_map is None and window.document.labels == {}


def test_a_folder_that_is_not_a_model_is_refused_by_name(window, chest, qtbot, tmp_path, monkeypatch):
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(tmp_path))
    with qtbot.waitSignal(window.error_shown, timeout=60_000) as blocker:
        window.choose_model_action.trigger()  # refused when chosen, not at the next Segment (#42.1)
    # the dialog names the problem and, on its own line, the folder the user chose
    assert blocker.args[0] == ("not a model: it holds no model (no model.json, nor an nnU-Net plans.json "
                               "and dataset.json, nor an exported .onnx file with its .onnx.json)")
    assert window.segmenting.model_path() is None  # Segment still runs the built-in model
    assert window.error_box.text() == blocker.args[0]
    assert window.error_box.informativeText().splitlines()[0] == f"File: {tmp_path}"
    assert window.document.label_map is None


def test_a_label_map_opened_as_the_image_is_not_segmented(window, driver, ct_dir, qtbot, artifacts_dir):
    """A tumour mask opened as if it were the CT: Segment refuses it, as `medseg segment` and batch do."""
    mask = ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd"
    driver.open_image_file(mask)
    with qtbot.waitSignal(window.error_shown, timeout=120_000) as blocker:
        window.segment_action.trigger()
    assert blocker.args[0].startswith("this is not a CT image: its voxels are 2 whole numbers (0, 1)")
    assert window.error_box.informativeText().splitlines()[0] == f"File: {mask}"
    assert window.document.label_map is None  # nothing ran, nothing changed
    window.error_box.grab().save(str(artifacts_dir / "gui_segment_label_map_refused.png"))  # the dialog the user reads


def test_the_models_post_processing_can_be_switched_off(window, chest, qtbot, monkeypatch):
    # segment(postprocess=False) itself is tested in tests/model/test_postprocess.py; here: the
    # switch is offered for a model that declares steps, and the user's choice reaches the job
    panel = window.segment_panel
    assert panel.postprocess_box.isVisibleTo(window) and panel.postprocess
    asked = []
    monkeypatch.setattr(window.loader, "segment", lambda *args, **options: asked.append(args))
    panel.postprocess_box.setChecked(False)
    window.segment_action.trigger()
    assert asked and asked[-1][3] is False


def test_an_mr_series_is_segmented_only_when_the_user_says_so(window, driver, qtbot, ct_dir, tmp_path, artifacts_dir):
    """The starter is a CT model: on an MR series the window asks; No changes nothing, Yes runs and says so."""
    from PySide6.QtWidgets import QMessageBox

    series = _rewrite(ct_dir / "dcmqi_ct3slice_masks" / "image", tmp_path / "mr", Modality="MR")
    driver.open_series(series)
    window.segment_action.trigger()
    qtbot.waitUntil(lambda: window.segmenting.modality_box is not None and window.segmenting.modality_box.isVisible(),
                    timeout=120_000)
    assert "this series is MR" in window.segmenting.modality_box.text()
    window.segmenting.modality_box.button(QMessageBox.StandardButton.No).click()
    assert window.document.label_map is None  # No: nothing ran, nothing changed
    window.segment_action.trigger()
    qtbot.waitUntil(lambda: window.segmenting.modality_box.isVisible(), timeout=120_000)
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.segmenting.modality_box.button(QMessageBox.StandardButton.Yes).click()
    assert any("MR series" in note for note in blocker.args[0].notes)
    assert window.notice_banner.isVisible() and "MR series" in window.notice_banner.label.text()
    window.grab().save(str(artifacts_dir / "gui_segment_mr_allowed.png"))


def _rewrite(source, target, **changes):
    import pydicom

    target.mkdir(parents=True)
    for path in sorted(source.iterdir()):
        dataset = pydicom.dcmread(path)
        for keyword, value in changes.items():
            setattr(dataset, keyword, value)
        dataset.save_as(target / path.name)
    return target


def test_segment_is_the_edit_catalogues_segment_operation(window, driver, ct_dir, qtbot, tmp_path, monkeypatch):
    """The window's Segment performs the catalogue's model-backed `segment` operation (registered before the
    window was built, by medseg.workflows): the model runs in the worker, the operation merges its result on
    the GUI thread as one undoable step."""
    import dataclasses

    from medseg.edit.operations import CATALOGUE
    from medseg.workflows.edit_operations import RESULT

    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(ct_dir / "dcmqi_ct3slice_masks" / "image")))
    crop = tmp_path / "crop.nii.gz"
    sitk.WriteImage(reader.Execute()[176:336, 256:416, :], str(crop))  # spine and body wall: the starter's in seconds
    op = CATALOGUE["segment"]
    performed = []

    def run(document, values, context):
        performed.append(values)
        return op.run(document, values, context)

    monkeypatch.setitem(CATALOGUE, "segment", dataclasses.replace(op, run=run))
    driver.open_image_file(crop)
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.segment_action.trigger()
    result = blocker.args[0]
    assert len(performed) == 1 and performed[0][RESULT] is result and performed[0]["mode"] == "replace"
    doc = window.document
    assert np.array_equal(doc.label_map.array, result.label_map.array)
    assert doc.history.depth == 1 and doc.history.next_undo() == f"Segment ({result.model.name})"
