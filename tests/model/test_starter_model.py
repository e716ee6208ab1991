"""The shipped starter model (body, lungs, bones) on real CT it was not trained on."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from medseg.cli import main
from medseg.io import load, read_image
from medseg.model.infer import segment
from medseg.model.package import load_package, starter_model_path
from medseg.model.rule_labels import (
    BONE_CLOSING_RADIUS_MM,
    BONE_MIN_HU,
    BONE_RIM_MIN_HU,
    MARROW_MIN_HU,
    STARTER_LABELS,
    body_mask,
    bone_mask,
    rule_label_map,
)

STARTER = starter_model_path()
# Issue targets: Dice against the rule-based labels on held-out real CT.
TARGETS = {"body": 0.95, "lungs": 0.90, "bones": 0.80}
HELD_OUT = {  # case name in training_set.json -> file under shared/data/ct
    "example_ct_dicom": "totalsegmentator/example_ct_dicom",  # upper abdomen below the lungs, Siemens, 2 mm
    "chest_slice_ct1": "cornerstone_testimages/CT1_J2KR",  # one chest slice, GE, JPEG 2000
}


@pytest.fixture(scope="module")
def starter():
    return load_package(STARTER)


def _evaluation(starter) -> dict:
    (entry,) = [e for e in starter.provenance["evaluations"]
                if e["held_out_only"] and e["dataset"] == starter.provenance["dataset"]["name"]]
    return entry


def test_package_is_small_and_documented(starter) -> None:
    assert starter.names == STARTER_LABELS
    assert (STARTER / "weights.safetensors").stat().st_size < 5 * 1024 * 1024
    provenance = starter.provenance
    command = provenance["training_command"]
    assert command.startswith("medseg train resources/models/starter/training_set.json ")
    assert command in (STARTER / "README.md").read_text()  # the model card gives the exact command
    assert "rule" in provenance["dataset"]["description"].lower()
    assert any("PASS" in line for line in provenance["export_parity"])
    assert (STARTER / "model_2d.onnx").is_file()


def test_held_out_cases_were_not_trained_on(starter) -> None:
    dataset = starter.provenance["dataset"]
    assert sorted(dataset["validation_cases"]) == sorted(HELD_OUT)
    assert not set(HELD_OUT) & set(dataset["training_cases"])
    manifest = json.loads((STARTER / "training_set.json").read_text())
    trained = [case.get("image", "") for case in manifest["cases"] if case["name"] in dataset["training_cases"]]
    for path in HELD_OUT.values():
        assert not any(image.endswith(path) for image in trained)


# Which structures the held-out scans show (shared/data's README): example_ct_dicom lies below the lung bases.
LUNGS_IN_SCAN = {"example_ct_dicom": False, "chest_slice_ct1": True}


@pytest.mark.parametrize("case", sorted(HELD_OUT))
def test_held_out_real_ct_meets_the_dice_targets(starter, ct_dir: Path, case: str) -> None:
    """Dice counted here with NumPy against the rule labels (the labels the model learned), not by medseg's
    evaluator; the model card's figures (written by `medseg evaluate --record`) must be these."""
    volume = load(ct_dir / HELD_OUT[case])
    result = segment(volume, starter, device="cpu")
    assert result.label_map.same_grid(volume)
    reference, predicted = rule_label_map(volume).array, np.asarray(result.label_map.array)
    voxel_ml = volume.voxel_volume_ml
    measured = {}
    for value, name in STARTER_LABELS.items():
        if value == 0:
            continue
        truth, found = reference == value, predicted == value
        overlap, total = np.count_nonzero(truth & found), np.count_nonzero(truth) + np.count_nonzero(found)
        measured[name] = {"dice": 2 * overlap / total if np.count_nonzero(truth) else None,
                          "predicted_ml": np.count_nonzero(found) * voxel_ml}
    assert (measured["lungs"]["dice"] is not None) == LUNGS_IN_SCAN[case]
    for name, target in TARGETS.items():
        if name == "lungs" and not LUNGS_IN_SCAN[case]:  # the model must not invent lung below the lungs
            assert measured[name]["predicted_ml"] < 5.0, (case, measured[name])  # 0.0 ml (2.2 without post-processing)
        else:
            assert measured[name]["dice"] >= target, (case, name, measured[name])
    recorded = _evaluation(starter)["cases"][case]
    for name, score in measured.items():
        assert (recorded[name]["dice"] is None) == (score["dice"] is None), (case, name)
        if score["dice"] is not None:
            assert math.isclose(recorded[name]["dice"], score["dice"], abs_tol=0.005), (case, name)
        assert math.isclose(recorded[name]["predicted_ml"], score["predicted_ml"], rel_tol=0.02, abs_tol=0.5)
    assert np.isclose(sum(result.volumes_ml.values()), float(np.count_nonzero(predicted)) * voxel_ml)


def test_segment_command_uses_the_starter_by_default(ct_dir: Path, tmp_path: Path, capsys) -> None:
    out = tmp_path / "chest_labels.nii.gz"
    assert main(["segment", str(ct_dir / HELD_OUT["chest_slice_ct1"]), "-o", str(out), "--json"]) == 0
    events = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    report = events[-1]
    assert report["event"] == "done" and events[0]["event"] == "progress"
    assert report["volumes_ml"]["lungs"] > 15  # two lungs in a 1 mm slab of chest: about 24 ml by the rules
    written = read_image(out)
    assert set(np.unique(written.array).tolist()) <= {0, 1, 2, 3}
    assert (written.array == 2).sum() * written.voxel_volume_ml == pytest.approx(report["volumes_ml"]["lungs"], rel=1e-3)


