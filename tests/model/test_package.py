"""medseg model packages: round trip, validation, atomic saves, no unpickling."""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest
import torch

from medseg.core.labels import Code
from medseg.errors import ModelError
from medseg.model.package import (
    MODEL_JSON,
    WEIGHTS_FILE,
    ModelPackage,
    build_networks,
    load_package,
    save_package,
)
from medseg.model.package_model import package_labels
from medseg.model.planner import plan_from_fingerprint
from medseg.model.unet import build_network

torch.set_num_threads(2)


def small_package(seed: int = 0) -> ModelPackage:
    """Two configurations (thin-slice 3D and 2D) with two and one random folds."""
    configs = plan_from_fingerprint([(3.0, 0.8, 0.8)], [(24, 48, 40)], num_classes=3,
                                    normalization={"scheme": "CTNormalization", "mean": 60.0, "std": 150.0,
                                                   "percentile_00_5": -1000.0, "percentile_99_5": 1400.0})
    for plan in configs.values():  # keep the networks tiny
        plan.features_per_stage = [4 * (i + 1) for i in range(plan.num_stages)]
    torch.manual_seed(seed)
    weights = {
        "3d_fullres": [build_network(configs["3d_fullres"], 3).state_dict() for _ in range(2)],
        "2d": [build_network(configs["2d"], 3).state_dict()],
    }
    return ModelPackage(
        name="test-abdomen",
        configurations=configs,
        labels=package_labels({0: "background", 1: "liver", 2: "spleen"}, colors={1: (200, 100, 50)},
                              codes={1: (Code("91723000", "SCT", "Anatomical Structure"), Code("10200004", "SCT", "Liver"))}),
        weights=weights,
        provenance={"source": "unit test", "seed": seed},
    )


def assert_same_package(a: ModelPackage, b: ModelPackage) -> None:
    assert a.name == b.name
    assert a.configurations == b.configurations
    assert a.labels == b.labels  # names, colours and codes
    assert a.provenance == b.provenance
    assert set(a.weights) == set(b.weights)
    for config in a.weights:
        assert len(a.weights[config]) == len(b.weights[config])
        for fold_a, fold_b in zip(a.weights[config], b.weights[config]):
            assert fold_a.keys() == fold_b.keys()
            for key in fold_a:
                assert torch.equal(fold_a[key], fold_b[key]), key


@pytest.mark.parametrize("target", ["model.medseg", "model.zip", "model_folder"])
def test_round_trip(tmp_path, target):
    package = small_package()
    path = save_package(package, tmp_path / target)
    loaded = load_package(path)
    assert_same_package(package, loaded)
    assert loaded.source_path == path
    assert loaded.labels[1].color == (200, 100, 50)
    assert loaded.labels[0].color == (0, 0, 0)
    assert len(loaded.labels[2].color) == 3  # filled from the default palette
    assert loaded.labels[1].type == Code("10200004", "SCT", "Liver") and not loaded.labels[2].coded
    if target == "model_folder":
        assert sorted(p.name for p in path.iterdir()) == [MODEL_JSON, WEIGHTS_FILE]
    else:
        assert zipfile.is_zipfile(path)


def test_build_networks_one_per_fold_in_eval_mode(tmp_path):
    package = small_package()
    loaded = load_package(save_package(package, tmp_path / "m.medseg"))
    networks = build_networks(loaded, "3d_fullres", "cpu")
    assert len(networks) == 2
    plan = loaded.configurations["3d_fullres"]
    x = torch.randn(1, 1, *plan.patch_size)
    outputs = []
    for network, state in zip(networks, package.weights["3d_fullres"]):
        assert not network.training
        reference = build_network(plan, 3).eval()
        reference.load_state_dict(state)
        with torch.no_grad():
            out = network(x)
            assert torch.equal(out, reference(x))
        outputs.append(out)
    assert not torch.equal(outputs[0], outputs[1])  # the folds really are different networks
    with pytest.raises(ModelError, match="no configuration"):
        build_networks(loaded, "3d_lowres")


def test_onnx_models_travel_with_the_package(tmp_path):
    package = small_package()
    plan = package.configurations["2d"]
    network = build_network(plan, 3).eval()
    network.load_state_dict(package.weights["2d"][0])
    buffer = io.BytesIO()
    torch.onnx.export(network, (torch.zeros(1, 1, *plan.patch_size),), buffer, dynamo=False, opset_version=17)
    package.onnx["2d"] = buffer.getvalue()
    from_zip = load_package(save_package(package, tmp_path / "m.medseg"))
    assert from_zip.onnx["2d"] == buffer.getvalue()
    from_folder = load_package(save_package(from_zip, tmp_path / "folder"))
    assert isinstance(from_folder.onnx["2d"], Path)
    assert from_folder.onnx["2d"].read_bytes() == buffer.getvalue()


def test_select_uses_spacing(tmp_path):
    package = small_package()
    assert package.select((3.0, 0.8, 0.8)).name == "3d_fullres"


def test_weights_that_do_not_fit_the_plan_are_refused(tmp_path):
    package = small_package()
    state = dict(package.weights["3d_fullres"][0])
    key = "decoder.seg_layers.0.weight"
    state[key] = torch.zeros(5, *state[key].shape[1:])
    package.weights["3d_fullres"][0] = state
    with pytest.raises(ModelError, match="seg_layers.0.weight"):
        save_package(package, tmp_path / "bad.medseg")
    assert not (tmp_path / "bad.medseg").exists()


