"""nnInteractive model folders: read without running them, converted, saved and loaded back.

Oracles: nnInteractive 2.6.0 itself (what its session reads from the same folder: decay, point
radius, channel map, licence) and its network (built by its own trainer class) for the weights.
"""

from __future__ import annotations

import json
import os
import zipfile

import pytest
import torch
from interactive_fixture import interactive_plans, make_nninteractive_folder

from medseg.errors import ModelError, UnsafeModelError
from medseg.model.interactive.model_files import (
    OFFICIAL_LICENSE,
    UNKNOWN_LICENSE,
    import_nninteractive,
    load_interactive_model,
    save_interactive_model,
)

TINY = {"patch_size": (56, 56, 56), "n_stages": 3, "base_features": 4, "max_features": 16, "configuration": "3d_ps56"}


def _peer(folder):
    from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

    session = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=1)
    session.initialize_from_trained_model_folder(str(folder))
    return session


@pytest.fixture(scope="module")
def tiny_folder(tmp_path_factory):
    return make_nninteractive_folder(tmp_path_factory.mktemp("tiny"), **TINY, seed=5)


def test_weights_give_nninteractives_logits(tiny_folder):
    model = import_nninteractive(tiny_folder)
    assert model.plan.num_input_channels == 8 and model.plan.architecture == "ResidualEncoderUNet"
    assert model.plan.patch_size == (56, 56, 56) and model.plan.features_per_stage == [4, 8, 16]
    peer = _peer(tiny_folder).network.eval()
    ours = model.build_network()
    x = torch.randn(1, 8, 56, 56, 56, generator=torch.Generator().manual_seed(1))
    with torch.inference_mode():
        expected, got = peer(x), ours(x)
    assert expected.shape == got.shape == (1, 2, 56, 56, 56)
    assert torch.allclose(expected, got, atol=1e-4, rtol=1e-4), float((expected - got).abs().max())


def test_settings_as_nninteractive_reads_them(tmp_path):
    info = {"inference_class": "nnInteractiveInferenceSession", "point_radius": 3,
            "preferred_scribble_thickness": 3, "interaction_decay": 0.95,
            "supported_interactions": {"lasso": False, "bbox3d": True},
            "interaction_channels": 6,
            "channel_mapping": {"prev_seg": 0, "points": [-4, -3], "scribble": [-2, -1]}}
    folder = make_nninteractive_folder(tmp_path, **TINY, session_file="unused")
    (folder / "inference_info.json").write_text(json.dumps(info))
    settings = import_nninteractive(folder).settings
    peer = _peer(folder)
    assert settings.decay == peer.interaction_decay == 0.95
    assert settings.point_radius == 3
    assert list(settings.scribble_thickness) == list(peer.preferred_scribble_thickness) == [3, 3, 3]
    assert settings.prompt_channels == peer.num_interaction_channels == 7
    assert settings.supported == peer.supported_interactions
    assert settings.previous_channel == peer.channel_mapping["prev_seg"]
    for kind in ("points", "scribble", "lasso", "bbox2d", "bbox3d"):
        assert settings.pair(kind) == tuple(peer.channel_mapping[kind]), kind


@pytest.mark.parametrize("session_file, decay", [("nnInteractiveInferenceSessionV2", 0.9),
                                                 ({"point_radius": 4}, 0.98)])
def test_legacy_session_file(tmp_path, session_file, decay):
    folder = make_nninteractive_folder(tmp_path, **TINY, session_file=session_file)
    assert import_nninteractive(folder).settings.decay == decay == _peer(folder).interaction_decay


