"""Import of real nnU-Net v2 result folders (made with nnunetv2's own code)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from nnunet_fixture import build_nnunet_network, make_nnunet_result_folder

from medseg.cli import main as cli_main
from medseg.errors import ModelError, UnsafeModelError
from medseg.model.nnunet_import import import_nnunet
from medseg.model.package import build_networks, load_package
from medseg.model.safe_checkpoint import load_checkpoint

torch.set_num_threads(2)


@pytest.fixture(scope="module")
def nnunet_folder(tmp_path_factory) -> Path:
    return make_nnunet_result_folder(tmp_path_factory.mktemp("nnunet"), folds=(0, 1))


def nnunet_outputs(folder: Path, fold: int, x: torch.Tensor) -> torch.Tensor:
    """nnU-Net's own network for the folder, with the fold's weights (trusted test file)."""
    plans = json.loads((folder / "plans.json").read_text())
    labels = json.loads((folder / "dataset.json").read_text())["labels"]
    checkpoint = torch.load(folder / f"fold_{fold}" / "checkpoint_final.pth", map_location="cpu", weights_only=False)
    configuration = checkpoint["init_args"]["configuration"]
    network = build_nnunet_network(plans, configuration, len(labels), deep_supervision=False)
    network.load_state_dict(checkpoint["network_weights"])
    with torch.no_grad():
        return network.eval()(x)


@pytest.mark.parametrize("plans_format", ["current", "legacy"])
def test_import_matches_nnunet_network(tmp_path, plans_format):
    folder = make_nnunet_result_folder(tmp_path, plans_format=plans_format, folds=(0, 1), seed=3)
    package = import_nnunet(folder)
    plan = package.configurations["3d_fullres"]
    assert package.names == {0: "background", 1: "liver", 2: "spleen"}
    assert plan.target_spacing_transposed == (3.0, 1.5, 1.5)
    assert plan.patch_size == (32, 64, 64)
    assert plan.strides == [[1, 1, 1], [1, 2, 2], [2, 2, 2], [2, 2, 2]]
    assert plan.kernel_sizes[0] == [1, 3, 3]
    assert plan.normalization == {"scheme": "CTNormalization", "mean": 68.5, "std": 176.3,
                                  "percentile_00_5": -958.0, "percentile_99_5": 1257.0}
    assert plan.mirror_axes == (0, 1, 2)
    assert plan.resampling["data"] == {"order": 3, "order_z": 0, "force_separate_z": None}
    assert package.provenance["plans_format"] == plans_format
    assert package.provenance["folds"] == ["fold_0", "fold_1"]
    networks = build_networks(package, "3d_fullres")
    assert len(networks) == 2
    torch.manual_seed(0)
    x = torch.randn(1, 1, 16, 32, 32)  # any multiple of the strides works; small is fast
    for fold, network in enumerate(networks):
        with torch.no_grad():
            ours = network(x)
        assert torch.max(torch.abs(ours - nnunet_outputs(folder, fold, x))) < 1e-5


def test_import_2d_configuration(tmp_path):
    folder = make_nnunet_result_folder(tmp_path, configuration="2d", patch_size=(64, 64), n_stages=4,
                                       labels=("background", "lung"))
    package = import_nnunet(folder)
    plan = package.configurations["2d"]
    assert plan.dim == 2 and plan.patch_size == (64, 64)
    assert plan.target_spacing_transposed[1:] == (1.5, 1.5)
    x = torch.randn(2, 1, 64, 64)
    with torch.no_grad():
        ours = build_networks(package, "2d")[0](x)
    assert ours.shape == (2, 2, 64, 64)
    assert torch.max(torch.abs(ours - nnunet_outputs(folder, 0, x))) < 1e-5


def test_fold_selection_and_best_checkpoint_fallback(nnunet_folder, tmp_path):
    package = import_nnunet(nnunet_folder, folds=[1])
    assert package.provenance["folds"] == ["fold_1"]
    assert package.num_folds("3d_fullres") == 1
    with pytest.raises(ModelError, match="fold 7 not found"):
        import_nnunet(nnunet_folder, folds=[7])
    copy = tmp_path / "copy"
    shutil.copytree(nnunet_folder, copy)
    (copy / "fold_0" / "checkpoint_final.pth").rename(copy / "fold_0" / "checkpoint_best.pth")
    package = import_nnunet(copy, folds=[0])
    assert package.provenance["checkpoints"] == {"fold_0": "checkpoint_best.pth"}


def test_old_intensity_property_name(nnunet_folder, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(nnunet_folder, copy)
    plans = json.loads((copy / "plans.json").read_text())
    plans["foreground_intensity_properties_by_modality"] = plans.pop("foreground_intensity_properties_per_channel")
    (copy / "plans.json").write_text(json.dumps(plans))
    assert import_nnunet(copy).configurations["3d_fullres"].normalization["mean"] == 68.5


class _RunsCode:
    def __init__(self, command: str):
        self.command = command

    def __reduce__(self):
        return (os.system, (self.command,))


def test_malicious_checkpoint_is_refused_and_never_runs(nnunet_folder, tmp_path):
    marker = tmp_path / "code_ran"
    copy = tmp_path / "evil"
    shutil.copytree(nnunet_folder, copy)
    checkpoint = copy / "fold_0" / "checkpoint_final.pth"
    trusted = torch.load(checkpoint, map_location="cpu", weights_only=False)
    trusted["logging"]["payload"] = _RunsCode(f"touch {marker}")
    torch.save(trusted, checkpoint)
    assert not marker.exists()
    with pytest.raises(UnsafeModelError, match="system") as error:
        import_nnunet(copy)
    assert error.value.path == checkpoint
    with pytest.raises(UnsafeModelError):
        load_checkpoint(checkpoint)
    assert not marker.exists()


def test_legitimate_checkpoint_needs_only_the_numpy_allow_list(nnunet_folder):
    checkpoint = load_checkpoint(nnunet_folder / "fold_0" / "checkpoint_final.pth")
    assert checkpoint["trainer_name"] == "nnUNetTrainer"
    assert checkpoint["init_args"]["configuration"] == "3d_fullres"
    assert float(checkpoint["_best_ema"]) == pytest.approx(0.1)


def _edit_plans(folder: Path, tmp_path: Path, edit) -> Path:
    copy = tmp_path / "edited"
    shutil.copytree(folder, copy)
    plans = json.loads((copy / "plans.json").read_text())
    edit(plans["configurations"]["3d_fullres"])
    (copy / "plans.json").write_text(json.dumps(plans))
    return copy


@pytest.mark.parametrize(
    ("class_name", "message"),
    [("dynamic_network_architectures.architectures.primus.Primus", "not supported yet"),
     ("my_lab.networks.FancyTransformerNet", "unknown")],
)
def test_unsupported_architectures_are_refused(nnunet_folder, tmp_path, class_name, message):
    def edit(config):
        config["architecture"]["network_class_name"] = class_name

    with pytest.raises(ModelError, match=message):
        import_nnunet(_edit_plans(nnunet_folder, tmp_path, edit))


def test_unsupported_layer_settings_are_refused(nnunet_folder, tmp_path):
    def edit(config):
        config["architecture"]["arch_kwargs"]["norm_op"] = "torch.nn.BatchNorm3d"

    with pytest.raises(ModelError, match="norm_op"):
        import_nnunet(_edit_plans(nnunet_folder, tmp_path, edit))


def test_trainer_that_builds_its_own_network_is_refused(tmp_path):
    folder = make_nnunet_result_folder(tmp_path, trainer_name="nnUNetTrainerBN")
    with pytest.raises(ModelError, match="nnUNetTrainerBN"):
        import_nnunet(folder)
    variant = make_nnunet_result_folder(tmp_path / "v", trainer_name="nnUNetTrainer_250epochs_NoMirroring")
    assert import_nnunet(variant).provenance["trainer_name"] == "nnUNetTrainer_250epochs_NoMirroring"


def test_region_labels_and_missing_files_are_refused(nnunet_folder, tmp_path):
    copy = tmp_path / "regions"
    shutil.copytree(nnunet_folder, copy)
    dataset = json.loads((copy / "dataset.json").read_text())
    dataset["labels"] = {"background": 0, "whole": [1, 2], "core": 2}
    (copy / "dataset.json").write_text(json.dumps(dataset))
    with pytest.raises(ModelError, match="region-based"):
        import_nnunet(copy)
    (copy / "plans.json").unlink()
    with pytest.raises(ModelError, match="plans.json is missing"):
        import_nnunet(copy)
    with pytest.raises(ModelError, match="not found"):
        import_nnunet(tmp_path / "nowhere")


def test_weights_that_do_not_match_plans_are_refused(nnunet_folder, tmp_path):
    def edit(config):
        config["architecture"]["arch_kwargs"]["features_per_stage"] = [8, 16, 32, 64]

    with pytest.raises(ModelError, match="shape"):
        import_nnunet(_edit_plans(nnunet_folder, tmp_path, edit))


def test_cli_import_model_writes_a_loadable_package(nnunet_folder, tmp_path, capsys):
    out = tmp_path / "abdomen.medseg"
    assert cli_main(["import-model", str(nnunet_folder), str(out), "--folds", "0"]) == 0
    assert "written to" in capsys.readouterr().out
    package = load_package(out)
    assert package.num_folds("3d_fullres") == 1
    assert package.provenance["trainer_name"] == "nnUNetTrainer"
    x = torch.randn(1, 1, 16, 32, 32)  # any multiple of the strides works; small is fast
    with torch.no_grad():
        ours = build_networks(package, "3d_fullres")[0](x)
    assert torch.max(torch.abs(ours - nnunet_outputs(nnunet_folder, 0, x))) < 1e-5
    assert cli_main(["plan", "--spacing", "3", "1.5", "1.5", "--shape", "40", "200", "200", "--model", str(out),
                     "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["model_selection"]["configuration"] == "3d_fullres"
    assert cli_main(["import-model", str(tmp_path / "missing"), str(tmp_path / "x.medseg")]) == 1
    assert "not found" in capsys.readouterr().err


def test_import_residual_encoder_unet(tmp_path):
    folder = make_nnunet_result_folder(tmp_path / "current", network="ResidualEncoderUNet")
    package = import_nnunet(folder)
    plan = package.configurations["3d_fullres"]
    assert plan.architecture == "ResidualEncoderUNet"
    assert plan.n_conv_per_stage_encoder == [1, 3, 4, 6]
    assert plan.n_conv_per_stage_decoder == [1, 1, 1]
    x = torch.randn(1, 1, 16, 32, 32)  # any multiple of the strides works; small is fast
    with torch.no_grad():
        ours = build_networks(package, "3d_fullres")[0](x)
    assert torch.max(torch.abs(ours - nnunet_outputs(folder, 0, x))) < 1e-5
    # The pre-2024 plans of the same network (same seed, same weights) import identically.
    legacy = import_nnunet(make_nnunet_result_folder(tmp_path / "legacy", network="ResidualEncoderUNet",
                                                     plans_format="legacy"))
    assert legacy.configurations == package.configurations
    for key, tensor in package.weights["3d_fullres"][0].items():
        assert torch.equal(tensor, legacy.weights["3d_fullres"][0][key])


def test_nnunets_chosen_post_processing_runs_as_nnunet_runs_it(ct_dir: Path, tmp_path: Path) -> None:
    # nnU-Net's own remove_all_but_largest_component_from_segmentation is the oracle
    import numpy as np
    import SimpleITK as sitk
    from nnunet_fixture import nnunet_folder_from_package
    from nnunetv2.postprocessing.remove_connected_components import remove_all_but_largest_component_from_segmentation
    from small_packages import one_configuration

    from medseg.io import load
    from medseg.model.infer import segment

    folder = nnunet_folder_from_package(one_configuration("3d_thick", (5.0, 1.5, 1.5), 1), "3d_thick",
                                        tmp_path / "nnunet")
    kwargs = [{"labels_or_regions": 2, "background_label": 0}, {"labels_or_regions": [[1, 3]], "background_label": 0}]
    record = {"postprocessing_fns": ["remove_all_but_largest_component_from_segmentation"] * 2,
              "postprocessing_kwargs": kwargs}
    (folder / "crossval_results_folds_0").mkdir()
    (folder / "crossval_results_folds_0" / "postprocessing.json").write_text(json.dumps(record))
    package = import_nnunet(folder)
    assert package.postprocessing == [{"op": "keep_largest_component", "labels": ["lungs"]},
                                      {"op": "keep_largest_component", "labels": ["body", "bones"]}]
    assert package.provenance["postprocessing_from"] == "crossval_results_folds_0/postprocessing.json"

    image = sitk.ReadImage(str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"))[:, :, 20:30]
    sitk.WriteImage(image, str(tmp_path / "ct.nrrd"))
    volume = load(tmp_path / "ct.nrrd")
    raw = np.asarray(segment(volume, package, device="cpu", postprocess=False).label_map.array)
    ours = np.asarray(segment(volume, package, device="cpu").label_map.array)
    theirs = raw
    for arguments in kwargs:
        region = arguments["labels_or_regions"]
        theirs = remove_all_but_largest_component_from_segmentation(
            theirs, region if isinstance(region, int) else [tuple(r) for r in region], 0)
    assert (raw != theirs).sum() > 100  # random weights: many pieces to remove
    np.testing.assert_array_equal(ours, theirs)

    record["postprocessing_fns"][1] = "fill_everything"
    (folder / "crossval_results_folds_0" / "postprocessing.json").write_text(json.dumps(record))
    with pytest.raises(ModelError, match="unknown nnU-Net post-processing function 'fill_everything'") as error:
        import_nnunet(folder)
    assert "postprocessing.json" in str(error.value)
