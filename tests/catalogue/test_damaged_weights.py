"""Task folders with missing or damaged weights: refused at import, at install and at open, with an error that
names the file and the problem; nothing is half-installed and the user's own folder is left as it was."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import struct
import zipfile
from pathlib import Path

import pytest
from catalogue_fixtures import MODEL_ID, ZIP_NAME
from nnunet_fixture import DATASET_NAME, make_nnunet_result_folder

from medseg.catalogue.entries import load_catalogue
from medseg.catalogue.folders import find_installed, installed_model_path
from medseg.catalogue.install import import_path, install
from medseg.errors import ModelError
from medseg.workflows.models import open_model

TASK_ID = "totalsegmentator/tissue_4_types"
FOLDER = "Dataset485_tissue_4types_1559subj"
TRAINER = "nnUNetTrainer__nnUNetPlans__3d_fullres"


@pytest.fixture(scope="module")
def task_weights(tmp_path_factory) -> Path:
    """A TotalSegmentator weights folder holding one task (tiny random weights in its layout)."""
    root = tmp_path_factory.mktemp("ts-weights")
    names = ["background", *(s.name for s in load_catalogue().get(TASK_ID).structures)]
    make_nnunet_result_folder(root, spacing_zyx=(1.5, 1.5, 1.5), patch_size=(16, 32, 32), n_stages=3,
                              base_features=4, labels=names, seed=5)
    (root / DATASET_NAME).rename(root / FOLDER)
    return root


def flip_a_weight_byte(checkpoint: Path) -> None:
    """Change one byte inside the largest tensor's data (not a zip header): the archive still opens."""
    with zipfile.ZipFile(checkpoint) as archive:
        info = max(archive.infolist(), key=lambda i: i.file_size)
    data = bytearray(checkpoint.read_bytes())
    name_length, extra_length = struct.unpack("<HH", data[info.header_offset + 26:info.header_offset + 30])
    start = info.header_offset + 30 + name_length + extra_length
    data[start + info.compress_size // 2] ^= 0xFF
    checkpoint.write_bytes(bytes(data))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:path.stat().st_size // 2])


CHECKPOINT = f"{FOLDER}/{TRAINER}/fold_0/checkpoint_final.pth"
DAMAGES = {
    # name: (what is done to the folder, the file the error names, words it says)
    "no-fold": (lambda t: shutil.rmtree(t / FOLDER / TRAINER / "fold_0"), f"{FOLDER}/{TRAINER}",
                "no fold_*/checkpoint_final.pth"),
    "no-checkpoint": (lambda t: (t / CHECKPOINT).unlink(), f"{FOLDER}/{TRAINER}/fold_0",
                      "fold_0/checkpoint_final.pth is missing"),
    "truncated-checkpoint": (lambda t: truncate(t / CHECKPOINT), CHECKPOINT, "truncated or damaged"),
    "corrupt-checkpoint": (lambda t: flip_a_weight_byte(t / CHECKPOINT), CHECKPOINT, "fails its CRC check"),
    "plans-not-json": (lambda t: (t / FOLDER / TRAINER / "plans.json").write_text('{"plans": '),
                       f"{FOLDER}/{TRAINER}/plans.json", "plans.json is not valid JSON"),
    "no-dataset-json": (lambda t: (t / FOLDER / TRAINER / "dataset.json").unlink(), f"{FOLDER}/{TRAINER}",
                        "dataset.json is missing"),
}


def snapshot(root: Path) -> dict[str, str]:
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def nothing_installed(model_id: str) -> bool:
    folder = Path(os.environ["MEDSEG_MODELS"]).joinpath(*model_id.split("/"))
    return find_installed(model_id) is None and not (
        folder.is_dir() and any(p.name.startswith(("v-", ".staging-", ".unpack-")) for p in folder.iterdir()))


@pytest.mark.parametrize("damage", sorted(DAMAGES))
def test_a_damaged_task_folder_is_refused_at_import_naming_the_file(task_weights, tmp_path, damage):
    do, named, words = DAMAGES[damage]
    weights = tmp_path / "nnunet" / "results"
    shutil.copytree(task_weights, weights)
    do(weights)
    before = snapshot(weights)
    with pytest.raises(ModelError) as caught:
        import_path(weights, accept_licence=True)
    assert caught.value.path == weights / named and words in caught.value.message
    assert nothing_installed(TASK_ID)
    assert snapshot(weights) == before  # the user's folder is untouched


def test_one_damaged_task_stops_the_whole_import(task_weights, tmp_path, result_root):
    """A TotalSegmentator home with a good task and a damaged one: nothing is installed, the damaged one is named."""
    home = tmp_path / "results"
    shutil.copytree(task_weights, home)
    shutil.copytree(result_root / DATASET_NAME, home / DATASET_NAME)
    truncate(next((home / DATASET_NAME).glob("*/fold_0/checkpoint_final.pth")))
    with pytest.raises(ModelError, match="truncated or damaged") as caught:
        import_path(home, accept_licence=True)
    assert DATASET_NAME in str(caught.value.path)
    assert nothing_installed(TASK_ID) and find_installed(f"local/{DATASET_NAME}") is None


def zipped(root: Path, folder: str) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_STORED) as archive:
        for path in sorted((root / folder).rglob("*")):
            archive.write(path, path.relative_to(root).as_posix())
    return buffer.getvalue()


