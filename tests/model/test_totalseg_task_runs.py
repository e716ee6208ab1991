"""TotalSegmentator tasks other than ``total`` through medseg's pipeline: the conversion of a task with the
networks its crop needs, the refusals (missing weights, a crop that finds nothing, a series too small),
and the runs against TotalSegmentator 2.18.0 itself (ts_peer) on real CT with random weights in its
exact layout, with the same fixed crop on both sides (a random crop network would mark the whole image).

The full per-task parity suite is tests/model/test_totalseg_parity*.py (branch ts-parity); these are the
pipeline's own checks of the steps ``total`` does not have: per-axis resampling, no resampling (nnU-Net's
own), several folds averaged, two networks merged through their local class maps, other nnU-Net
configurations (3d_fullres_high)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from infer_fixtures import ct_crop
from ts_fixture import make_task_weights
from ts_peer import assert_agrees, read_multilabel, run_totalsegmentator

from medseg.core.volume import Volume
from medseg.errors import ModelError
from medseg.model.totalseg import import_totalsegmentator_task, load_totalseg_model, segment_totalseg
from medseg.model.totalseg.convert import PartRef

torch.set_num_threads(2)

# 30 slices of TotalSegmentator's example abdomen (1.5 mm), in-plane cropped: 48 x 32 x 30 voxels
ABDOMEN_SMALL = ("totalsegmentator/example_ct_sm.nii.gz", (slice(0, 30), slice(30, 62), slice(30, 78)))
# 8 slices, 12 x 16 voxels of it: for the sub-millimetre tasks (its 40 mm crop margin covers it all)
TINY = ("totalsegmentator/example_ct_sm.nii.gz", (slice(10, 18), slice(40, 52), slice(40, 56)))


def _nifti(tmp_path, ct_dir, source):
    image = ct_crop(ct_dir, source)
    path = tmp_path / "ct.nii.gz"
    sitk.WriteImage(image, str(path))
    return path, Volume.from_sitk(sitk.ReadImage(str(path)))


def _box_mask(volume: Volume, tmp_path):
    """A compact crop mask in the image's middle, as a NIfTI on the image's grid for TotalSegmentator too."""
    mask = np.zeros(volume.shape_zyx, np.uint8)
    z, y, x = volume.shape_zyx
    mask[z // 3: 2 * z // 3, y // 3: 2 * y // 3, x // 3: x // 2] = 1
    image = sitk.GetImageFromArray(mask)
    image.CopyInformation(volume.to_sitk())
    path = tmp_path / "crop.nii.gz"
    sitk.WriteImage(image, str(path))
    return mask.astype(bool), path


@pytest.fixture(scope="module")
def liver_segments(tmp_path_factory):
    root = tmp_path_factory.mktemp("liver_segments")
    weights = make_task_weights(root / "weights", "liver_segments")
    return root, weights


def test_a_cropped_task_converts_with_its_crop_network(liver_segments, tmp_path):
    _root, weights = liver_segments
    folder = import_totalsegmentator_task(weights, tmp_path / "model", task="liver_segments")
    model = load_totalseg_model(folder)
    assert model.name == "totalsegmentator/liver_segments" and list(model.configurations) == ["default"]
    assert sorted(model.parts) == [298, 570]  # its network and the 6 mm total network that finds the liver
    assert model.labels[1] == "liver_segment_1" and len(model.labels) == 8
    manifest = json.loads((folder / "totalseg.json").read_text())
    assert sorted(manifest["tasks"]) == ["liver_segments", "total"]
    assert model.configurations["default"].resample == (0.8046879768371582, 0.8046879768371582, 1.5)


def test_a_task_without_its_crop_network_is_refused_naming_the_folder(tmp_path):
    weights = make_task_weights(tmp_path / "weights", "liver_segments", helpers=False)
    with pytest.raises(ModelError, match="liver_segments is cropped by TotalSegmentator's total \\(6mm\\).*"
                                         "Dataset298_TotalSegmentator_total_6mm_1559subj is missing"):
        import_totalsegmentator_task(weights, tmp_path / "model", task="liver_segments")
    with pytest.raises(ModelError, match="TotalSegmentator's cerebral_bleed weights are not here: Dataset150_icb_v0"):
        import_totalsegmentator_task(weights, tmp_path / "model", task="cerebral_bleed")
    assert not (tmp_path / "model").exists()


def test_a_crop_that_finds_nothing_is_an_error_and_the_task_does_not_run(tmp_path, ct_dir, monkeypatch):
    # the crop network's background wins everywhere: it finds no liver
    weights = make_task_weights(tmp_path / "weights", "liver_segments", background_bias={298: 500.0})
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="liver_segments"))
    _path, volume = _nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    loaded = []
    original = PartRef.load
    monkeypatch.setattr(PartRef, "load", lambda self: loaded.append(self.dataset) or original(self))
    with pytest.raises(ModelError, match="found none of them in this series: the series may not cover them") as error:
        segment_totalseg(volume, model, "default", device="cpu")
    assert "liver" in str(error.value)
    assert loaded == [298]  # the crop network ran, the task's own network did not


def test_a_series_too_small_for_the_task_is_an_error(liver_segments, tmp_path):
    _root, weights = liver_segments
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="liver_segments"))
    thin = Volume(np.zeros((1, 40, 40), np.int16), (1.0, 1.0, 0.5))  # one 0.5 mm slice: under one 1.5 mm voxel
    with pytest.raises(ModelError, match="too small for TotalSegmentator's liver_segments: the crop around liver"):
        segment_totalseg(thin, model, "default", device="cpu", crop_mask=np.ones(thin.shape_zyx, bool))


@pytest.mark.slow
def test_liver_segments_per_axis_resampling_as_totalsegmentator(liver_segments, tmp_path, ct_dir):
    root, weights = liver_segments
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="liver_segments"))
    image, volume = _nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    mask, mask_path = _box_mask(volume, tmp_path)
    ours, run = segment_totalseg(volume, model, "default", device="cpu", crop_mask=mask)
    assert run.crop_xyz is not None and run.crop_xyz != tuple(slice(0, n) for n in volume.size_xyz)  # it cropped
    theirs, names = read_multilabel(run_totalsegmentator(image, tmp_path / "ts.nii.gz", weights, root / "home",
                                                         crop_mask=mask_path, task="liver_segments"))
    assert_agrees(ours.label_map.array, theirs, min_classes=3)
    assert {v: n for v, n in names.items() if v in np.unique(theirs)} == {
        v: model.labels[v] for v in np.unique(theirs) if v}


@pytest.mark.slow
def test_headneck_muscles_two_networks_merged_as_totalsegmentator(tmp_path, ct_dir):
    weights = make_task_weights(tmp_path / "weights", "headneck_muscles", background_bias={778: 3.0, 779: 3.0},
                                patch_size=(16, 16, 16), n_stages=2)
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="headneck_muscles"))
    assert model.configurations["default"].parts[0].plan.name == "3d_fullres_high"
    image, volume = _nifti(tmp_path, ct_dir, TINY)
    mask, mask_path = _box_mask(volume, tmp_path)
    ours, _run = segment_totalseg(volume, model, "default", device="cpu", crop_mask=mask)
    theirs, _names = read_multilabel(run_totalsegmentator(image, tmp_path / "ts.nii.gz", weights, tmp_path / "home",
                                                          crop_mask=mask_path, task="headneck_muscles"))
    first, second = ({model.labels[v] for v in np.unique(ours.label_map.array) if v} & set(n.classes.values())
                     for n in model.spec().modes["default"].networks)
    assert first and second  # both networks put labels in the result
    assert_agrees(ours.label_map.array, theirs, min_classes=4)


@pytest.mark.slow
def test_effusion_without_resampling_and_with_two_folds_as_totalsegmentator(tmp_path, ct_dir):
    # folds None (every fold present) and no resampling of its own: nnU-Net resamples to its plans' 2 x 1 x 1 mm
    weights = make_task_weights(tmp_path / "weights", "pleural_pericard_effusion", folds=(0, 1))
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model",
                                                             task="pleural_pericard_effusion"))
    assert model.part(315).load().weights["3d_fullres"][1]  # both folds converted
    image, volume = _nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    mask, mask_path = _box_mask(volume, tmp_path)
    ours, _run = segment_totalseg(volume, model, "default", device="cpu", crop_mask=mask)
    theirs, _names = read_multilabel(run_totalsegmentator(image, tmp_path / "ts.nii.gz", weights, tmp_path / "home",
                                                          crop_mask=mask_path, task="pleural_pericard_effusion"))
    assert_agrees(ours.label_map.array, theirs, min_classes=3)


def test_a_crop_run_is_made_once_for_the_crop_and_remove_outside(tmp_path, ct_dir, monkeypatch):
    # heartchambers_highres: the 3 mm total network (robust_crop) finds the heart for the crop and the
    # heart, aorta and IVC for remove_outside; here it finds the heart everywhere
    weights = make_task_weights(tmp_path / "weights", "heartchambers_highres", favour={297: 51},
                                unset_spacing=(3.0, 2.0, 2.0))
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model",
                                                             task="heartchambers_highres"))
    _path, volume = _nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    loaded = []
    original = PartRef.load
    monkeypatch.setattr(PartRef, "load", lambda self: loaded.append(self.dataset) or original(self))
    result, run = segment_totalseg(volume, model, "default", device="cpu")
    assert loaded == [297, 301] and run.runs == ["total (3mm)"]
    assert set(np.unique(result.label_map.array)) - {0} <= set(model.labels)


@pytest.mark.slow
def test_teeth_is_cropped_by_a_whole_craniofacial_run_cropped_in_turn(tmp_path, ct_dir, monkeypatch):
    # teeth's crop_model: craniofacial_structures run whole (itself cropped to the skull by the 6 mm total)
    weights = make_task_weights(tmp_path / "weights", "teeth", favour={298: 91, 115: 2}, patch_size=(16, 16, 16),
                                n_stages=2)
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="teeth"))
    assert sorted(model.parts) == [113, 115, 298]
    _path, volume = _nifti(tmp_path, ct_dir, TINY)
    loaded = []
    original = PartRef.load
    monkeypatch.setattr(PartRef, "load", lambda self: loaded.append(self.dataset) or original(self))
    _result, run = segment_totalseg(volume, model, "default", device="cpu")
    assert loaded == [298, 115, 113] and run.runs == ["craniofacial_structures (default)", "total (6mm)"]


@pytest.mark.slow
def test_vertebrae_pp_refined_keeps_its_vertebrae_inside_the_vertebral_bodies(tmp_path, ct_dir, monkeypatch):
    weights = make_task_weights(tmp_path / "weights", "vertebrae_pp_refined", background_bias={803: 2.0})
    model = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "model", task="vertebrae_pp_refined"))
    bodies = load_totalseg_model(import_totalsegmentator_task(weights, tmp_path / "bodies", task="vertebrae_body"))
    _path, volume = _nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    loaded = []
    original = PartRef.load
    monkeypatch.setattr(PartRef, "load", lambda self: loaded.append(self.dataset) or original(self))
    result, run = segment_totalseg(volume, model, "default", device="cpu")
    assert loaded == [305, 803] and run.runs == ["vertebrae_body (default)"]  # the bodies first, as TotalSegmentator
    mask, _ = segment_totalseg(volume, bodies, "default", device="cpu")
    labels = result.label_map.array
    assert labels.any() and (mask.label_map.array == 1).any() and (mask.label_map.array != 1).any()
    assert not np.any(labels[mask.label_map.array != 1])
    assert set(np.unique(labels)) - {0} <= set(model.labels)
