"""Several TotalSegmentator tasks in one Segment, from the window: the Segment panel's task picker (grouped,
not-installed tasks greyed with Install), one run into one document with distinct values and each
structure's source task, the moved values said, and one DICOM SEG naming each task as its algorithm.

The tasks (liver_vessels, kidney_cysts: both cropped by the 6 mm total network, which this run runs once)
are imported into a temporary model folder (as `medseg models import` does) from weights in TotalSegmentator's
exact layout with tiny random networks (tests/model/ts_fixture.py's make_task_weights).
The oracle for the labels: each task run on its own through the segment use case, and TotalSegmentator's
own class maps (map_to_binary) for which values each task writes; the merge rule (the first task keeps
its values, the later one's colliding values move to the next free ones) is applied here by hand.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtCore import Qt
from PySide6.QtWidgets import QDialogButtonBox

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from ts_fixture import make_task_weights

TASKS = ("liver_vessels", "kidney_cysts")  # the picker's order: vessels before lesions
IDS = tuple(f"totalsegmentator/{task}" for task in TASKS)
LIVER = 5  # the 6 mm total network's liver (both tasks crop around it; kidney_cysts around more)
# TotalSegmentator's example DICOM series (20 slices, 3 mm), cut in-plane to 96 x 96 pixels at the liver: a SEG
# references DICOM, and a small series keeps the run short
ROWS, COLUMNS = slice(160, 256), slice(96, 192)


def small_dicom_series(ct_dir: Path, out: Path) -> Path:
    """The example series cut to ROWS x COLUMNS: each slice's pixels and its position, new UIDs (a derived series)."""
    import pydicom
    from pydicom.uid import ExplicitVRLittleEndian, generate_uid

    out.mkdir()
    series = generate_uid()
    for path in sorted((ct_dir / "totalsegmentator" / "example_ct_dicom").iterdir()):
        ds = pydicom.dcmread(path)
        pixels = ds.pixel_array[ROWS, COLUMNS].copy()
        rows_dir, cols_dir = np.array(ds.ImageOrientationPatient[:3], float), np.array(ds.ImageOrientationPatient[3:])
        row_mm, col_mm = (float(v) for v in ds.PixelSpacing)  # between rows, between columns
        origin = np.array(ds.ImagePositionPatient, float) + COLUMNS.start * col_mm * rows_dir \
            + ROWS.start * row_mm * cols_dir
        ds.ImagePositionPatient = [f"{v:.6f}" for v in origin]
        ds.Rows, ds.Columns = pixels.shape
        ds.PixelData = pixels.tobytes()
        ds.file_meta.TransferSyntaxUID = ExplicitVRLittleEndian
        ds.SeriesInstanceUID = series
        ds.SOPInstanceUID = ds.file_meta.MediaStorageSOPInstanceUID = generate_uid()
        ds.save_as(out / path.name, enforce_file_format=True)
    return out


@pytest.fixture(scope="module")
def weights(tmp_path_factory) -> Path:
    """Both tasks' networks and their crop network, which finds the liver everywhere (the crops are the whole
    image here: tests/workflows/test_segment_many_shared_crop.py checks real crops, shared)."""
    root = tmp_path_factory.mktemp("two-tasks") / "weights"
    for task in TASKS:
        make_task_weights(root, task, favour={298: LIVER})
    return root


@pytest.fixture
def models_home(tmp_path, monkeypatch, weights):
    from medseg.catalogue.install import import_path

    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    for model_id in IDS:
        import_path(weights, model_id=model_id, accept_licence=True)
    return tmp_path / "models"


