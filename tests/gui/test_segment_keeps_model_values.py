"""Issue 52 (1): a TotalSegmentator model's labels keep TotalSegmentator's numbers in the window, as on the
command line, when Segment runs into a study that already has a label map (values 1–7).

*Replace* replaces: the table holds the model's labels at TotalSegmentator's own values (the oracle is
TotalSegmentator's class map, ``totalsegmentator.map_to_binary.class_map``), the old labels are gone (no empty
rows), and the Label statistics dock lists the same values with the same names. *Add* keeps the user's labels:
the model's values that collide move, the window says which, and the saved sidecar records the model's value.
The model is TotalSegmentator's layout with small random weights (tests/model/ts_fixture.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from PySide6.QtWidgets import QFileDialog

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from infer_fixtures import ct_crop
from ts_fixture import make_totalseg_weights

from medseg.model.totalseg import import_totalsegmentator_task

ABDOMEN_SMALL = ("totalsegmentator/example_ct_sm.nii.gz", (slice(5, 25), slice(30, 54), slice(30, 62)))


@pytest.fixture(scope="module")
def ts_model(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ts-values")
    weights = make_totalseg_weights(root / "weights", [297, 298], patch_size=(32, 32, 32), n_stages=3)
    return import_totalsegmentator_task(weights, root / "model")


def _open_with_labels(driver, ct_dir, tmp_path, values):
    """The abdomen crop opened, and a label map of ``values`` (one-voxel-thick slabs along x, no sidecar, so
    named "label N") opened onto it."""
    image = ct_crop(ct_dir, ABDOMEN_SMALL)
    path = tmp_path / "abdomen.nii.gz"
    sitk.WriteImage(image, str(path))
    volume = driver.open_image_file(path)
    labels = np.zeros(sitk.GetArrayFromImage(image).shape, np.uint8)
    for slab, value in enumerate(values):
        labels[:, :, 3 * slab + 2] = value
    mine = sitk.GetImageFromArray(labels)
    mine.CopyInformation(image)
    sitk.WriteImage(mine, str(tmp_path / "mine.nii.gz"))
    driver.open_segmentation(tmp_path / "mine.nii.gz")
    return volume, labels


def _from_sitk(image):
    import tempfile

    from medseg.io import read_image

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "image.nii.gz"
        sitk.WriteImage(image, str(path))
        return read_image(path)


def _segment(window, qtbot, ts_model, monkeypatch, answer: str):
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(ts_model))
    window.choose_model_action.trigger()
    window.segment_action.trigger()
    box = window.editing.segment_box
    assert box is not None and "label 1" in box.text()  # the user's labels: asked first
    button = window.editing.segment_replace_button if answer == "replace" else window.editing.segment_add_button
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        button.click()
    return blocker.args[0]


def _stats_rows(window, qtbot) -> dict[int, str]:
    panel = window.stats_panel
    with qtbot.waitSignal(panel.counted, timeout=60_000):
        panel.refresh()
    rows = {}
    for row in range(panel.table.rowCount()):
        value, name = panel.table.item(row, 0).text().split("  ", 1)
        rows[int(value)] = name
    return rows


def test_replace_keeps_totalsegmentators_values_and_drops_the_old_labels(window, driver, ct_dir, tmp_path, ts_model,
                                                                         qtbot, monkeypatch, artifacts_dir):
    from totalsegmentator.map_to_binary import class_map

    _open_with_labels(driver, ct_dir, tmp_path, range(1, 8))  # the study: a label map of values 1-7
    doc = window.document
    assert sorted(doc.labels) == list(range(1, 8))
    assert sorted(_stats_rows(window, qtbot)) == list(range(1, 8))
    result = _segment(window, qtbot, ts_model, monkeypatch, "replace")
    stats = window.stats_panel  # at once, while the new result is still being counted: no row of a gone label
    shown_now = {int(stats.table.item(row, 0).text().split("  ", 1)[0]) for row in range(stats.table.rowCount())}
    assert shown_now <= set(doc.labels), shown_now - set(doc.labels)
    np.testing.assert_array_equal(doc.label_map.array, result.label_map.array)  # Replace: every voxel the model's
    present = {int(v) for v in np.unique(result.label_map.array) if v}
    assert len(present) >= 5
    table = {value: entry.name for value, entry in doc.labels.items()}
    assert table == {value: class_map["total"][value] for value in present}  # TotalSegmentator's own numbers
    assert not any(name.startswith("label ") for name in table.values())  # no empty rows of the old labels
    panel = window.overlay_panel.labels
    groups = [name for name, _ in panel.model.groups]
    assert groups and not any(name.startswith("other") for name in groups)  # no group of leftover rows
    for value, name in table.items():  # the label table's rows say the same
        assert panel.model.data(panel.model.index_of(value)) == name
    assert _stats_rows(window, qtbot) == table  # the statistics dock agrees, value for value
    window.grab().save(str(artifacts_dir / "segment_replace_keeps_model_values.png"))
    doc.undo()  # one step: the user's labels come back
    assert sorted(doc.labels) == list(range(1, 8))


def test_add_moves_only_colliding_values_says_so_and_the_sidecar_records_them(window, driver, ct_dir, tmp_path,
                                                                              ts_model, qtbot, monkeypatch,
                                                                              artifacts_dir):
    from totalsegmentator.map_to_binary import class_map

    from medseg.model.totalseg import load_totalseg_model, segment_totalseg

    # the user's labels hold values the model will find here (so they collide), and two it will not
    image = ct_crop(ct_dir, ABDOMEN_SMALL)
    found = segment_totalseg(_from_sitk(image), load_totalseg_model(ts_model), "3mm")[0].label_map.array
    users = [*sorted(int(v) for v in np.unique(found) if v)[:3], 200, 201]
    _, mine = _open_with_labels(driver, ct_dir, tmp_path, users)
    doc = window.document
    result = _segment(window, qtbot, ts_model, monkeypatch, "add")
    after = doc.label_map.array
    np.testing.assert_array_equal(after[mine > 0], mine[mine > 0])  # the user's labels keep every voxel
    model = {int(v) for v in np.unique(result.label_map.array[mine == 0]) if v}
    moved = {}
    for value, entry in doc.labels.items():
        if value in users:
            assert entry.name == f"label {value}"
            continue
        expected = entry.model_value if entry.model_value is not None else value
        assert entry.name == class_map["total"][expected]
        np.testing.assert_array_equal(after == value, (result.label_map.array == expected) & (mine == 0))
        if entry.model_value is not None:
            moved[entry.model_value] = value
    collided = model & set(users)
    assert collided and set(moved) == collided  # only the values the user's labels hold moved
    assert all(class_map["total"][v] in doc.labels[moved[v]].name for v in collided)
    first = min(collided)
    said = f"{class_map['total'][first]} {first} \u2192 {moved[first]}"
    assert window.notice_banner.isVisible() and said in window.notice_banner.label.text()  # stays until read
    assert any(said in message.text for message in window.messages.history)
    assert _stats_rows(window, qtbot) == {v: e.name for v, e in doc.labels.items() if (after == v).any()}
    window.grab().save(str(artifacts_dir / "segment_add_moves_colliding_values.png"))

    out = tmp_path / "saved.nii.gz"
    files = window.segmentation_files
    with qtbot.waitSignal(files.saved, timeout=60_000):
        assert files.save_to(out)
    rows = {row["value"]: row for row in json.loads((tmp_path / "saved.labels.json").read_text())["labels"]}
    for model_value, value in moved.items():
        assert rows[value]["model_value"] == model_value and rows[value]["name"] == class_map["total"][model_value]