def test_failed_save_leaves_existing_package_intact(tmp_path):
    target = tmp_path / "m.medseg"
    save_package(small_package(seed=1), target)
    before = target.read_bytes()
    broken = small_package(seed=2)
    broken.labels = {0: "background", 2: "spleen"}  # not consecutive
    with pytest.raises(ModelError, match="0..N-1"):
        save_package(broken, target)
    assert target.read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["m.medseg"]  # no temp files left behind
    save_package(small_package(seed=3), target)  # replacing works
    assert load_package(target).provenance["seed"] == 3


def test_folder_package_is_replaced_atomically(tmp_path):
    target = tmp_path / "pkg"
    save_package(small_package(seed=1), target)
    (target / "README.md").write_text("model card written by hand")  # not the package's: it stays
    (target / "model_3d_fullres.onnx").write_bytes(b"an export of the old weights")  # the package's: it goes
    save_package(small_package(seed=2), target)
    assert load_package(target).provenance["seed"] == 2
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pkg"]
    assert (target / "README.md").read_text() == "model card written by hand"
    assert not (target / "model_3d_fullres.onnx").exists()
    other = tmp_path / "not_a_package"
    other.mkdir()
    (other / "notes.txt").write_text("keep me")
    with pytest.raises(ModelError, match="not a medseg model package"):
        save_package(small_package(), other)
    assert (other / "notes.txt").read_text() == "keep me"


def _rewrite_zip(path: Path, replace: dict[str, bytes | None]) -> None:
    with zipfile.ZipFile(path) as archive:
        members = {name: archive.read(name) for name in archive.namelist()}
    for name, data in replace.items():
        if data is None:
            members.pop(name, None)
        else:
            members[name] = data
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_broken_packages_give_model_errors_naming_the_file(tmp_path):
    good = save_package(small_package(), tmp_path / "good.medseg")
    cases = {
        "no_manifest": {MODEL_JSON: None},
        "no_weights": {WEIGHTS_FILE: None},
        "bad_json": {MODEL_JSON: b"{not json"},
        "damaged_weights": {WEIGHTS_FILE: b"\x00" * 64},
    }
    manifest = json.loads(zipfile.ZipFile(good).read(MODEL_JSON))
    cases["newer_format"] = {MODEL_JSON: json.dumps({**manifest, "format_version": 99}).encode()}
    cases["unknown_label_gap"] = {MODEL_JSON: json.dumps({**manifest, "labels": {"0": "bg", "2": "x"}}).encode()}
    for name, change in cases.items():
        path = tmp_path / f"{name}.medseg"
        path.write_bytes(good.read_bytes())
        _rewrite_zip(path, change)
        with pytest.raises(ModelError) as error:
            load_package(path)
        assert error.value.path == path, name
    with pytest.raises(ModelError, match="not found"):
        load_package(tmp_path / "missing.medseg")
    not_zip = tmp_path / "plain.medseg"
    not_zip.write_text("hello")
    with pytest.raises(ModelError, match="not a medseg model package"):
        load_package(not_zip)


class _RunsCode:
    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_loading_never_unpickles(tmp_path):
    """A pickle smuggled in as the weights file is rejected as data, never executed."""
    marker = tmp_path / "pwned"
    payload = io.BytesIO()
    torch.save({"w": _RunsCode(marker)}, payload)
    assert not marker.exists()
    path = save_package(small_package(), tmp_path / "m.medseg")
    _rewrite_zip(path, {WEIGHTS_FILE: payload.getvalue()})
    with pytest.raises(ModelError, match="damaged"):
        load_package(path)
    assert not marker.exists()


def test_target_spacing_is_written_under_its_new_name_and_old_packages_still_load(tmp_path):
    """model.json before format 3 called the (transposed-order) target spacing "target_spacing_zyx"."""
    from importlib import resources

    package = small_package()
    path = save_package(package, tmp_path / "new_folder")
    manifest = json.loads((path / MODEL_JSON).read_text())
    assert manifest["format_version"] == 3
    for name, plan in package.configurations.items():
        written = manifest["configurations"][name]
        assert "target_spacing_zyx" not in written
        assert written["target_spacing_transposed"] == list(plan.target_spacing_transposed)
    # the same package as a version-2 file, as medseg wrote it before the rename
    old = json.loads(json.dumps(manifest))
    old["format_version"] = 2
    for written in old["configurations"].values():
        written["target_spacing_zyx"] = written.pop("target_spacing_transposed")
    (path / MODEL_JSON).write_text(json.dumps(old))
    assert_same_package(load_package(path), package)
    # the built-in starter is such a file
    starter = resources.files("medseg.resources") / "models" / "starter" / MODEL_JSON
    starter_json = json.loads(starter.read_text())
    assert all("target_spacing_zyx" in c for c in starter_json["configurations"].values())
    from medseg.model.package import starter_model_path

    loaded = load_package(starter_model_path())
    assert [p.target_spacing_transposed for p in loaded.configurations.values()] == [
        tuple(c["target_spacing_zyx"]) for c in starter_json["configurations"].values()]