def test_tick_two_tasks_segment_into_one_document_and_save_one_seg(models_home, window, driver, ct_dir, tmp_path,
                                                                   qtbot, monkeypatch, artifacts_dir):
    import highdicom as hd
    import pydicom
    from totalsegmentator.map_to_binary import class_map

    from medseg.catalogue.task_groups import TASK_GROUPS, task_group
    from medseg.gui.common import save_dialog
    from medseg.gui.segment.task_picker import ID_ROLE
    from medseg.workflows.segment import Segmenter, SegmentSettings

    volume = driver.open_series(small_dicom_series(ct_dir, tmp_path / "series"))
    window.resize(1280, 800)
    qtbot.waitUntil(lambda: window.width() == 1280)
    panel = window.segment_panel
    qtbot.waitUntil(panel.tasks_button.isVisible)  # a task is installed: the picker is offered
    assert panel.tasks == () and not panel.structures_button.isVisible()  # the starter takes no subset

    qtbot.mouseClick(panel.tasks_button, Qt.MouseButton.LeftButton)
    picker = panel.task_picker
    qtbot.waitUntil(picker.isVisible)
    order = list(TASK_GROUPS)  # organs, vessels, heart, head and neck, muscles, bones, lesions, other
    shown = list(picker.groups)
    assert {"organs", "vessels", "lesions"} <= set(shown) and shown == sorted(shown, key=order.index)
    for model_id, task in zip(IDS, TASKS):  # each installed task under its group, tickable
        item = picker.items[model_id]
        assert item.parent() is picker.groups[task_group(task)]
        assert item.flags() & Qt.ItemFlag.ItemIsUserCheckable and item.checkState(0) == Qt.CheckState.Unchecked
    greyed = picker.items["totalsegmentator/liver_segments"]  # not installed: listed, greyed, not tickable
    assert greyed.text(0).endswith("— not installed") and not greyed.flags() & Qt.ItemFlag.ItemIsUserCheckable
    picker.tree.setCurrentItem(greyed)
    assert picker.install_button.isEnabled()  # Install… offered for it
    picker.tree.setCurrentItem(picker.items[IDS[0]])
    assert not picker.install_button.isEnabled()
    for model_id in IDS:
        picker.items[model_id].setCheckState(0, Qt.CheckState.Checked)
    assert picker.count_label.text() == "2 tasks ticked"
    picker.grab().save(str(artifacts_dir / "gui_task_picker.png"))
    qtbot.mouseClick(picker.buttons.button(QDialogButtonBox.StandardButton.Ok), Qt.MouseButton.LeftButton)
    assert panel.tasks == IDS and picker.items[IDS[0]].data(0, ID_ROLE) == IDS[0]
    assert panel.tasks_button.text() == "Tasks: 2 (liver_vessels + kidney_cysts)…"
    assert "2 TotalSegmentator tasks" in panel.plan_label.toPlainText()
    assert panel.model_label.text() == "Runs: <b>2 tasks</b> (not the model above)"
    assert not panel.postprocess_box.isVisible() and panel.configuration is None  # each task runs its own
    scroll, side = window.side_scroll, window.side_scroll.widget()
    qtbot.waitUntil(lambda: side.width() <= scroll.viewport().width())  # the panel never passes its dock
    window.grab().save(str(artifacts_dir / "gui_segment_panel_tasks_1280x800.png"))

    texts = []
    window.loader.progressed.connect(lambda _f, text: texts.append(text))
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    result = blocker.args[0]
    assert result.model.name == " + ".join(IDS)
    firsts = [next(i for i, t in enumerate(texts) if t.startswith(f"{model_id} ({n} of 2)"))
              for n, model_id in enumerate(IDS, 1)]
    assert firsts == sorted(firsts)  # progress per task, in order

    window.grab().save(str(artifacts_dir / "gui_segment_tasks_result_1280x800.png"))
    # the oracle: each task alone, merged by the rule, with TotalSegmentator's own class maps
    alone = [Segmenter(model_id, SegmentSettings(device="cpu")).segment(volume) for model_id in IDS]
    first_values = set(class_map[TASKS[0]])
    second = {v: v if v not in first_values else max(first_values) + i + 1
              for i, v in enumerate(sorted(v for v in class_map[TASKS[1]] if v in first_values))}
    second.update({v: v for v in class_map[TASKS[1]] if v not in first_values})
    expected = alone[0].label_map.array.astype(np.int32)
    theirs = alone[1].label_map.array
    mapped = np.vectorize(lambda v: second.get(int(v), 0))(theirs)
    expected = np.where(theirs != 0, mapped, expected)
    document = window.document
    assert np.array_equal(document.label_map.array, expected)
    made_by = {v: e.provenance.algorithm_name for v, e in document.labels.items() if document.label_map.voxel_count(v)}
    assert set(made_by.values()) == set(IDS)  # both tasks' structures are there, each with its source
    for value, entry in document.labels.items():
        if value in made_by:
            task = TASKS[IDS.index(made_by[value])]
            own = value if task == TASKS[0] else next(v for v, t in second.items() if t == value)
            assert entry.name == class_map[task][own]
    table = window.overlay_panel.labels.model  # the label table: each structure's tooltip names its task
    for value, model_id in made_by.items():
        tooltip = table.data(table.index_of(value), Qt.ItemDataRole.ToolTipRole)
        assert f"made by {model_id}" in tooltip, tooltip
    moved = {v: t for v, t in second.items() if v != t}
    assert moved and window.notice_banner.isVisible()
    said = window.notice_banner.label.text()
    assert f"{IDS[1]}: {len(moved)} label value(s) moved" in said
    assert "moved to keep your labels" not in said  # nothing of the user's was there: the tasks' move, said once

    # Segment again: the labels are the two tasks' untouched output, so nothing is asked and they are replaced
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert window.editing.segment_box is None and np.array_equal(document.label_map.array, expected)

    seg_path = tmp_path / "two_tasks.dcm"
    failures = []
    window.segmentation_files.failed.connect(failures.append)
    # one DICOM SEG, then a NIfTI label map with its sidecar (where moved values are recorded)
    for path, chosen in ((seg_path, ""), (tmp_path / "two_tasks", "NIfTI label map (*.nii.gz)")):
        monkeypatch.setattr(save_dialog, "ask_save_path_with_option",
                            lambda *a, p=path, c=chosen, **k: (str(p), c, False))
        with qtbot.waitSignal(window.segmentation_files.saved, timeout=120_000):
            window.save_as_action.trigger()
    assert not failures
    seg = hd.seg.segread(seg_path)
    segments = {int(item.SegmentNumber): item for item in pydicom.dcmread(seg_path).SegmentSequence}
    algorithms = {str(item.SegmentationAlgorithmIdentificationSequence[0].AlgorithmName)
                  for item in segments.values()}
    assert algorithms == set(IDS)  # each task its own algorithm identification
    assert seg.number_of_segments == len(made_by)
    sidecar = json.loads((tmp_path / "two_tasks.labels.json").read_text())
    rows = {r["value"]: r for r in sidecar["labels"]}
    assert {t: rows[t].get("model_value") for t in moved.values() if t in made_by} == {
        t: v for v, t in moved.items() if t in made_by}  # the sidecar says which values moved, and from what