@pytest.mark.parametrize("damage", ["corrupt-checkpoint", "no-checkpoint", "plans-not-json"])
def test_a_downloaded_zip_with_damaged_weights_installs_nothing(catalogue_file, result_root, tmp_path, damage):
    copy = tmp_path / "published"
    shutil.copytree(result_root, copy)
    trainer = next((copy / DATASET_NAME).iterdir())
    if damage == "corrupt-checkpoint":
        flip_a_weight_byte(trainer / "fold_0" / "checkpoint_final.pth")
    elif damage == "no-checkpoint":
        (trainer / "fold_0" / "checkpoint_final.pth").unlink()
    else:
        (trainer / "plans.json").write_text("not json at all")
    catalogue_file(sha256=None, payload=zipped(copy, DATASET_NAME))
    with pytest.raises(ModelError) as caught:
        install(MODEL_ID)
    inside = {"corrupt-checkpoint": f"{trainer.name}/fold_0/checkpoint_final.pth in the download {ZIP_NAME}",
              "no-checkpoint": f"{trainer.name}/fold_0 in the download {ZIP_NAME}: fold_0/checkpoint_final.pth is "
                               "missing",
              "plans-not-json": f"{trainer.name}/plans.json in the download {ZIP_NAME}: plans.json is not valid"}
    assert inside[damage] in caught.value.message
    assert caught.value.path is None  # medseg's unpacked copy is gone: the message names the file in the zip
    assert nothing_installed(MODEL_ID)
    models = Path(os.environ["MEDSEG_MODELS"])
    assert not list(models.rglob(".unpack-*")) and not list(models.rglob("*.part"))  # a damaged zip is not resumed


@pytest.fixture
def installed(task_weights, tmp_path):
    weights = tmp_path / "weights"
    shutil.copytree(task_weights, weights)
    (record,) = import_path(weights, accept_licence=True).installed
    open_model(installed_model_path(TASK_ID))  # whole, it opens
    return record


def _safetensors(record) -> str:
    (name,) = [n for n in record.files if n.endswith(".safetensors")]
    return name


def _garble_header(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[9:29] = b"#" * 20
    path.write_bytes(bytes(data))


OPEN_DAMAGES = {
    "missing-weights": (lambda p: p.unlink(), "safetensors", "is missing"),
    "truncated-weights": (truncate, "safetensors", "(truncated)"),
    "garbled-header": (_garble_header, "safetensors", "header cannot be read"),
    "plans-not-json": (lambda p: p.write_text("{"), "source/Dataset485/plans.json", "is not valid JSON"),
    # the task runs through TotalSegmentator's pipeline: its manifest says how the networks make it
    "manifest-missing": (lambda p: p.unlink(), "model/totalseg.json", "is missing"),
}


@pytest.mark.parametrize("damage", sorted(OPEN_DAMAGES))
def test_an_installed_task_with_damaged_files_is_refused_at_open_naming_the_file(installed, damage):
    do, name, words = OPEN_DAMAGES[damage]
    name = _safetensors(installed) if name == "safetensors" else name
    path = installed.version_folder / name
    do(path)
    with pytest.raises(ModelError) as caught:
        installed_model_path(TASK_ID)
    assert caught.value.path == path and words in caught.value.message and name in caught.value.message
    assert "medseg models verify" in caught.value.hint


def test_the_record_keeps_each_files_size_for_the_check_at_open(installed):
    recorded = json.loads((installed.folder / "installed.json").read_text())["sizes"]
    assert recorded == {name: (installed.version_folder / name).stat().st_size for name in installed.files}


def test_a_zip_of_a_damaged_task_is_refused_too(task_weights, tmp_path):
    copy = tmp_path / "copy"
    shutil.copytree(task_weights, copy)
    flip_a_weight_byte(copy / CHECKPOINT)
    archive = tmp_path / f"{FOLDER}.zip"
    archive.write_bytes(zipped(copy, FOLDER))
    with pytest.raises(ModelError, match="fails its CRC check") as caught:
        import_path(archive, accept_licence=True)
    assert caught.value.path == archive and caught.value.message.startswith(f"{CHECKPOINT} in {archive.name}: ")
    assert nothing_installed(TASK_ID) and archive.is_file()
    assert not list((Path(os.environ["MEDSEG_MODELS"]) / ".downloads").glob(".import-*"))


def test_the_error_names_the_file_for_a_user(task_weights, tmp_path):
    weights = tmp_path / "w"
    shutil.copytree(task_weights, weights)
    (weights / CHECKPOINT).unlink()
    with pytest.raises(ModelError) as caught:
        import_path(weights, accept_licence=True)
    assert str(caught.value).startswith(str(weights / FOLDER / TRAINER / "fold_0"))