def test_bones_against_totalsegmentator_an_independent_reference(starter, ct_dir: Path) -> None:
    manifest = json.loads((STARTER / "reference_totalsegmentator.json").read_text())
    (case,) = manifest["cases"]
    volume = load(ct_dir.parent / case["image"])
    # TotalSegmentator's file is stored LAS: placed on the DICOM grid by its geometry
    from medseg.io.resample import resample_to

    reference = np.isin(resample_to(read_image(ct_dir.parent / case["label"]), volume, "nearest").array,
                        [int(v) for v in case["label_values"]])
    assert 140 < reference.sum() * volume.voxel_volume_ml < 155  # vertebrae T11-T12, humeri, ribs 6-12: 147 ml
    bones = segment(volume, starter, device="cpu").label_map.array == 3
    dice = 2 * (bones & reference).sum() / (bones.sum() + reference.sum())
    (entry,) = [e for e in starter.provenance["evaluations"] if e["dataset"] == manifest["name"]]
    assert math.isclose(entry["cases"][case["name"]]["bones"]["dice"], dice, abs_tol=0.005)  # the model card's figure
    # the rule labels the model learned from agree with TotalSegmentator to 0.73 here; the model is near that
    rule = rule_label_map(volume).array == 3
    rule_dice = 2 * (rule & reference).sum() / (rule.sum() + reference.sum())
    assert 0.70 < rule_dice < 0.76
    assert dice > 0.6


def _rule_bones_dice(hu: np.ndarray, body: np.ndarray, spacing, reference: np.ndarray, setting: tuple) -> float:
    min_hu, rim_min_hu, marrow_min_hu, closing_mm = setting
    bones = bone_mask(hu, body, spacing, min_hu=min_hu, rim_min_hu=rim_min_hu, marrow_min_hu=marrow_min_hu,
                      closing_radius_mm=closing_mm)
    return float(2 * (bones & reference).sum() / (bones.sum() + reference.sum()))


def test_no_bone_rule_setting_reaches_totalsegmentator_on_the_held_out_scan(ct_dir: Path) -> None:
    """Why bones >= 0.80 against TotalSegmentator is out of reach for a model taught by the rule.

    The rule's settings are swept against TotalSegmentator on two scans: the training crop
    ``example_ct_sm`` (3 mm, TotalSegmentator labels beside it) to choose a setting, and the
    held-out ``example_ct_dicom`` (1 x 1 x 2 mm) to test it. No setting reaches 0.80 held out,
    and the one that fits the crop best is worse held out than the shipped one: HU thresholds
    do not carry TotalSegmentator's anatomical definition of bone across resolutions.
    """
    import SimpleITK as sitk

    from medseg.io.resample import resample_to

    folder = ct_dir / "totalsegmentator"
    crop = sitk.ReadImage(str(folder / "example_ct_sm.nii.gz"))  # its label map shares its header exactly
    crop_labels = sitk.GetArrayFromImage(sitk.ReadImage(str(folder / "example_seg.nii.gz")))
    # vertebrae L2-T11, ribs 7-12 left and right (costal cartilage, 117, is not bone)
    crop_reference = np.isin(crop_labels, [30, 31, 32, 33, *range(98, 104), *range(110, 116)])
    manifest = json.loads((STARTER / "reference_totalsegmentator.json").read_text())
    (case,) = manifest["cases"]
    held = load(ct_dir.parent / case["image"])
    held_reference = np.isin(resample_to(read_image(ct_dir.parent / case["label"]), held, "nearest").array,
                             [int(v) for v in case["label_values"]])
    scans = {"crop": (sitk.GetArrayFromImage(crop).astype(np.float32), crop.GetSpacing(), crop_reference),
             "held_out": (held.array.astype(np.float32), held.spacing_mm, held_reference)}
    bodies = {name: body_mask(hu, spacing) for name, (hu, spacing, _) in scans.items()}
    settings = {(min_hu, min(rim, min_hu), marrow, closing)  # bone HU, rim HU (= bone HU: no rim), marrow HU, closing mm
                for min_hu in (150, 200, 250) for rim in (150, 1000) for marrow in (-50, 50, 100) for closing in (3, 8)}
    shipped = (BONE_MIN_HU, BONE_RIM_MIN_HU, MARROW_MIN_HU, BONE_CLOSING_RADIUS_MM)
    assert shipped in settings
    dice = {s: {name: _rule_bones_dice(hu, bodies[name], spacing, ref, s) for name, (hu, spacing, ref) in scans.items()}
            for s in settings}
    best_held_out = max(d["held_out"] for d in dice.values())
    fits_crop = max(settings, key=lambda s: dice[s]["crop"])
    print(f"rule bones vs TotalSegmentator over {len(settings)} settings: best held out {best_held_out:.3f}; "
          f"best on the crop {fits_crop} {dice[fits_crop]['crop']:.3f} -> held out {dice[fits_crop]['held_out']:.3f}; "
          f"shipped {dice[shipped]['crop']:.3f} / {dice[shipped]['held_out']:.3f}")
    assert 0.74 < best_held_out < 0.80  # the model card: 0.752
    assert dice[fits_crop]["crop"] > 0.85  # the crop can be fitted (0.906) ...
    assert dice[fits_crop]["held_out"] < dice[shipped]["held_out"] - 0.03  # ... and that setting is worse held out (0.674 vs 0.728)
