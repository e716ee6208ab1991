"""The planner against nnU-Net v2 itself (its get_pool_and_conv_props and ExperimentPlanner)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from nnunetv2.experiment_planning.experiment_planners.default_experiment_planner import ExperimentPlanner
from nnunetv2.experiment_planning.experiment_planners.network_topology import (
    get_pool_and_conv_props as nnunet_get_pool_and_conv_props,
)

from medseg.errors import ModelError
from medseg.model.configuration_choice import select_configuration
from medseg.model.plan import Plan
from medseg.model.planner import get_pool_and_conv_props, plan_from_fingerprint, plan_from_spacing

DATASET = "Dataset999_MedsegPlan"


def run_nnunet_planner(root: Path, monkeypatch, spacings, shapes, num_labels: int) -> dict:
    """Run nnU-Net's own ExperimentPlanner on a fingerprint (no image files needed)."""
    raw = root / "raw" / DATASET
    pre = root / "preprocessed" / DATASET
    raw.mkdir(parents=True)
    pre.mkdir(parents=True)
    monkeypatch.setenv("nnUNet_raw", str(root / "raw"))
    monkeypatch.setenv("nnUNet_preprocessed", str(root / "preprocessed"))
    labels = {"background": 0, **{f"organ{i}": i for i in range(1, num_labels)}}
    dataset_json = {
        "channel_names": {"0": "CT"},
        "labels": labels,
        "numTraining": len(spacings),
        "file_ending": ".nii.gz",
        "overwrite_image_reader_writer": "SimpleITKIO",
        # An explicit case list makes nnU-Net skip listing imagesTr.
        "dataset": {f"case{i}": {"images": [f"case{i}.nii.gz"], "label": f"case{i}_seg.nii.gz"} for i in range(len(spacings))},
    }
    (raw / "dataset.json").write_text(json.dumps(dataset_json))
    fingerprint = {
        "spacings": [list(map(float, s)) for s in spacings],
        "shapes_after_crop": [list(map(int, s)) for s in shapes],
        "median_relative_size_after_cropping": 1.0,
        "foreground_intensity_properties_per_channel": {
            "0": {"mean": 100.0, "std": 50.0, "percentile_00_5": -900.0, "percentile_99_5": 1200.0,
                  "median": 90.0, "min": -1024.0, "max": 3000.0}
        },
    }
    (pre / "dataset_fingerprint.json").write_text(json.dumps(fingerprint))
    planner = ExperimentPlanner(DATASET)
    planner.lowres_creation_threshold = 0  # medseg plans no 3d_lowres; skip nnU-Net's slow search for it
    return planner.plan_experiment()


def assert_same_configuration(ours: Plan, theirs: dict) -> None:
    arch = theirs["architecture"]["arch_kwargs"]
    assert list(ours.patch_size) == list(theirs["patch_size"])
    assert ours.strides == [list(s) for s in arch["strides"]]
    assert ours.kernel_sizes == [list(k) for k in arch["kernel_sizes"]]
    assert ours.features_per_stage == list(arch["features_per_stage"])
    assert ours.n_conv_per_stage_encoder == list(arch["n_conv_per_stage"])
    assert ours.n_conv_per_stage_decoder == list(arch["n_conv_per_stage_decoder"])
    assert ours.num_stages == arch["n_stages"]
    assert ours.batch_size == theirs["batch_size"]
    spacing = theirs["spacing"]
    assert np.allclose(ours.target_spacing_transposed[3 - len(spacing):], spacing)  # both transposed
    assert list(ours.median_shape) == [int(round(m)) for m in theirs["median_image_size_in_voxels"]]


FINGERPRINTS = {
    "isotropic_0.7mm": ([(0.7, 0.7, 0.7)] * 4, [(420, 512, 512), (380, 500, 512), (460, 512, 490), (400, 512, 512)]),
    "isotropic_1mm": ([(1.0, 1.0, 1.0), (1.0, 0.98, 0.98), (1.0, 1.02, 1.02)], [(300, 350, 350), (280, 360, 360), (310, 340, 340)]),
    "3mm_slices": ([(3.0, 0.78, 0.78), (3.0, 0.8, 0.8), (3.0, 0.7, 0.7)], [(100, 512, 512), (120, 512, 512), (90, 512, 512)]),
    # Mostly 5 mm with a few thin-slice cases: the 10th-percentile rule picks a finer z.
    "5mm_thick_with_thin_cases": (
        [(5.0, 0.7, 0.7)] * 7 + [(1.25, 0.7, 0.7), (1.0, 0.75, 0.75), (1.5, 0.7, 0.7)],
        [(60, 512, 512)] * 7 + [(240, 512, 512), (300, 512, 512), (200, 512, 512)],
    ),
    "tiny_images": ([(1.0, 1.0, 1.0), (1.2, 1.0, 1.0)], [(20, 30, 25), (18, 28, 30)]),
    # The coarse axis is the last one: nnU-Net transposes it to the front.
    "coarse_x_axis": ([(0.8, 0.8, 4.0), (0.8, 0.8, 4.0)], [(512, 512, 70), (512, 512, 80)]),
}


