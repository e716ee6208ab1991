"""The mouse tools are catalogue operations too: ``medseg edit --brush/--erase/--fill/--keep-island`` paint
on real CT what an independent computation (NumPy distances, SciPy/SimpleITK connected components) says;
``--merge-segmentation`` is a Segment's last step in batch; and a higher layer adds a model-backed operation
through the registration hook, previewable, undoable and journalled like the built-in ones."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
from edit_cases import CARTILAGES
from scipy import ndimage

from medseg.cli import build_parser, main
from medseg.core.labels import Label, Provenance
from medseg.edit.document import SegmentationDocument
from medseg.edit.effects import EFFECTS
from medseg.edit.journal import recover
from medseg.edit.merge import Segmentation, merge_change
from medseg.edit.operations import CATALOGUE, EditOperation, Parameter, register, tools, unregister
from medseg.edit.recipe import Operation, run_operations, validate
from medseg.errors import MedsegError
from medseg.io import read_image


def _lps(image, xyz) -> str:
    return ",".join(f"{v:.4f}" for v in image.index_to_physical(xyz))


def test_every_tool_has_one_key_and_every_key_one_tool():
    keys = [tool.shortcut.upper() for tool in tools().values()]
    assert len(keys) == len(set(keys)) and all(len(k) == 1 and k.isalpha() for k in keys)
    assert {name for name, tool in tools().items() if tool.operation is not None} == \
        {name for name, op in CATALOGUE.items() if op.gesture is not None}
    assert tools()["lasso"].shortcut == "O"  # the overlay moved to S (issue 42 item 7)
    assert {op.gesture for op in CATALOGUE.values() if op.gesture} <= set(EFFECTS)  # each names its effect


def test_brush_then_erase_in_batch_paint_the_discs_numpy_computes(chest_image, ct_dir, tmp_path: Path):
    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    image = chest_image
    z = 24
    start, end, middle = (150, 300, z), (300, 300, z), (225, 300, z)
    brushed = tmp_path / "brushed.nii.gz"
    assert main(["edit", str(image_path), "-o", str(brushed), "--radius", "5",
                 "--brush", f"{_lps(image, start)};{_lps(image, end)}", "axial", "3"]) == 0
    painted = read_image(brushed).array == 3
    assert np.flatnonzero(painted.any(axis=(1, 2))).tolist() == [z]  # discs on the axial slice only
    yy, xx = np.mgrid[0:512, 0:512]
    sx, sy = image.spacing_mm[:2]
    t = np.clip((xx - start[0]) / (end[0] - start[0]), 0, 1)
    distance = np.hypot((xx - (start[0] + t * (end[0] - start[0]))) * sx, (yy - start[1]) * sy)
    assert np.all(painted[z][distance <= 5.0]) and not np.any(painted[z][distance > 5.0 + sx])

    erased = tmp_path / "erased.nii.gz"
    assert main(["edit", str(image_path), "--labels", str(brushed), "-o", str(erased), "--radius", "4",
                 "--erase", _lps(image, middle), "axial"]) == 0
    after = read_image(erased).array == 3
    to_middle = np.hypot((xx - middle[0]) * sx, (yy - middle[1]) * sy)
    assert not after[z][to_middle <= 4.0].any()  # the eraser's disc is gone
    kept = painted[z] & (to_middle > 4.0 + sx)
    assert np.array_equal(after[z][kept], painted[z][kept]) and after.sum() < painted.sum()


def test_fill_by_hu_and_keep_island_in_batch_match_connected_components(chest_image, ct_dir, abdomen_files,
                                                                        tmp_path: Path):
    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    z = 24
    hu = chest_image.array[z]
    lung = np.argwhere((hu >= -1100) & (hu <= -700))
    seed_y, seed_x = (int(v) for v in lung[len(lung) // 2])
    out = tmp_path / "filled.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--hu-mask", "-1100", "-700", "--fill-by-hu",
                 "--fill", _lps(chest_image, (seed_x, seed_y, z)), "axial", "4"]) == 0
    components, _ = ndimage.label((hu >= -1100) & (hu <= -700))  # face connectivity in the slice
    written = read_image(out).array
    assert np.array_equal(written[z] == 4, components == components[seed_y, seed_x])
    assert not np.delete(written, z, axis=0).any()

    # keep island: the cartilages' second-largest 26-connected island, clicked (SimpleITK's components)
    image_path, labels_path = abdomen_files
    original = sitk.ReadImage(str(labels_path))
    islands = sitk.RelabelComponent(sitk.ConnectedComponent(original == CARTILAGES, True))
    second = sitk.GetArrayFromImage(islands) == 2
    z, y, x = (int(v) for v in np.argwhere(second)[0])
    point = ",".join(f"{v:.4f}" for v in original.TransformIndexToPhysicalPoint((x, y, z)))
    kept = tmp_path / "kept.nii.gz"
    assert main(["edit", str(image_path), "--labels", str(labels_path), "-o", str(kept),
                 "--keep-island", point]) == 0
    before, after = sitk.GetArrayFromImage(original), sitk.GetArrayFromImage(sitk.ReadImage(str(kept)))
    assert np.array_equal(after == CARTILAGES, second)
    others = before != CARTILAGES
    assert np.array_equal(after[others], before[others])


def test_fill_by_hu_without_a_range_is_refused_before_anything_runs(ct_dir, chest_image, tmp_path: Path, capsys):
    image_path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    out = tmp_path / "out.nii.gz"
    code = main(["edit", str(image_path), "-o", str(out), "--fill-by-hu",
                 "--fill", _lps(chest_image, (256, 256, 24)), "axial", "4"])
    assert code == 1 and "--hu-mask" in capsys.readouterr().err and not out.exists()


def test_merge_segmentation_in_batch_adds_only_where_there_is_no_label(abdomen_files, tmp_path: Path):
    """The last step of a Segment, on the command line: the abdomen's own segmentation added to a label map that
    holds an air threshold; SimpleITK's threshold of the same CT is the oracle."""
    image_path, labels_path = abdomen_files
    out = tmp_path / "merged.nii.gz"
    assert main(["edit", str(image_path), "-o", str(out), "--threshold", "-2000", "-500", "200",
                 "--merge-segmentation", str(labels_path), "add"]) == 0
    air = sitk.GetArrayFromImage(sitk.BinaryThreshold(sitk.ReadImage(str(image_path)), -2000, -500)) > 0
    segmentation = sitk.GetArrayFromImage(sitk.ReadImage(str(labels_path)))
    assert np.array_equal(read_image(out).array, np.where(air, 200, segmentation))


