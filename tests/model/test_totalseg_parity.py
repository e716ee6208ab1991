"""medseg's TotalSegmentator pipeline against TotalSegmentator 2.18.0 itself, same weights, real CT.

The weights are random, in TotalSegmentator's exact layout (ts_fixture), small enough for CI; both
sides read the same NIfTI files (TotalSegmentator's own example CT, stored RAS, and pyradiomics'
lung1 chest CT written as a NIfTI stored LPS, 5 mm slices). TotalSegmentator runs in a process of
its own (ts_peer). Acceptance: labels equal on >= 99.9 % of voxels, Dice >= 0.99 for every
structure with >= 1000 voxels in either output, TotalSegmentator's numbers and names.
"""

from __future__ import annotations

import json

import nibabel as nib
import numpy as np
import pytest
import SimpleITK as sitk
import torch
from infer_fixtures import ct_crop
from ts_fixture import make_totalseg_weights
from ts_peer import assert_agrees, read_multilabel, run_totalsegmentator

from medseg.cli import main
from medseg.core.volume import Volume
from medseg.model.totalseg import import_totalsegmentator_task, load_totalseg_model, segment_totalseg

torch.set_num_threads(2)

ABDOMEN = "totalsegmentator/example_ct.nii.gz"  # 3 mm, RAS: resampled for 1.5 mm and 6 mm
# 30 slices of the same abdomen, cropped in-plane: 96 x 64 x 60 voxels at 1.5 mm (12 tiles a part)
ABDOMEN_SMALL = ("totalsegmentator/example_ct_sm.nii.gz", (slice(0, 30), slice(30, 62), slice(30, 78)))
# the chest's middle, 0.57 x 0.57 x 5 mm, stored LPS: 49 x 49 x 80 voxels at 3 mm
CHEST_LPS = ("pyradiomics_lung1/lung1_image.nrrd", (slice(0, 48), slice(128, 384), slice(128, 384)))


@pytest.fixture(scope="module")
def peer(tmp_path_factory):
    root = tmp_path_factory.mktemp("totalseg")
    weights = make_totalseg_weights(root / "weights", [291, 292, 293, 294, 295, 297, 298])
    model_dir = import_totalsegmentator_task(weights, root / "model")
    return {"root": root, "weights": weights, "model": load_totalseg_model(model_dir), "model_dir": model_dir}


def nifti(tmp_path, ct_dir, source) -> tuple:
    """The CT as a NIfTI file both run on, and medseg's Volume of it."""
    image = ct_crop(ct_dir, source) if isinstance(source, tuple) else sitk.ReadImage(str(ct_dir / source))
    path = tmp_path / "ct.nii.gz"
    sitk.WriteImage(image, str(path))
    return path, Volume.from_sitk(sitk.ReadImage(str(path)))


def totalsegmentator_labels(peer, image, tmp_path, **options) -> tuple[np.ndarray, dict[int, str]]:
    return read_multilabel(run_totalsegmentator(image, tmp_path / "ts.nii.gz", peer["weights"], peer["root"] / "home",
                                                **options))


def test_fast_on_a_chest_stored_lps_at_5mm(peer, ct_dir, tmp_path):
    image, volume = nifti(tmp_path, ct_dir, CHEST_LPS)
    assert nib.aff2axcodes(nib.load(image).affine) == ("L", "P", "S")  # the reorientation is exercised
    theirs, names = totalsegmentator_labels(peer, image, tmp_path, fast=True)
    result, run = segment_totalseg(volume, peer["model"], "3mm", device="cpu")
    assert run.resampled_shape_xyz == (49, 49, 80)  # round(256 * 0.57 / 3), round(48 * 5 / 3)
    assert_agrees(result.label_map.array, theirs, min_classes=20)
    assert {v: peer["model"].labels[v] for v in names} == names  # the same numbers for the same names


def test_fastest_resamples_a_3mm_abdomen(peer, ct_dir, tmp_path):
    image, volume = nifti(tmp_path, ct_dir, ABDOMEN)
    theirs, names = totalsegmentator_labels(peer, image, tmp_path, fastest=True)
    result, _ = segment_totalseg(volume, peer["model"], "6mm", device="cpu")
    assert_agrees(result.label_map.array, theirs, min_classes=20)
    assert {v: result.label_map.meta.labels[v].name for v in names} == names