@pytest.mark.parametrize("case", sorted(FINGERPRINTS))
def test_fingerprint_planning_matches_nnunet(case, tmp_path, monkeypatch):
    spacings, shapes = FINGERPRINTS[case]
    theirs = run_nnunet_planner(tmp_path, monkeypatch, spacings, shapes, num_labels=3)
    ours = plan_from_fingerprint(spacings, shapes, num_classes=3)
    assert set(ours) == {"2d", "3d_fullres"} & set(theirs["configurations"])
    for name, plan in ours.items():
        assert_same_configuration(plan, theirs["configurations"][name])
        assert plan.transpose_forward == theirs["transpose_forward"]
        assert plan.transpose_backward == theirs["transpose_backward"]
        if case == "coarse_x_axis":  # stored with x first, as nnU-Net's plans; the image's own order is z, y, x
            assert plan.target_spacing_transposed[0] == 4.0
            assert plan.target_spacing_image_zyx == pytest.approx((0.8, 0.8, 4.0))


def test_ten_percentile_rule_picks_finer_slice_spacing():
    spacings, shapes = FINGERPRINTS["5mm_thick_with_thin_cases"]
    plan = plan_from_fingerprint(spacings, shapes)["3d_fullres"]
    # Median z spacing is 5 mm; the 10th percentile of the z spacings is ~1.2 mm.
    assert plan.target_spacing_transposed[0] == pytest.approx(np.percentile([s[0] for s in spacings], 10))
    assert plan.target_spacing_transposed[0] < 2.0


def test_required_abdominal_example():
    plan = plan_from_spacing((2.5, 0.78, 0.78), (200, 512, 512), num_classes=5, num_training_cases=100)
    assert plan.patch_size == (64, 192, 160)
    assert plan.strides == [[1, 1, 1], [1, 2, 2]] + [[2, 2, 2]] * 4
    assert plan.kernel_sizes[0] == [1, 3, 3]
    assert plan.kernel_sizes[1:] == [[3, 3, 3]] * 5
    assert plan.features_per_stage == [32, 64, 128, 256, 320, 320]


@pytest.mark.parametrize(
    "spacing",
    [(1.0, 1.0, 1.0), (0.7, 0.7, 0.7), (2.5, 0.78, 0.78), (3.0, 0.8, 0.8), (5.0, 0.7, 0.7), (1.0, 0.5, 2.2),
     (8.0, 1.0, 1.0), (0.9, 0.9), (5.0, 0.7)],
)
@pytest.mark.parametrize("patch", [(128, 128, 128), (64, 192, 160), (20, 30, 25), (7, 200, 200), (224.5, 12, 513)])
def test_get_pool_and_conv_props_matches_nnunet(spacing, patch):
    patch = patch[: len(spacing)]
    npool, strides, kernels, padded, divisor = get_pool_and_conv_props(spacing, patch, 4, 999999)
    t_npool, t_strides, t_kernels, t_padded, t_divisor = nnunet_get_pool_and_conv_props(spacing, patch, 4, 999999)
    assert npool == list(t_npool)
    assert strides == [list(s) for s in t_strides]
    assert kernels == [list(k) for k in t_kernels]
    assert list(padded) == [int(p) for p in t_padded]
    assert divisor == [int(d) for d in t_divisor]


def test_thick_slices_keep_z_unpooled_until_inplane_catches_up():
    npool, strides, kernels, _, _ = get_pool_and_conv_props((5.0, 0.7, 0.7), (40, 256, 256))
    # In-plane 0.7 -> 1.4 -> 2.8 mm: only then is z (5 mm) within 2x and pooled too.
    assert strides[1:3] == [[1, 2, 2]] * 2
    assert strides[3] == [2, 2, 2]
    assert kernels[:2] == [[1, 3, 3]] * 2
    assert kernels[2] == [3, 3, 3]
    assert npool[0] < npool[1]