def test_merge_mode_and_the_output_are_checked_first(abdomen_files, tmp_path: Path, capsys):
    image_path, labels_path = abdomen_files
    assert main(["edit", str(image_path), "-o", str(tmp_path / "o.nii.gz"),
                 "--merge-segmentation", str(labels_path), "over"]) == 1
    assert "MODE must be replace or add, not 'over'" in capsys.readouterr().err
    assert main(["edit", str(image_path), "-o", str(labels_path), "--force",
                 "--merge-segmentation", str(labels_path), "add"]) == 1
    assert "also an input" in capsys.readouterr().err


# --- the registration hook: how medseg.workflows adds model-backed operations --------------------------------

RULES = Provenance.model("rules", "1")
RULE_LABELS = {1: Label(1, "body", provenance=RULES), 2: Label(2, "lungs", provenance=RULES),
               3: Label(3, "bones", provenance=RULES)}


def _segment_with_rules(document, values, context):
    """A model-backed operation as a higher layer writes one: a model (medseg's rule labels) runs on the image,
    and its result is merged as a Segment's is."""
    from medseg.model.rule_labels import rule_label_map

    return merge_change(document, Segmentation(rule_label_map(document.volume), RULE_LABELS), values["mode"])


SEGMENT_RULES = EditOperation(
    "segment-rules", "Segment (rules)", "segment body, lungs and bones with the rule model and merge them (MODE)",
    (Parameter("mode", "MODE", "choice", "how it meets the labels here", choices=("replace", "add")),),
    _segment_with_rules)


@pytest.fixture
def registered():
    register(SEGMENT_RULES)
    yield SEGMENT_RULES
    unregister(SEGMENT_RULES.name)
    assert SEGMENT_RULES.name not in CATALOGUE


