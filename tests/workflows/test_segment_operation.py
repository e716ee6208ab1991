"""Segment as an operation of the edit catalogue (registered by medseg.workflows: edit never imports model):
previewable, undoable and journalled like grow from seeds, a `medseg edit --segment` flag, and what a
Segment writes is what the segment use case returns, merged around the user's locked labels.

Real CT: a crop of the smallest real series (3 slices, GE), so the starter runs in seconds."""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.cli import build_parser, main
from medseg.core.labels import Label
from medseg.edit.document import SegmentationDocument
from medseg.edit.journal import find_sessions, recover
from medseg.edit.label_map import LabelMap
from medseg.edit.operations import CATALOGUE
from medseg.errors import ModalityMismatch, ModelError
from medseg.workflows.edit_operations import RESULT, register_operations
from medseg.workflows.segment import SegmentRequest, segment_study
from medseg.workflows.studies import OpenStudyRequest, open_study

MINE = 9  # a label the user drew and locked


@pytest.fixture(scope="module")
def crop(three_slices: Path, tmp_path_factory) -> Path:
    """The middle 160 x 160 of the three slices (the spine and the body wall in it), as SimpleITK reads them."""
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(three_slices)))
    image = reader.Execute()
    path = tmp_path_factory.mktemp("crop") / "crop.nii.gz"
    sitk.WriteImage(image[176:336, 256:416, :], str(path))
    return path


@pytest.fixture(scope="module")
def image(crop: Path):
    return open_study(OpenStudyRequest(crop)).volume


@pytest.fixture(scope="module")
def expected(image):
    """The segment use case's own result on the same image (what the operation must merge)."""
    return segment_study(SegmentRequest(image))


def _document_with_a_locked_label(image, root: Path) -> tuple[SegmentationDocument, np.ndarray]:
    doc = SegmentationDocument()
    doc.enable_autosave(root)
    doc.set_volume(image, source="crop")
    array = np.zeros(image.shape_zyx, dtype=np.uint8)
    array[:, 60:100, 60:100] = MINE
    doc.set_label_map(LabelMap.from_volume(image.with_array(array), {MINE: Label(MINE, "mine", locked=True)}))
    return doc, array


def test_segment_previews_then_writes_one_undoable_journalled_step(image, expected, tmp_path: Path) -> None:
    register_operations()
    op = CATALOGUE["segment"]
    doc, before = _document_with_a_locked_label(image, tmp_path)
    values = {"model": "starter", "mode": "replace"}
    change = op.preview(doc, values)  # runs the model here, writes nothing
    assert np.array_equal(doc.label_map.array, before) and doc.history.depth == 0
    # the user's locked label stays where it was; every other voxel is the model's
    after = np.where(before == MINE, MINE, expected.label_map.array)
    assert change.count == np.count_nonzero(after != before) > 0
    assert {v: e.name for v, e in change.labels.items()} == {v: e.name for v, e in expected.labels.items()}
    assert op.perform(doc, values, description="Segment (starter)")
    assert np.array_equal(doc.label_map.array, after)
    assert {e.name for e in doc.labels.values()} == {"mine", *(e.name for e in expected.labels.values())}
    assert doc.history.depth == 1 and doc.history.next_undo() == "Segment (starter)"
    # journalled: what a crash now leaves is recovered voxel for voxel
    (session,) = find_sessions(tmp_path)
    assert np.array_equal(recover(session.folder)[1].array, after)
    doc.undo()
    assert np.array_equal(doc.label_map.array, before) and set(doc.labels) == {MINE}
    doc.close_journal()


def test_add_keeps_every_label_drawn_and_a_result_computed_elsewhere_is_merged_as_is(image, expected,
                                                                                      tmp_path: Path) -> None:
    """The GUI runs the model in a worker and hands the result to the operation (no second run)."""
    register_operations()
    op = CATALOGUE["segment"]
    doc, before = _document_with_a_locked_label(image, tmp_path)
    unlocked = replace(doc.labels[MINE], locked=False)
    doc.set_label_map(LabelMap.from_volume(image.with_array(before), {MINE: unlocked}))
    poisoned = replace(expected, label_map=expected.label_map.with_array(np.full(image.shape_zyx, 1, np.uint8)))
    assert op.perform(doc, {"model": "starter", "mode": "add", RESULT: poisoned})
    # add: only where there was no label, and the result given (all body here), not a new run
    assert np.array_equal(doc.label_map.array, np.where(before == MINE, MINE, 1))
    doc.close_journal()


def test_another_modality_is_refused_unless_allowed_then_said(image, tmp_path: Path) -> None:
    register_operations()
    op = CATALOGUE["segment"]
    mr = image.with_array(image.array, modality="MR")
    doc = SegmentationDocument()
    doc.set_volume(mr)
    with pytest.raises(ModalityMismatch):
        op.preview(doc, {"model": "starter", "mode": "replace"})
    assert doc.label_map is None
    said: list[tuple[str, str]] = []
    doc.notice.connect(lambda text, level: said.append((text, level)))
    assert op.perform(doc, {"model": "starter", "mode": "replace", "allow_modality": True})
    assert [level for _, level in said] == ["warning"] and "MR" in said[0][0]
    with pytest.raises(ModelError, match="no such model"):
        op.preview(doc, {"model": str(tmp_path / "nothing"), "mode": "replace"})


def test_it_is_registered_once_before_the_command_line_is_built() -> None:
    parser = build_parser()
    edit = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction)).choices["edit"]
    flags = {a.option_strings[0]: a for a in edit._actions if a.option_strings}
    assert tuple(flags["--segment"].metavar) == ("MODEL", "MODE") and flags["--allow-modality"].nargs == 0
    register_operations()
    register_operations()
    assert list(CATALOGUE).count("segment") == 1


def test_medseg_edit_segment_writes_what_medseg_segment_writes(crop: Path, tmp_path: Path, capsys) -> None:
    """`--segment` then an operation on a label the model made (by value: checked before anything runs)."""
    from scipy import ndimage

    segmented, edited = tmp_path / "segment.nii.gz", tmp_path / "edit.nii.gz"
    assert main(["segment", str(crop), "-o", str(segmented)]) == 0
    assert main(["edit", str(crop), "-o", str(edited), "--segment", "starter", "replace", "--keep-largest", "3"]) == 0
    out = capsys.readouterr().out
    assert "--segment starter replace:" in out and "--keep-largest 3:" in out
    ours, theirs = (sitk.GetArrayFromImage(sitk.ReadImage(str(p))) for p in (edited, segmented))
    bones = theirs == 3
    islands, count = ndimage.label(bones, structure=np.ones((3, 3, 3)))  # scipy: 26-connected, the oracle
    assert count > 1  # something for keep-largest to remove, so the check below can fail
    largest = islands == 1 + int(np.argmax(np.bincount(islands[bones])[1:]))
    assert np.array_equal(ours == 3, largest)
    assert np.array_equal(ours[~bones], theirs[~bones]) and not ours[bones & ~largest].any()
    sidecar = Path(str(edited).replace(".nii.gz", ".labels.json")).read_text()
    assert '"name": "bones"' in sidecar and '"name": "body"' in sidecar
    # an unknown model is named before anything runs, and nothing is written
    missing = tmp_path / "x.nii.gz"
    assert main(["edit", str(crop), "-o", str(missing), "--segment", str(tmp_path / "nothing"), "add"]) == 1
    assert "no such model" in capsys.readouterr().err and not missing.exists()