def test_plan_json_round_trip():
    plans = plan_from_fingerprint(*FINGERPRINTS["3mm_slices"], num_classes=4,
                                  normalization={"scheme": "CTNormalization", "mean": 80.0, "std": 120.5,
                                                 "percentile_00_5": -1000.0, "percentile_99_5": 1500.0})
    for plan in plans.values():
        text = json.dumps(plan.to_dict())
        again = Plan.from_dict(json.loads(text))
        assert again == plan
        assert again.num_stages == len(plan.strides)
    text = str(plans["3d_fullres"])
    assert "3d_fullres" in text and "1x3x3" in text and "CT: clip" in text


def test_plan_rejects_inconsistent_fields():
    good = plan_from_spacing((1.0, 1.0, 1.0), (64, 64, 64)).to_dict()
    with pytest.raises(ModelError, match="kernel_sizes"):
        Plan.from_dict({**good, "kernel_sizes": good["kernel_sizes"][:-1]})
    with pytest.raises(ModelError, match="CTNormalization"):
        Plan.from_dict({**good, "normalization": {"scheme": "CTNormalization"}})
    with pytest.raises(ModelError, match="unknown fields"):
        Plan.from_dict({**good, "bogus": 1})
    with pytest.raises(ModelError):
        plan_from_spacing((0.0, 1.0, 1.0), (10, 10, 10))


def test_select_configuration_by_anisotropy_and_spacing():
    thin = plan_from_spacing((1.0, 0.8, 0.8), (300, 512, 512), name="thin")
    thick = plan_from_spacing((5.0, 0.8, 0.8), (60, 512, 512), name="thick")
    configs = {"thin": thin, "thick": thick}
    assert select_configuration(configs, (5.0, 0.7, 0.7)).name == "thick"
    assert select_configuration(configs, (0.7, 0.7, 0.7)).name == "thin"
    assert select_configuration(configs, (1.25, 0.9, 0.9)).name == "thin"
    # A 2D and a 3D plan of the same spacing: the 3D one is preferred.
    both = plan_from_fingerprint([(3.0, 0.8, 0.8)], [(100, 512, 512)])
    assert select_configuration(both, (3.0, 0.8, 0.8)).dim == 3
    assert select_configuration({"2d": both["2d"]}, (0.8, 0.8, 0.8)).name == "2d"
    with pytest.raises(ModelError):
        select_configuration({}, (1.0, 1.0, 1.0))
    # Plans with a transposed axis order compare the series spacing in that order.
    coarse_x = plan_from_fingerprint(*FINGERPRINTS["coarse_x_axis"])
    thick_z = plan_from_spacing((4.0, 0.8, 0.8), (70, 512, 512), name="a_thick_z")
    configs = {"coarse_x": coarse_x["3d_fullres"], "a_thick_z": thick_z}
    assert select_configuration(configs, (0.8, 0.8, 4.0)).transpose_forward == [2, 0, 1]
    assert select_configuration(configs, (4.0, 0.8, 0.8)).name == "a_thick_z"


def test_cli_plan_for_spacing_and_shape(capsys):
    from medseg.cli import main as cli_main

    assert cli_main(["plan", "--spacing", "2.5", "0.78", "0.78", "--shape", "200", "512", "512", "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["selected"] == "3d_fullres"
    fullres = Plan.from_dict(document["configurations"]["3d_fullres"])
    assert fullres.patch_size == (64, 192, 160)
    assert cli_main(["plan"]) == 1
    assert "--spacing" in capsys.readouterr().err


def test_cli_plan_for_a_real_dicom_series(ct_dir, capsys):
    from medseg.cli import main as cli_main

    # Siemens abdomen CT: 20 slices at 2 mm, 0.977 mm pixels.
    assert cli_main(["plan", str(ct_dir / "totalsegmentator" / "example_ct_dicom")]) == 0
    text = capsys.readouterr().out
    assert "spacing (z, y, x) 2 x 0.977 x 0.977 mm" in text
    assert "shape 20 x 512 x 512" in text
    expected = plan_from_spacing((2.0, 0.9765625, 0.9765625), (20, 512, 512), num_training_cases=1)
    assert str(expected) in text
    assert "selected for this spacing: 3d_fullres" in text
