"""The document keeps each label's provenance and its saved state itself, on pyradiomics' real chest CT and
its real nodule mask; a Segment result is the rule labels of the same CT (body, lungs, bones), stamped as a
model's output, so the document's bookkeeping is checked against voxels it did not compute."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medseg.core.labels import AUTOMATIC, MANUAL, SEMIAUTOMATIC, Label, Provenance
from medseg.edit import tools
from medseg.edit.document import SegmentationDocument
from medseg.edit.journal import recover
from medseg.edit.merge import ADD, REPLACE, Segmentation
from medseg.edit.operations import CATALOGUE, merge_segmentation
from medseg.io import read_image
from medseg.model.rule_labels import rule_label_map

MODEL = Provenance.model("rules", "1")
RESULT_LABELS = {1: Label(1, "body", provenance=MODEL), 2: Label(2, "lungs", provenance=MODEL),
                 3: Label(3, "bones", provenance=MODEL)}


def _deep_inside(mask: np.ndarray, spacing_zyx) -> tuple[int, int, int]:
    """The voxel of ``mask`` farthest from its outside (a dab there touches nothing else)."""
    from scipy import ndimage

    depth = ndimage.distance_transform_edt(mask, sampling=spacing_zyx)
    assert depth.max() > 10.0
    return tuple(int(i) for i in np.unravel_index(np.argmax(depth), mask.shape))


@pytest.fixture(scope="module")
def lung1(ct_dir: Path):
    folder = ct_dir / "pyradiomics_lung1"
    image = read_image(folder / "lung1_image.nrrd")
    nodule = read_image(folder / "lung1_label.nrrd")
    return image, nodule, rule_label_map(image)


@pytest.fixture
def doc(lung1):
    image, nodule, _ = lung1
    document = SegmentationDocument()
    document.set_volume(image, source="lung1_image.nrrd")
    document.set_label_map(image.with_array(np.array(nodule.array, copy=True)), {1: Label(1, "nodule")})
    return document


def test_a_renumbered_segment_result_is_recorded_as_the_models_and_the_nodule_stays_the_users(doc, lung1):
    _, nodule, rules = lung1
    doc.set_label_locked(1, True)
    before = doc.label_map.array.copy()
    preview = CATALOGUE["merge-segmentation"].preview(doc, {"segmentation": Segmentation(rules, RESULT_LABELS),
                                                             "mode": REPLACE})
    assert np.array_equal(doc.label_map.array, before) and doc.history.depth == 0  # a preview writes nothing
    assert merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), REPLACE, "Segment (rules)")
    assert preview.count == int((doc.label_map.array != before).sum())
    assert doc.history.next_undo() == "Segment (rules)"
    # the result's body (1) met the user's nodule (1): it went to a free value, and the table says who made what
    body = next(v for v, e in doc.labels.items() if e.name == "body")
    assert body not in (1, 2, 3)
    np.testing.assert_array_equal(doc.label_map.array == 1, nodule.array == 1)
    np.testing.assert_array_equal(doc.label_map.array == body, (rules.array == 1) & (nodule.array != 1))
    assert doc.labels[1].provenance.algorithm_type == MANUAL and doc.labels[1].name == "nodule"
    assert doc.labels[body].provenance == MODEL and doc.labels[2].provenance == MODEL
    # a person edits the model's lungs: SEMIAUTOMATIC, and undo makes them the model's again
    lungs = _deep_inside(doc.label_map.array == 2, doc.volume.spacing_zyx)
    assert doc.apply(tools.dab(doc.label_map, lungs, 8.0, 0, erase=True), "erase")
    assert doc.labels[2].provenance.algorithm_type == SEMIAUTOMATIC and doc.labels[2].provenance.algorithm_name == "rules"
    assert doc.labels[body].provenance == MODEL  # untouched labels stay the model's
    doc.undo()
    assert doc.labels[2].provenance == MODEL
    doc.redo()
    assert doc.labels[2].provenance.algorithm_type == SEMIAUTOMATIC
    # undoing the Segment takes its labels out of the table again
    doc.undo()
    doc.undo()
    assert {e.name for e in doc.labels.values()} == {"nodule"}


def test_add_keeps_every_voxel_on_screen_and_adds_only_new_labels(doc, lung1):
    _, nodule, rules = lung1
    assert [e.name for e in doc.labels_not_made_by("rules", "1")] == ["nodule"]  # what Segment must ask about
    before = doc.label_map.array.copy()
    assert merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), ADD, "Segment (rules)")
    after = doc.label_map.array
    assert np.array_equal(after[before != 0], before[before != 0])  # every nodule voxel kept
    by_name = {e.name: v for v, e in doc.labels.items()}
    for value, entry in RESULT_LABELS.items():
        np.testing.assert_array_equal(after == by_name[entry.name], (rules.array == value) & (before == 0))
    # a second run of the same model adds nothing: every label of its result is here already
    merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), ADD, "Segment (rules)")
    np.testing.assert_array_equal(doc.label_map.array, after)
    assert doc.labels_not_made_by("rules", "1") == [doc.labels[1]]  # the nodule is still the user's


def test_replace_asks_about_nothing_the_model_made(doc, lung1):
    _, _, rules = lung1
    doc.clear_label_map()
    merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), REPLACE, "Segment (rules)")
    assert doc.labels_not_made_by("rules", "1") == []
    assert len(doc.labels_not_made_by("rules", "2")) == 3  # another version of the model is not this run
    body = np.argwhere(doc.label_map.array == 1)[0]
    doc.apply(tools.dab(doc.label_map, body, 5.0, 3), "brush bones")
    assert {e.name for e in doc.labels_not_made_by("rules", "1")} == {"body", "bones"}  # edited: ask


def test_undo_back_to_the_saved_state_is_saved(doc):
    assert not doc.unsaved
    centre = (24, 250, 250)
    doc.apply(tools.dab(doc.label_map, centre, 6.0, 2), "brush")
    assert doc.unsaved
    doc.undo()
    assert not doc.unsaved  # the state it was opened in
    doc.redo()
    saved_at = doc.history_position
    doc.mark_saved()
    doc.apply(tools.dab(doc.label_map, (30, 200, 200), 6.0, 2), "brush")
    doc.apply(tools.dab(doc.label_map, (30, 300, 200), 6.0, 2), "brush")
    assert doc.unsaved
    doc.undo()
    doc.undo()
    assert not doc.unsaved and doc.history_position == saved_at
    doc.undo()
    assert doc.unsaved  # before the saved state
    doc.redo()
    assert not doc.unsaved
    doc.undo()
    doc.apply(tools.dab(doc.label_map, (20, 250, 300), 4.0, 2), "another brush")  # the saved state is gone for good
    assert doc.unsaved
    doc.undo()
    assert doc.unsaved
    # a save that was started before the last edit marks only what it wrote as saved
    before_edit = doc.history_position
    doc.apply(tools.dab(doc.label_map, (20, 250, 300), 4.0, 2), "brush while saving")
    doc.mark_saved(before_edit)
    assert doc.unsaved
    doc.undo()
    assert not doc.unsaved


def test_the_journal_keeps_provenance_and_locks_for_recovery(doc, lung1, tmp_path):
    _, _, rules = lung1
    doc.enable_autosave(tmp_path)  # the label map open now is the journal's first base
    doc.set_label_locked(1, True)
    doc.set_label_map(doc.label_map.with_array(doc.label_map.array.copy()), dict(doc.labels))
    merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), REPLACE, "Segment (rules)")
    lungs = _deep_inside(doc.label_map.array == 2, doc.volume.spacing_zyx)
    doc.apply(tools.dab(doc.label_map, lungs, 8.0, 0, erase=True), "erase")
    source, recovered = recover(doc.journal.folder)
    assert source == "lung1_image.nrrd"
    np.testing.assert_array_equal(recovered.array, doc.label_map.array)
    assert recovered.labels == doc.labels  # names, colours, locks and who made each label
    assert recovered.labels[1].locked and recovered.labels[2].provenance.algorithm_type == SEMIAUTOMATIC
    assert recovered.labels[3].provenance.algorithm_type == AUTOMATIC
    doc.close_journal()


def test_replace_keeps_the_models_values_and_the_replaced_labels_leave_the_table(doc, lung1):
    """Issue 52 (1): Replace over an unlocked user label: the model's values stay the model's (body is 1 as the
    model wrote it) and the label it replaced leaves the table (no empty row); undo puts it back."""
    _, nodule, rules = lung1
    doc.add_label("empty row the user made")  # an entry with no voxels is replaced too
    assert merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), REPLACE, "Segment (rules)")
    assert {v: e.name for v, e in doc.labels.items()} == {1: "body", 2: "lungs", 3: "bones"}
    assert all(entry.model_value is None for entry in doc.labels.values())  # nothing moved
    np.testing.assert_array_equal(doc.label_map.array, rules.array)  # every voxel is the model's, value for value
    doc.undo()
    assert {e.name for e in doc.labels.values()} == {"nodule", "empty row the user made"}
    np.testing.assert_array_equal(doc.label_map.array, nodule.array)


def test_values_that_must_move_are_said_and_recorded_for_the_sidecar(doc, lung1, tmp_path):
    """Add over the user's nodule (value 1): the model's body cannot be 1; it moves, the change says so, and
    the saved sidecar records body's model value (1) beside its value here."""
    import json

    from medseg.io.label_files import sidecar_path, write_label_map

    _, nodule, rules = lung1
    said: list[tuple[str, str]] = []
    doc.notice.connect(lambda text, level: said.append((text, level)))
    assert merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), ADD, "Segment (rules)")
    body = next(v for v, e in doc.labels.items() if e.name == "body")
    assert body == 4 and doc.labels[2].name == "lungs" and doc.labels[3].name == "bones"  # 2, 3 free: kept
    assert doc.labels[body].model_value == 1 and doc.labels[2].model_value is None
    assert [level for _, level in said] == ["warning"] and "body 1 \u2192 4" in said[0][0]
    written, _ = write_label_map(doc.label_map, tmp_path / "seg.nii.gz", list(doc.labels.values()), doc.volume)
    rows = {row["name"]: row for row in json.loads(sidecar_path(written).read_text())["labels"]}
    assert rows["body"]["value"] == 4 and rows["body"]["model_value"] == 1
    assert "model_value" not in rows["lungs"] and "model_value" not in rows["nodule"]
    from medseg.io.label_files import read_sidecar

    back = {label.name: label for label in read_sidecar(written)[0]}
    assert back["body"].model_value == 1


def test_replace_moves_only_a_value_a_locked_label_holds(doc, lung1):
    _, nodule, rules = lung1
    doc.set_label_locked(1, True)
    assert merge_segmentation(doc, Segmentation(rules, RESULT_LABELS), REPLACE, "Segment (rules)")
    names = {v: e.name for v, e in doc.labels.items()}
    assert names == {1: "nodule", 2: "lungs", 3: "bones", 4: "body"} and doc.labels[4].model_value == 1
    np.testing.assert_array_equal(doc.label_map.array == 2, (rules.array == 2) & (nodule.array != 1))
