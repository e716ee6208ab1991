"""Installing nnInteractive's published model from the catalogue, against a loopback HTTP server: its four files
as the publisher lays them out (nnInteractive_v1.0/{plans,dataset,inference_session_class}.json and
fold_0/checkpoint_final.pth), the licence refused unless accepted, the checkpoint converted without
unpickling, the runtime measured once, a pack installed without a network, the model opened by its id.

The checkpoint is a small one in nnInteractive's exact layout with random weights (tests/model/interactive_fixture.py).
The shipped catalogue's entry is the one installed, its URLs pointed at the server.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from interactive_fixture import make_nninteractive_folder

from medseg.catalogue.entries import load_catalogue
from medseg.catalogue.folders import find_installed, installed_model_path
from medseg.catalogue.install import install, verify
from medseg.catalogue.packs import install_pack, pack
from medseg.cli import main as cli_main
from medseg.errors import LicenceNotAccepted, ModelError

MODEL_ID = "nninteractive/v1.0"
PATCH = 64  # a 64^3 patch (the refinement needs > 48), 3 stages of 4..16 features: the conversion and the runtime measurement in seconds


@pytest.fixture(scope="module")
def published(tmp_path_factory) -> dict[str, bytes]:
    """The four files of the published folder, by their path below nnInteractive_v1.0/."""
    folder = make_nninteractive_folder(tmp_path_factory.mktemp("hub"), patch_size=(PATCH,) * 3, n_stages=3,
                                       base_features=4, max_features=16, name="nnInteractive_v1.0")
    return {path.relative_to(folder).as_posix(): path.read_bytes() for path in folder.rglob("*") if path.is_file()}


@pytest.fixture
def catalogue(tmp_path, server, published, monkeypatch) -> Path:
    """The shipped catalogue with nnInteractive's downloads on the loopback server (sizes and all as shipped,
    but the test checkpoint's size)."""
    document = json.loads(Path(load_catalogue().source).read_text(encoding="utf-8"))
    entry = next(e for e in document["models"] if e["id"] == MODEL_ID)
    for file in entry["files"]:
        inside = file["path"].split("/", 1)[1]
        assert file["urls"][0].endswith("nnInteractive_v1.0/" + inside)  # the publisher's layout, as shipped
        server.files[f"/nnInteractive_v1.0/{inside}"] = published[inside]
        file["urls"] = [f"{server.url}/nnInteractive_v1.0/{inside}"]
        file["size"] = len(published[inside])
    document["models"] = [entry]
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps(document))
    monkeypatch.setenv("MEDSEG_CATALOGUE", str(path))
    return path


def test_the_shipped_entry_states_the_licence_and_the_published_files():
    entry = load_catalogue().get(MODEL_ID)
    assert entry.interactive and entry.support == "exact"
    assert entry.licence.spdx == "CC-BY-NC-SA-4.0" and not entry.licence.commercial_use
    assert entry.licence.acceptance_required and "non-commercial" in entry.licence.terms.lower()
    sizes = {f.path: f.size for f in entry.files}
    assert sizes["nnInteractive_v1.0/plans.json"] == 6287
    assert sizes["nnInteractive_v1.0/inference_session_class.json"] == 121
    assert sizes["nnInteractive_v1.0/fold_0/checkpoint_final.pth"] == 411_387_150


def test_nothing_is_fetched_before_the_licence_is_accepted(catalogue, server):
    with pytest.raises(LicenceNotAccepted, match="CC BY-NC-SA 4.0"):
        install(MODEL_ID)
    assert server.ranges("/nnInteractive_v1.0/fold_0/checkpoint_final.pth") == []  # never asked for
    assert find_installed(MODEL_ID) is None
    from medseg.workflows.interactive import open_interactive_model

    with pytest.raises(ModelError, match="not installed") as refused:  # what the Interactive AI tool then says
        open_interactive_model(MODEL_ID)
    assert "Models…" in refused.value.hint


