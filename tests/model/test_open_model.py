"""One model opener for every interface (medseg.workflows.models.open_model) and the card each of them shows."""

from __future__ import annotations

import json
import zipfile
from pathlib import Path

import pytest
from nnunet_fixture import make_nnunet_result_folder
from pydicom.sr.codedict import codes

from medseg.errors import ModelError
from medseg.model.kinds.package_kind import MEDSEG_PACKAGE, NNUNET_RESULT
from medseg.workflows.models import list_models, model_path, open_model


def test_the_starter_card_states_its_labels_codes_from_model_json() -> None:
    opened = open_model("starter")
    card = opened.card
    manifest = json.loads((model_path("starter") / "model.json").read_text())
    assert card.id == "starter" and card.kind == MEDSEG_PACKAGE and card.name == manifest["name"]
    assert card.modality == "CT" and card.licence.startswith("Apache-2.0")
    assert card.version == opened.package.version and card.version
    assert {v: label.name for v, label in card.labels.items()} == {1: "body", 2: "lungs", 3: "bones"}
    # the codes are read from the package (and are the DCMR concepts pydicom's tables name)
    for value, label in card.labels.items():
        written = manifest["codes"][str(value)]
        assert label.type.value == written["type"]["value"] and label.category.value == written["category"]["value"]
    assert card.labels[1].type.value == codes.SCT.EntireBody.value
    assert card.labels[2].type.value == codes.SCT.Lung.value
    assert card.labels[3].type.value == codes.SCT.BoneTissue.value
    assert card.labels[3].category.value == codes.SCT.Tissue.value
    assert list(card.configurations) == ["2d"] and "2D" in card.configurations["2d"]
    assert len(card.postprocessing) == len(manifest["postprocessing"])
    assert [c.id for c in list_models()] == ["starter"]


def test_a_package_zip_and_an_nnunet_folder_open_the_same_way(tmp_path: Path) -> None:
    from medseg.model.package import save_package

    starter = open_model(None)
    zipped = save_package(starter.package, tmp_path / "starter.medseg")
    assert zipfile.is_zipfile(zipped)
    card = open_model(zipped).card
    assert card.id == str(zipped) and card.labels == starter.card.labels  # the codes travel in the zip

    folder = make_nnunet_result_folder(tmp_path / "results")
    nnunet = open_model(folder).card
    assert nnunet.kind == NNUNET_RESULT and nnunet.modality == "CT"
    assert {v: label.name for v, label in nnunet.labels.items()} == {1: "liver", 2: "spleen"}
    assert not any(label.coded for label in nnunet.labels.values())  # dataset.json codes nothing: none is guessed

    with pytest.raises(ModelError, match="no such model") as missing:
        open_model(tmp_path / "nowhere")
    assert missing.value.path == tmp_path / "nowhere"


def test_export_opens_an_nnunet_folder(tmp_path: Path, capsys) -> None:
    """`medseg export` read models with the package reader only: an nnU-Net folder was refused."""
    from medseg.cli import main
    from medseg.model.package import load_package

    folder = make_nnunet_result_folder(tmp_path / "results")
    out = tmp_path / "as_package"
    assert main(["export", str(folder), "--format", "package", "-o", str(out), "--no-check"]) == 0
    exported = load_package(out)
    assert exported.names == {0: "background", 1: "liver", 2: "spleen"}
    assert exported.configurations.keys() == open_model(folder).package.configurations.keys()


def test_another_model_source_plugs_in_through_one_resolver(tmp_path: Path, monkeypatch) -> None:
    """(Catalogue ids themselves: tests/catalogue/test_install.py, test_an_installed_model_opens_by_its_id.)"""
    import medseg.workflows.models as models
    from medseg.model.package import save_package

    installed = save_package(open_model(None).package, tmp_path / "installed" / "starter-copy")
    monkeypatch.setattr(models, "_resolvers", [])
    models.register_resolver(lambda reference: installed if reference == "example/starter-copy" else None)
    card = open_model("example/starter-copy").card
    assert card.id == "example/starter-copy" and card.source == installed


def test_a_weights_folder_that_is_no_model_says_how_to_import_it(tmp_path: Path) -> None:
    """TotalSegmentator's weights folder holds Dataset*/ folders, not a model: the error names the folder, the
    files medseg looks for, and the import command (not only "model.json is missing")."""
    weights = tmp_path / "totalsegmentator_weights"
    (weights / "Dataset291_TotalSegmentator_part1_organs_1559subj").mkdir(parents=True)
    with pytest.raises(ModelError) as raised:
        open_model(weights)
    text = str(raised.value)
    assert str(weights) in text and "model.json" in text and "plans.json" in text
    assert "medseg models import" in text