def test_licence(tmp_path):
    with_file = make_nninteractive_folder(tmp_path, **TINY, name="a", license_text="\nCC BY-NC-SA 4.0\nhttps://...\n")
    assert import_nninteractive(with_file).license == "CC BY-NC-SA 4.0" == _peer(with_file).license
    without = make_nninteractive_folder(tmp_path, **TINY, name="b")
    assert import_nninteractive(without).license == UNKNOWN_LICENSE
    assert _peer(without).license == "!!MISSING!!"
    # the published folder has no LICENSE file; both know its licence by its dataset and configuration
    plans = json.loads((without / "plans.json").read_text())
    plans["dataset_name"] = "Dataset225_nnInteractiveV2"
    plans["configurations"] = {"3d_fullres_ps192_bs24": plans["configurations"]["3d_ps56"]}
    (without / "plans.json").write_text(json.dumps(plans))
    checkpoint = torch.load(without / "fold_0" / "checkpoint_final.pth", weights_only=False)
    checkpoint["init_args"]["configuration"] = "3d_fullres_ps192_bs24"
    torch.save(checkpoint, without / "fold_0" / "checkpoint_final.pth")
    assert import_nninteractive(without).license == OFFICIAL_LICENSE == _peer(without).license


def test_saved_copy_loads_back_identical(tiny_folder, tmp_path):
    model = import_nninteractive(tiny_folder)
    saved = save_interactive_model(model, tmp_path / "converted")
    assert sorted(p.name for p in saved.iterdir()) == ["interactive.json", "weights.safetensors"]
    loaded = load_interactive_model(saved)
    assert loaded.plan == model.plan and loaded.settings == model.settings and loaded.license == model.license
    assert loaded.provenance["checkpoint_sha256"] == model.provenance["checkpoint_sha256"]
    assert set(loaded.weights) == set(model.weights)
    assert all(torch.equal(loaded.weights[k], model.weights[k]) for k in model.weights)
    # an nnInteractive folder loads directly too (converted in memory)
    assert load_interactive_model(tiny_folder).plan == model.plan


def test_damaged_copy_is_refused(tiny_folder, tmp_path):
    saved = save_interactive_model(import_nninteractive(tiny_folder), tmp_path / "converted")
    raw = bytearray((saved / "weights.safetensors").read_bytes())
    raw[-5] ^= 0xFF
    (saved / "weights.safetensors").write_bytes(bytes(raw))
    with pytest.raises(ModelError, match="checksum"):
        load_interactive_model(saved)
    with pytest.raises(ModelError, match="not an interactive model"):
        load_interactive_model(tmp_path)


class _Exploit:
    def __reduce__(self):
        return os.system, (f"touch {_Exploit.marker}",)


def test_checkpoint_that_would_run_code_is_refused_unrun(tmp_path):
    folder = make_nninteractive_folder(tmp_path, **TINY)
    path = folder / "fold_0" / "checkpoint_final.pth"
    checkpoint = torch.load(path, weights_only=False)
    _Exploit.marker = tmp_path / "exploited"
    checkpoint["logging"]["payload"] = _Exploit()
    torch.save(checkpoint, path)
    assert zipfile.is_zipfile(path)
    with pytest.raises(UnsafeModelError, match="system"):
        import_nninteractive(folder)
    assert not _Exploit.marker.exists()


def test_weights_that_do_not_fit_the_plans(tmp_path):
    folder = make_nninteractive_folder(tmp_path, **TINY)
    plans = interactive_plans((56, 56, 56), 3, 8, 16, "3d_ps56")  # twice the features the weights have
    (folder / "plans.json").write_text(json.dumps(plans))
    with pytest.raises(ModelError, match="do not fit the network"):
        import_nninteractive(folder)


def test_patch_too_small_for_the_refinement(tmp_path):
    folder = make_nninteractive_folder(tmp_path, patch_size=(48, 48, 48), n_stages=3, base_features=4,
                                       max_features=16, configuration="3d_ps48")
    with pytest.raises(ModelError, match="too small"):
        import_nninteractive(folder)


def test_missing_metadata_names_the_folder(tmp_path):
    folder = make_nninteractive_folder(tmp_path, **TINY)
    (folder / "inference_session_class.json").unlink()
    with pytest.raises(ModelError, match="inference_info.json") as error:
        import_nninteractive(folder)
    assert error.value.path == folder