def test_install_converts_measures_and_opens_by_id(catalogue, server, published, tmp_path, monkeypatch):
    from medseg.model.interactive import runtimes
    from medseg.model.interactive.runtimes import chosen_runtime, load_choice
    from medseg.workflows.interactive import open_interactive_model

    # OpenVINO is not one of medseg's dependencies: without it there is nothing to measure PyTorch against,
    # and the session runs PyTorch (the same on every machine, whatever a developer installed by hand)
    monkeypatch.setattr(runtimes, "openvino_available", lambda: False)

    shown = []
    record = install(MODEL_ID, accept_licence=lambda entry: shown.append(entry.licence.terms) or True)
    assert shown and "CC BY-NC-SA 4.0" in shown[0]
    assert record.licence["accepted_at"] and record.licence["spdx"] == "CC-BY-NC-SA-4.0"
    assert not any(name.endswith(".pth") for name in record.files)  # converted: no pickle stays
    assert all(v.ok for v in verify(MODEL_ID))
    folder = installed_model_path(MODEL_ID)
    model = open_interactive_model(MODEL_ID)
    assert tuple(model.plan.patch_size) == (PATCH,) * 3
    assert "CC-BY-NC-SA-4.0" in model.license
    assert load_choice(folder) is None  # nothing measured, nothing written
    runtime, why = chosen_runtime(model)
    assert runtime == "torch" and "no measured choice" in why
    # the same weights as the checkpoint, read by PyTorch's weights-only loader here as the oracle
    import io

    import torch

    checkpoint = torch.load(io.BytesIO(published["fold_0/checkpoint_final.pth"]), weights_only=False)
    theirs = {k: v for k, v in checkpoint["network_weights"].items() if "all_modules" not in k}
    ours = model.weights
    assert set(ours) <= set(theirs) and all(torch.equal(ours[k], theirs[k]) for k in ours)

    packed = pack(MODEL_ID, tmp_path / "nninteractive.medsegpack")
    from medseg.catalogue.install import remove

    remove(MODEL_ID)
    server.files.clear()  # no network from here on
    install_pack(packed, accept_licence=True)
    again = open_interactive_model(installed_model_path(MODEL_ID))
    assert all(torch.equal(again.weights[k], ours[k]) for k in ours)


def test_the_cli_shows_the_licence_and_installs_with_acceptance(catalogue, capsys):
    assert cli_main(["models", "info", MODEL_ID]) == 0
    out = capsys.readouterr().out
    assert "CC-BY-NC-SA-4.0" in out and "non-commercial" in out.lower()
    assert cli_main(["models", "install", MODEL_ID]) != 0  # no terminal to ask on, no --accept-licence
    assert find_installed(MODEL_ID) is None
    assert cli_main(["models", "install", MODEL_ID, "--accept-licence"]) == 0
    assert find_installed(MODEL_ID) is not None


def test_a_users_own_checkpoint_folder_is_imported_under_the_same_licence(published, tmp_path, capsys):
    """A fine-tuned checkpoint in nnInteractive's layout, under another folder name: local/<name>, an interactive
    model whose licence (nnInteractive's: share-alike) is asked for first, then opened by its id."""
    from medseg.workflows.interactive import open_interactive_model

    folder = tmp_path / "my_finetuned_nnInteractive"
    for inside, data in published.items():
        (folder / inside).parent.mkdir(parents=True, exist_ok=True)
        (folder / inside).write_bytes(data)
    assert cli_main(["models", "import", str(folder)]) != 0
    assert "CC BY-NC-SA 4.0" in capsys.readouterr().err
    assert find_installed("local/my_finetuned_nnInteractive") is None
    assert cli_main(["models", "import", str(folder), "--accept-licence"]) == 0
    record = find_installed("local/my_finetuned_nnInteractive")
    assert record.entry["kind"] == "nninteractive" and record.licence["spdx"] == "CC-BY-NC-SA-4.0"
    assert tuple(open_interactive_model("local/my_finetuned_nnInteractive").plan.patch_size) == (PATCH,) * 3