def test_a_registered_model_operation_is_previewed_performed_undone_and_journalled(registered, ct_dir, tmp_path):
    from medseg.model.rule_labels import rule_label_map

    image = read_image(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    nodule = read_image(ct_dir / "pyradiomics_lung1" / "lung1_label.nrrd")
    rules = rule_label_map(image)  # the model's own output: what the merge must place
    doc = SegmentationDocument()
    doc.set_volume(image, source="lung1_image.nrrd")
    doc.enable_autosave(tmp_path)
    doc.set_label_map(image.with_array(np.array(nodule.array, dtype=np.uint8)), {1: Label(1, "nodule")})
    before = doc.label_map.array.copy()

    preview = registered.preview(doc, {"mode": "add"})
    assert np.array_equal(doc.label_map.array, before) and doc.history.depth == 0  # a preview writes nothing
    assert registered.perform(doc, {"mode": "add"}, description="Segment (rules)")
    after = doc.label_map.array
    assert preview.count == int((after != before).sum()) > 0
    assert np.array_equal(after[before != 0], before[before != 0])  # add: the nodule stays
    by_name = {e.name: v for v, e in doc.labels.items()}
    for value, entry in RULE_LABELS.items():
        assert np.array_equal(after == by_name[entry.name], (rules.array == value) & (before == 0))
    assert doc.labels[by_name["lungs"]].provenance == RULES
    source, recovered = recover(doc.journal.folder)  # journalled
    assert np.array_equal(recovered.array, after) and recovered.labels == doc.labels
    assert doc.history.next_undo() == "Segment (rules)"
    doc.undo()
    assert np.array_equal(doc.label_map.array, before) and set(doc.labels) == {1}


def test_a_registered_operation_is_a_command_line_flag_and_a_recipe_step(registered, abdomen_files, tmp_path):
    edit = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)).choices["edit"]
    flag = next(a for a in edit._actions if "--segment-rules" in a.option_strings)
    assert flag.metavar == ("MODE",) and registered.help in flag.help
    image_path, labels_path = abdomen_files
    image, labels = read_image(image_path), read_image(labels_path)
    doc = SegmentationDocument()
    doc.set_volume(image)
    doc.set_label_map(labels.with_array(np.array(labels.array, copy=True)))
    steps = validate([Operation("segment-rules", ("replace",))], doc.label_map, image)
    start = doc.label_map.array.copy()
    run_operations(doc, steps)
    assert doc.history.depth == 1 and not np.array_equal(doc.label_map.array, start)
    with pytest.raises(MedsegError, match="MODE must be replace or add"):
        validate([Operation("segment-rules", ("merge",))], doc.label_map, image)


def test_the_hook_refuses_a_taken_name_or_key(registered):
    with pytest.raises(MedsegError, match="already has an operation named 'segment-rules'"):
        register(registered)
    clash = EditOperation("click-ai", "Click AI", "click a structure", (), lambda d, v, c: None, gesture="click",
                          shortcut="b")
    with pytest.raises(MedsegError, match="the key b is the brush tool's already"):
        register(clash)
    with pytest.raises(MedsegError, match="built-in"):
        unregister("brush")


def test_a_dragged_brush_and_a_clicked_fill_change_what_the_command_line_changes(chest_image):
    """The mouse tools perform their catalogue operations: the same stroke and click through the tool controller
    (headless, as a view forwards them) and through a recipe give the same label map."""
    from medseg.edit.label_map import LabelMap
    from medseg.gui.common.view_state import ViewState  # Qt-free: the controller's owner in the app

    image = chest_image
    start, end, z = (150.0, 300.0, 24.0), (300.0, 320.0, 24.0), 24
    by_mouse = SegmentationDocument()
    by_mouse.set_volume(image)
    view = ViewState(by_mouse)
    view.set_active_label(3)
    controller = view.tools
    controller.tool.set("brush")
    assert controller.press(start, 2)
    controller.drag(end)
    controller.release()
    controller.tool.set("fill")
    controller.fill_3d.set(True)  # the brushed region's label, flooded in 3D: it stays the stroke
    view.set_active_label(5)
    assert controller.press((225.0, 310.0, 24.0), 2)
    assert by_mouse.history.depth == 2 and by_mouse.history.next_undo() == "fill label 5"

    by_recipe = SegmentationDocument()
    by_recipe.set_volume(image)
    by_recipe.set_label_map(LabelMap.empty_like(image))
    path = f"{_lps(image, start)};{_lps(image, end)}"
    steps = validate([Operation("brush", (path, "axial", "3")), Operation("fill", (_lps(image, (225, 310, z)),
                                                                                   "axial", "5"))],
                     by_recipe.label_map, image, settings={"fill_3d": True})
    run_operations(by_recipe, steps)
    assert np.array_equal(by_mouse.label_map.array, by_recipe.label_map.array)
    assert (by_mouse.label_map.array == 5).sum() > 1000 and not (by_mouse.label_map.array == 3).any()