# slow: TotalSegmentator builds a predictor, starts its worker processes and writes and reads the image
# once per part (five, three times over when split); the networks themselves are small. The unsplit run of
# the five parts is test_totalseg_tasks_parity's `total` (dropped here to keep CI under 45 minutes).
@pytest.mark.slow
def test_total_five_parts_merged_split_in_thirds(peer, ct_dir, tmp_path):
    image, volume = nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    theirs, names = totalsegmentator_labels(peer, image, tmp_path, force_split=True)
    result, run = segment_totalseg(volume, peer["model"], "1.5mm", device="cpu", force_split=True)
    assert len(run.parts) == 5 and run.split
    assert_agrees(result.label_map.array, theirs, min_classes=25)
    # every part contributed labels from its own block of TotalSegmentator's numbers
    present = set(np.unique(result.label_map.array).tolist())
    for first, last in ((1, 24), (25, 50), (51, 68), (69, 91), (92, 117)):
        assert present & set(range(first, last + 1)), f"no label of {first}..{last}"
    assert {v: peer["model"].labels[v] for v in names} == names


@pytest.mark.slow
def test_structures_subset_with_a_fixed_crop(peer, ct_dir, tmp_path):
    image, volume = nifti(tmp_path, ct_dir, ABDOMEN_SMALL)
    mask = np.zeros(volume.shape_zyx, np.uint8)
    mask[8:20, 14:30, 20:40] = 1  # the crop a crop model would give; random weights' crops mean nothing
    mask_path = tmp_path / "crop.nii.gz"
    sitk.WriteImage(volume.with_array(mask).to_sitk(), str(mask_path))
    structures = ["spleen", "liver", "stomach", "kidney_left", "vertebrae_L1", "vertebrae_T12", "vertebrae_T11",
                  "heart", "aorta", "inferior_vena_cava", "rib_left_10", "rib_right_10", "costal_cartilages"]
    theirs, names = totalsegmentator_labels(peer, image, tmp_path, roi_subset=structures, crop_mask=mask_path)
    result, run = segment_totalseg(volume, peer["model"], "1.5mm", structures, device="cpu", crop_mask=mask)
    assert len(run.parts) == 4 and not any("part4_muscles" in name for name in run.parts)  # none of its structures
    assert set(np.unique(theirs)) <= {0, 1, 5, 6, 3, 31, 32, 33, 51, 52, 63, 101, 113, 117}
    assert len(np.unique(theirs)) >= 4
    ours = result.label_map.array
    assert (ours == theirs).mean() >= 0.999
    # the crop: the mask's box widened by int(20 mm / 3 mm) = 6 voxels; nothing outside it
    assert run.crop_xyz == (slice(14, 46), slice(8, 32), slice(2, 26))
    inside = np.zeros(ours.shape, bool)
    inside[2:26, 8:32, 14:46] = True
    assert not ours[~inside].any() and ours[inside].any()
    assert {v: peer["model"].labels[v] for v in names} == names


def test_cli_fast_and_split_files_named_as_totalsegmentator(peer, ct_dir, tmp_path, capsys):
    image, volume = nifti(tmp_path, ct_dir, ABDOMEN)
    theirs, _ = totalsegmentator_labels(peer, image, tmp_path, fastest=True)
    out = tmp_path / "masks"
    code = main(["segment", str(image), "--model", str(peer["model_dir"]), "--fastest", "--split", "-o", str(out),
                 "--device", "cpu", "--json"])
    assert code == 0
    done = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert done["event"] == "done" and done["configuration"] == "6mm" and done["reason"] == "asked for"
    from totalsegmentator.map_to_binary import class_map

    assert sorted(p.name for p in out.iterdir()) == sorted(f"{name}.nii.gz" for name in class_map["total"].values())
    for value in (5, 52, 117):
        mask = sitk.GetArrayFromImage(sitk.ReadImage(str(out / f"{class_map['total'][value]}.nii.gz")))
        assert mask.dtype == np.uint8 and mask.shape == theirs.shape
        assert (mask.astype(bool) == (theirs == value)).mean() >= 0.999
