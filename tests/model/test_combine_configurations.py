"""Several separately trained configurations combined into one model; the series' spacing chooses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from small_packages import one_configuration, starter_like_package

from medseg.cli import main
from medseg.errors import ModelError
from medseg.model.package import load_package, save_package
from medseg.model.package_model import combine_packages


@pytest.fixture
def thin_and_thick(tmp_path: Path) -> tuple[Path, Path]:
    thin = save_package(one_configuration("3d_thin", (1.5, 1.5, 1.5), 0), tmp_path / "thin")
    thick = save_package(one_configuration("3d_thick", (5.0, 1.5, 1.5), 1), tmp_path / "thick")
    return thin, thick


def test_combined_model_holds_both_configurations_and_the_spacing_chooses(thin_and_thick, tmp_path: Path) -> None:
    out = tmp_path / "combined"
    assert main(["export", *map(str, thin_and_thick), "--format", "package", "-o", str(out), "--no-check"]) == 0
    combined = load_package(out)
    assert set(combined.configurations) == {"3d_thin", "3d_thick"}
    for name, source in zip(("3d_thin", "3d_thick"), thin_and_thick):
        original = load_package(source)
        for key, tensor in original.weights[name][0].items():
            assert torch.equal(combined.weights[name][0][key], tensor), key
        assert combined.provenance["configurations"][name]["training_command"].endswith(name)
        assert name in combined.onnx  # each configuration gets its ONNX model (DirectML)
    # thick slices (5 mm over 0.7 mm in-plane) choose the thick configuration, thin ones the other
    assert combined.select((5.0, 0.7, 0.7)).name == "3d_thick"
    assert combined.select((1.0, 0.7, 0.7)).name == "3d_thin"
    choice = combined.choose((5.0, 0.7, 0.7))
    assert "thick-slice" in choice.reason and "3d_thick" in choice.reason
    assert [row[0] for row in choice.candidates if row[1]] == ["3d_thick"]


def test_a_thick_configuration_is_known_by_its_flat_first_stage() -> None:
    from small_packages import two_d_configuration

    # 5 x 2 x 2 mm is under nnU-Net's anisotropy threshold (ratio 2.5 < 3), yet the planner keeps
    # z flat in the first stage (kernel 1x3x3): the configuration is made for thick slices
    thick = one_configuration("3d_thick", (5.0, 2.0, 2.0), 1)
    assert thick.configurations["3d_thick"].kernel_sizes[0] == [1, 3, 3]
    model = combine_packages([two_d_configuration(), one_configuration("3d_thin", (2.0, 2.0, 2.0), 0), thick])
    # lung1: 5 mm slices of 0.57 mm pixels; the 2D target (3 x 2 x 2) is no nearer than 3d_thick's
    choice = model.choose((5.0, 0.57, 0.57), (48, 512, 512))
    assert choice.chosen.name == "3d_thick"
    assert {name for name, suits, _ in choice.candidates if suits} == {"2d", "3d_thick"}
    assert model.select((1.0, 0.7, 0.7), (300, 512, 512)).name == "3d_thin"


def test_packages_with_other_labels_or_the_same_configuration_are_refused(tmp_path: Path) -> None:
    thin = one_configuration("3d_thin", (1.5, 1.5, 1.5), 0)
    other = one_configuration("3d_thick", (5.0, 1.5, 1.5), 1, labels={0: "background", 1: "body", 2: "lungs", 3: "liver"})
    with pytest.raises(ModelError, match="labels"):
        combine_packages([thin, other])
    with pytest.raises(ModelError, match="'3d_thin' is in more than one") as error:
        combine_packages([thin, one_configuration("3d_thin", (2.0, 2.0, 2.0), 2)])
    assert "--configuration-name" in str(error.value.hint)


def test_several_models_export_only_as_a_package(thin_and_thick, tmp_path: Path, capsys) -> None:
    assert main(["export", *map(str, thin_and_thick), "--format", "onnx", "-o", str(tmp_path / "m.onnx")]) != 0
    assert "several are combined only with --format package" in capsys.readouterr().err
    assert not (tmp_path / "m.onnx").exists()


def test_plan_command_says_which_configuration_and_why(thin_and_thick, tmp_path: Path, capsys) -> None:
    out = tmp_path / "combined"
    combined = combine_packages([load_package(p) for p in thin_and_thick])
    save_package(combined, out)
    capsys.readouterr()
    assert main(["plan", "--spacing", "5", "0.7", "0.7", "--shape", "60", "512", "512", "--model", str(out),
                 "--json"]) == 0
    choice = json.loads(capsys.readouterr().out)["model_selection"]
    assert choice["configuration"] == "3d_thick"
    assert {row["configuration"]: row["suits_series"] for row in choice["candidates"]} == {"3d_thin": False,
                                                                                          "3d_thick": True}
    assert choice["plan"]["strides"] == [list(s) for s in combined.configurations["3d_thick"].strides]
    assert main(["plan", "--spacing", "1", "0.7", "0.7", "--shape", "300", "512", "512", "--model", str(out)]) == 0
    text = capsys.readouterr().out
    assert "would use its configuration '3d_thin'" in text and "why: series 1 × 0.7 × 0.7 mm is near-isotropic" in text


def test_a_single_slice_gets_the_2d_configuration_when_there_is_one() -> None:
    combined = starter_like_package()
    # one chest slice (CT1_J2KR: 0.66 mm pixels): no 3D context, so the 2D configuration
    choice = combined.choose((1.0, 0.66, 0.66), (1, 512, 512))
    assert choice.chosen.name == "2d" and "fewer than 3 slices" in choice.reason
    # the same spacing as a stack of 300 slices: the thin 3D configuration, and 2D is not a candidate
    choice = combined.choose((1.0, 0.66, 0.66), (300, 512, 512))
    assert choice.chosen.name == "3d_thin"
    assert {name for name, suits, _ in choice.candidates if suits} == {"3d_thin"}
    # without the shape, the spacing alone decides (as before)
    assert combined.select((1.0, 0.66, 0.66)).name == "3d_thin"
    # a model with no 2D configuration runs a 3D one on a single slice
    only_3d = combine_packages([one_configuration("3d_thin", (1.5, 1.5, 1.5), 0),
                                one_configuration("3d_thick", (5.0, 1.5, 1.5), 1)])
    assert only_3d.select((1.0, 0.66, 0.66), (1, 512, 512)).name == "3d_thin"


def test_a_configuration_written_as_an_nnunet_folder_segments_as_in_medseg(ct_dir: Path, tmp_path: Path) -> None:
    # What bench_infer's starter rows rely on: nnU-Net v2's predictor runs the same network and
    # weights as medseg (a real chest crop; identity direction, so both read the same array).
    import SimpleITK as sitk
    from nnunet_fixture import nnunet_folder_from_package
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    from medseg.io import load
    from medseg.model.infer import segment

    package = one_configuration("3d_thick", (5.0, 1.5, 1.5), 1)
    folder = nnunet_folder_from_package(package, "3d_thick", tmp_path / "nnunet")
    image = sitk.ReadImage(str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"))[:, :, 20:30]
    assert image.GetDirection() == (1.0, 0.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0)
    sitk.WriteImage(image, str(tmp_path / "ct.nrrd"))
    predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                perform_everything_on_device=False, device=torch.device("cpu"), allow_tqdm=False)
    predictor.initialize_from_trained_model_folder(str(folder), use_folds=(0,))
    predictor.predict_from_files_sequential([[str(tmp_path / "ct.nrrd")]], [str(tmp_path / "nnunet_out")],
                                            save_probabilities=False, overwrite=True,
                                            folder_with_segs_from_prev_stage=None)
    theirs = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "nnunet_out.nii.gz")))
    ours = segment(load(tmp_path / "ct.nrrd"), package, device="cpu").label_map.array
    assert len(set(ours.ravel().tolist())) >= 3  # random weights, but not a constant output
    assert (ours == theirs).mean() >= 0.9999


def test_evaluate_scores_one_configuration_or_the_spacings_choice_and_records_which(tmp_path: Path, capsys) -> None:
    model = save_package(starter_like_package(), tmp_path / "model")
    manifest = tmp_path / "dataset.json"
    manifest.write_text(json.dumps({
        "name": "phantoms", "labels": ["body", "lungs", "bones"],
        # phantom spacing is (x, y, z) mm: 1.5 mm isotropic is near-isotropic, 6 mm slices over 1.5 mm pixels thick
        "cases": [{"name": "thin", "phantom": {"seed": 1, "shape": [24, 64, 64], "spacing": [1.5, 1.5, 1.5]},
                   "label_rule": "starter"},
                  {"name": "thick", "phantom": {"seed": 2, "shape": [12, 64, 64], "spacing": [1.5, 1.5, 6.0]},
                   "label_rule": "starter"}],
        "validation": ["thin", "thick"]}))
    capsys.readouterr()
    assert main(["evaluate", str(model), str(manifest), "--held-out", "--json", "--record"]) == 0
    done = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert {case["case"]: case["configuration"] for case in done["cases"]} == {"thin": "3d_thin", "thick": "3d_thick"}
    assert main(["evaluate", str(model), str(manifest), "--held-out", "--json", "--record",
                 "--configuration", "2d"]) == 0
    done = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert done["configuration"] == "2d" and {case["configuration"] for case in done["cases"]} == {"2d"}
    evaluations = load_package(model).provenance["evaluations"]  # both kept, told apart by configuration
    assert [(e["configuration"], e["configuration_per_case"]) for e in evaluations] == [
        (None, {"thin": "3d_thin", "thick": "3d_thick"}), ("2d", {"thin": "2d", "thick": "2d"})]
    assert main(["evaluate", str(model), str(manifest), "--configuration", "3d_medium"]) != 0
    assert "no configuration '3d_medium'" in capsys.readouterr().err
