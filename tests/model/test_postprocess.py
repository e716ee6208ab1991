"""Model-declared post-processing (medseg.model.postprocess) on a real chest slice.

The oracle is scipy: the patient's silhouette is ``scipy.ndimage.binary_fill_holes`` of each
slice and lung pieces are ``scipy.ndimage.label`` components, computed here independently of
medseg's own hole filling; the labels to corrupt and repair are the rule labels of a real CT.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from scipy import ndimage
from small_packages import LABELS, one_configuration, two_d_configuration

from medseg.errors import DatasetError, ModelError
from medseg.io.load import load
from medseg.model.datasets import open_dataset
from medseg.model.infer import segment
from medseg.model.package import load_package, save_package
from medseg.model.package_model import combine_packages
from medseg.model.postprocess import apply_steps, parse_steps
from medseg.model.rule_labels import rule_label_map
from medseg.workflows.models import open_model

BODY, LUNGS, BONES = 1, 2, 3
STEPS = [{"op": "keep_inside", "label": "lungs", "inside": ["body", "bones"]},
         {"op": "remove_small_components", "label": "lungs", "min_ml": 10, "otherwise": "body"},
         {"op": "remove_components_in_slices_of", "label": "lungs", "of": ["bones"], "max_share": 0.17,
          "otherwise": "body"},
         {"op": "fill_holes"}]


@pytest.fixture(scope="module")
def chest(ct_dir: Path):
    """One real chest slice (GE, both lungs, arms at the sides) and its rule labels."""
    volume = load(ct_dir / "cornerstone_testimages" / "CT1_J2KR")
    return volume, np.asarray(rule_label_map(volume).array).astype(np.uint8)


def _silhouette(labels: np.ndarray) -> np.ndarray:
    return np.stack([ndimage.binary_fill_holes(np.isin(s, (BODY, BONES))) for s in labels])


def test_lung_outside_the_patient_is_removed_and_the_real_lungs_kept(chest) -> None:
    volume, rule = chest
    assert (rule == LUNGS).sum() * volume.voxel_volume_ml > 15  # the slice holds both lungs
    corrupted = rule.copy()
    outside = ~_silhouette(rule)
    # a rim of "lung" hugging the skin (what the networks drew around a body) ...
    rim = ndimage.binary_dilation(~outside, structure=np.ones((1, 7, 7), bool)) & outside
    # ... and a head-rest cushion of air below the patient, a block of background
    ys, xs = np.nonzero(outside[0])
    cushion = np.zeros_like(outside)
    y0 = int(ys.max()) - 30
    cushion[0, y0:y0 + 20, int(np.median(xs)) - 40:int(np.median(xs)) + 40] = True
    cushion &= outside
    assert rim.sum() > 1000 and cushion.sum() > 500
    corrupted[rim | cushion] = LUNGS

    steps = parse_steps(STEPS[:1], LABELS)
    outcome = apply_steps(corrupted, steps, volume.voxel_volume_ml)

    np.testing.assert_array_equal(corrupted, rule)  # every planted voxel gone, nothing else touched
    assert outcome[0].changed_ml == pytest.approx((rim | cushion).sum() * volume.voxel_volume_ml)
    assert "lungs only inside the silhouette of body and bones" in outcome[0].describe(LABELS)


def test_small_lung_pieces_become_body_and_holes_take_the_label_around_them(chest) -> None:
    volume, rule = chest
    ml = volume.voxel_volume_ml
    pieces, count = ndimage.label(rule == LUNGS)
    smallest = np.bincount(pieces.ravel())[1:].min() * ml
    corrupted = rule.copy()
    # a 3 ml "lung" pocket in soft tissue (bowel gas the network called lung) ...
    deep = ndimage.binary_erosion(rule == BODY, structure=np.ones((1, 3, 3), bool), iterations=12)
    body_only = np.argwhere(deep[0])  # soft tissue at least 12 voxels from lung, bone or air
    y, x = body_only[len(body_only) // 2]
    side = int(round(np.sqrt(3.0 / ml)))
    pocket = np.zeros_like(rule, bool)
    pocket[0, y:y + side, x:x + side] = True
    pocket &= deep
    corrupted[pocket] = LUNGS
    # ... a hole the network left inside the patient (the brain inside a skull) ...
    hole = np.zeros_like(rule, bool)
    hole[0, y - 40:y - 20, x - 10:x + 10] = True
    hole &= deep & ~ndimage.binary_dilation(pocket, iterations=2)
    # ... and one inside a lung (lung the network missed): each takes the label around it
    lung_deep = ndimage.binary_erosion(rule == LUNGS, structure=np.ones((1, 3, 3), bool), iterations=8)
    ly, lx = np.argwhere(lung_deep[0])[len(np.argwhere(lung_deep[0])) // 3]
    lung_hole = np.zeros_like(rule, bool)
    lung_hole[0, ly - 6:ly + 6, lx - 6:lx + 6] = True
    lung_hole &= lung_deep
    corrupted[hole | lung_hole] = 0
    assert count >= 2 and smallest > 3 * pocket.sum() * ml and hole.sum() > 100 and lung_hole.sum() > 50

    steps = parse_steps([{**STEPS[1], "min_ml": smallest / 2}, STEPS[-1]], LABELS)
    outcomes = apply_steps(corrupted, steps, ml)

    np.testing.assert_array_equal(corrupted, rule)
    assert [o.changed_ml for o in outcomes] == pytest.approx([pocket.sum() * ml, (hole | lung_hole).sum() * ml])


def test_segment_runs_the_packages_steps_and_reports_them(chest, tmp_path: Path) -> None:
    volume, _ = chest
    starter = open_model(None).package
    starter.postprocessing = list(STEPS)
    raw = segment(volume, starter, postprocess=False)
    done = segment(volume, starter)
    assert raw.postprocessing == [] and len(done.postprocessing) == len(STEPS)
    before, after = np.asarray(raw.label_map.array), np.asarray(done.label_map.array)
    lung_after = after == LUNGS
    assert not (lung_after & ~_silhouette(after)).any()
    pieces, _ = ndimage.label(lung_after)
    assert (np.bincount(pieces.ravel())[1:] * volume.voxel_volume_ml >= 10).all()
    reported = sum(float(note.split(": ")[-1].split(" ml")[0]) for note in done.postprocessing)
    # each step's report adds up to what differs (steps here never undo each other's voxels)
    assert reported == pytest.approx((before != after).sum() * volume.voxel_volume_ml, abs=0.05 * len(STEPS))


def test_packages_carry_their_steps_and_refuse_bad_ones(tmp_path: Path) -> None:
    package = two_d_configuration()
    save_package(package, tmp_path / "plain")
    assert json.loads((tmp_path / "plain" / "model.json").read_text())["format_version"] == 3
    package.postprocessing = list(STEPS)
    save_package(package, tmp_path / "pp")
    manifest = json.loads((tmp_path / "pp" / "model.json").read_text())
    assert manifest["format_version"] == 3  # an older medseg refuses it instead of skipping the steps
    assert load_package(tmp_path / "pp").postprocessing == STEPS

    for bad, message in [
        ([{"op": "dilate", "label": "lungs"}], "postprocessing step 1: unknown operation 'dilate'"),
        ([STEPS[0], {"op": "remove_small_components", "label": "liver", "min_ml": 1}],
         "step 2 (remove_small_components): label 'liver' is not one"),
        ([{"op": "remove_small_components", "label": "lungs", "min_ml": -1}], "min_ml must be a positive"),
        ([{"op": "keep_inside", "label": "lungs", "inside": []}], "inside must list at least one label"),
        ([{**STEPS[2], "max_share": 17}], "max_share must be a fraction between 0 and 1, not 17"),
        ([{"op": "fill_holes", "radius": 3}], "unknown keys ['radius']"),
        ({"op": "fill_holes"}, "must be a list of steps"),
    ]:
        manifest["postprocessing"] = bad
        (tmp_path / "pp" / "model.json").write_text(json.dumps(manifest))
        with pytest.raises(ModelError, match="postprocessing") as error:
            load_package(tmp_path / "pp")
        assert message in str(error.value) and str(tmp_path / "pp") in str(error.value)

    thin = one_configuration("3d_thin", (1.5, 1.5, 1.5), 0)
    with pytest.raises(ModelError, match="post-processing"):
        combine_packages([package, thin])
    thin.postprocessing = list(STEPS)
    assert combine_packages([package, thin]).postprocessing == STEPS


def test_a_dataset_declares_the_steps_its_models_carry(ct_dir: Path, tmp_path: Path) -> None:
    from small_packages import tiny_plan

    from medseg.model.train import TrainConfig, run_training

    record = {"name": "pp", "data_root": str(ct_dir), "labels": ["body", "lungs", "bones"],
              "cases": [{"name": "ct3", "image": "dcmqi_ct3slice_masks/image", "label_rule": "starter"}],
              "postprocessing": STEPS}
    manifest = tmp_path / "pp.json"
    manifest.write_text(json.dumps(record))
    run_training(open_dataset(manifest), tmp_path / "model", TrainConfig(epochs=1, iterations_per_epoch=1,
                                                                         batch_size=2), plan=tiny_plan())
    assert load_package(tmp_path / "model").postprocessing == STEPS

    manifest.write_text(json.dumps({**record, "postprocessing": [{"op": "keep_inside", "label": "liver", "inside": ["body"]}]}))
    with pytest.raises(DatasetError, match="label 'liver' is not one") as error:
        open_dataset(manifest)
    assert str(manifest) in str(error.value)


def test_the_command_line_shows_the_steps_and_can_skip_them(ct_dir: Path, tmp_path: Path, capsys) -> None:
    from medseg.cli import main

    chest = str(ct_dir / "cornerstone_testimages" / "CT1_J2KR")
    assert main(["plan", chest, "--model", "starter"]) == 0
    assert "then: lungs only inside the silhouette of body and bones" in capsys.readouterr().out
    reports = {}
    for flags in ([], ["--no-postprocess"]):
        assert main(["segment", chest, "-o", str(tmp_path / "labels.nii.gz"), "--json", *flags]) == 0
        reports[bool(flags)] = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert len(reports[False]["postprocessing"]) == len(STEPS) and reports[True]["postprocessing"] == []
    assert all(note.endswith(" ml changed") for note in reports[False]["postprocessing"])


def test_air_between_the_arm_and_the_body_is_not_lung(ct_dir: Path) -> None:
    # example_ct_dicom has the arms beside the abdomen; a 2D network of the starter-v2 build drew
    # 108 ml of "lung" in the air between the left arm and the body wall (the model card). Plant
    # that error on the real anatomy and run the shipped starter's own steps.
    volume = load(ct_dir / "totalsegmentator" / "example_ct_dicom")
    rule = np.asarray(rule_label_map(volume).array).astype(np.uint8)
    hu = np.asarray(volume.array)
    parts, count = ndimage.label(rule > 0)
    sizes = np.bincount(parts.ravel())
    sizes[0] = 0
    torso = parts == sizes.argmax()
    arms = (parts > 0) & ~torso
    assert count >= 2 and arms.sum() * volume.voxel_volume_ml > 100  # an arm apart from the body (the other touches it)
    near = 20.0  # mm
    spacing = volume.spacing_zyx
    gap = ((rule == 0) & (hu < -400) & (ndimage.distance_transform_edt(~torso, sampling=spacing) < near)
           & (ndimage.distance_transform_edt(~arms, sampling=spacing) < near))
    assert gap.sum() * volume.voxel_volume_ml > 5
    corrupted = rule.copy()
    corrupted[gap] = LUNGS
    outcomes = apply_steps(corrupted, open_model(None).package.postprocess_steps(), volume.voxel_volume_ml)
    np.testing.assert_array_equal(corrupted, rule)
    assert outcomes[0].changed_ml == pytest.approx(gap.sum() * volume.voxel_volume_ml)


def test_hole_filling_per_slice_matches_scipy_slice_by_slice(ct_dir: Path) -> None:
    # medseg labels only the mask's box, a few slices at a time; scipy fills each slice whole
    from medseg.model.postprocess import fill_holes_per_slice

    volume = load(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")  # 48 slices: several chunks
    hu = np.asarray(volume.array)
    for mask in (hu > -500, np.roll(hu > 200, 150, axis=2)):  # the patient; bones pushed over the edge
        expected = np.stack([ndimage.binary_fill_holes(s) for s in mask])
        assert (expected & ~mask).sum() > 1000  # there are holes to fill
        np.testing.assert_array_equal(fill_holes_per_slice(mask), expected)


def test_air_in_bony_slices_is_not_lung_and_the_lungs_are(ct_dir: Path) -> None:
    # The rule's own criterion restated on a label map: the nose and sinuses lie in skull-base
    # slices that are about a fifth bone, lungs in slices a few per cent bone.
    step = parse_steps([STEPS[2]], LABELS)
    head = load(ct_dir / "dcm_qa_ct" / "GE_HiSpeedDual_head_tilt_varspacing")
    rule = np.asarray(rule_label_map(head).array).astype(np.uint8)
    air, _ = ndimage.label((np.asarray(head.array) < -400) & (rule == BODY))
    sizes = np.bincount(air.ravel()) * head.voxel_volume_ml
    sinus = np.isin(air, np.flatnonzero(sizes >= 10)[1:])  # air pockets as big as a lung piece
    assert sinus.sum() * head.voxel_volume_ml > 10 and not (rule == LUNGS).any()
    corrupted = rule.copy()
    corrupted[sinus] = LUNGS
    (outcome,) = apply_steps(corrupted, step, head.voxel_volume_ml)
    np.testing.assert_array_equal(corrupted, rule)
    assert outcome.changed_ml == pytest.approx(sinus.sum() * head.voxel_volume_ml)

    chest = load(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    labels = np.asarray(rule_label_map(chest).array).astype(np.uint8)
    kept = labels.copy()
    assert apply_steps(kept, step, chest.voxel_volume_ml)[0].changed_ml == 0
    np.testing.assert_array_equal(kept, labels)
