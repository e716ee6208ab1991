"""Every parser of a file a user hands medseg turns any failure into a MedsegError naming the
file: a label sidecar that is garbage, a list, nested 100 000 deep or holds wrong types; a
damaged autosave session; an nnU-Net folder's JSON. Before, stats and edit raised
RecursionError, AttributeError or JSONDecodeError tracebacks on such sidecars."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from medseg.cli import main
from medseg.errors import MedsegError

SIDECARS = {
    "nested 100000 deep": "[" * 100_000 + "]" * 100_000,
    "a list": json.dumps([1, 2, 3]),
    "garbage": "\x00\xff{not json at all",
    "labels not a list": json.dumps({"format": "medseg-labels/1", "labels": {"1": "liver"}}),
    "a label a string": json.dumps({"labels": ["liver"]}),
    "name a number": json.dumps({"labels": [{"value": 5, "name": 12}]}),
    "colour a string": json.dumps({"labels": [{"value": 5, "name": "liver", "color": "red"}]}),
    "value out of range": json.dumps({"labels": [{"value": 10**12, "name": "liver"}]}),
    "flat form, colour of 4": json.dumps({"5": {"name": "liver", "color": [1, 2, 3, 4]}}),
    "code without a scheme": json.dumps({"labels": [{"value": 5, "name": "liver", "category": {"value": "1"}}]}),
}


@pytest.fixture
def labelled(ct_dir: Path, tmp_path: Path) -> tuple[Path, Path]:
    folder = ct_dir / "totalsegmentator"
    shutil.copy(folder / "example_seg.nii.gz", tmp_path / "seg.nii.gz")
    return folder / "example_ct_sm.nii.gz", tmp_path / "seg.nii.gz"


@pytest.mark.parametrize("case", list(SIDECARS))
@pytest.mark.parametrize("command", ["stats", "edit"])
def test_a_bad_sidecar_is_an_error_naming_it(labelled, tmp_path: Path, capsys, case: str, command: str) -> None:
    image, labels = labelled
    (tmp_path / "seg.labels.json").write_text(SIDECARS[case], encoding="latin-1")
    if command == "stats":
        argv = ["stats", str(labels), "--image", str(image)]
    else:
        argv = ["edit", str(image), "--labels", str(labels), "-o", str(tmp_path / "out.nii.gz"), "--keep-largest", "5"]
    assert main(argv) == 1  # any other exception fails the test with its traceback
    error = capsys.readouterr().err
    assert "seg.labels.json" in error and "sidecar" in error, error
    assert not (tmp_path / "out.nii.gz").exists()


def test_a_good_flat_sidecar_still_names_the_labels(labelled, tmp_path: Path, capsys) -> None:
    image, labels = labelled
    (tmp_path / "seg.labels.json").write_text(json.dumps({"5": {"name": "my liver", "color": [200, 0, 0],
                                                                 "locked": True}}))
    assert main(["stats", str(labels), "--image", str(image), "--json"]) == 0
    rows = {row["value"]: row["name"] for row in json.loads(capsys.readouterr().out)["labels"]}
    assert rows[5] == "my liver"
    assert main(["edit", str(image), "--labels", str(labels), "-o", str(tmp_path / "out.nii.gz"),
                 "--keep-largest", "1"]) == 0
    capsys.readouterr()
    assert main(["edit", str(image), "--labels", str(labels), "-o", str(tmp_path / "o2.nii.gz"),
                 "--shrink", "5", "2"]) == 1  # the sidecar's lock is kept
    assert "locked" in capsys.readouterr().err


@pytest.mark.parametrize("damage", ["a list", "garbage", "no shape", "wrong dtype"])
def test_a_damaged_autosave_session_is_an_error_naming_it(ct_dir: Path, tmp_path: Path, damage: str) -> None:
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.journal import find_sessions, recover
    from medseg.edit.label_map import LabelMap
    from medseg.io import read_image

    image = read_image(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")
    doc = SegmentationDocument()
    doc.enable_autosave(tmp_path)
    doc.set_volume(image, source="ct")
    doc.set_label_map(LabelMap.empty_like(image))
    folder = find_sessions(tmp_path)[0].folder
    info = json.loads((folder / "session.json").read_text())
    text = {"a list": "[1]", "garbage": "\x00{", "no shape": json.dumps({**info, "shape_zyx": None}),
            "wrong dtype": json.dumps({**info, "dtype": "not-a-type"})}[damage]
    (folder / "session.json").write_text(text)
    find_sessions(tmp_path)  # listing never raises
    with pytest.raises(MedsegError) as caught:
        recover(folder)
    assert str(folder) in str(caught.value)


@pytest.mark.parametrize("content", ["[" * 100_000 + "]" * 100_000, "[1, 2]", "\xff\xfe"])
def test_an_nnunet_folder_with_bad_json_is_a_model_error(tmp_path: Path, content: str) -> None:
    from medseg.errors import ModelError
    from medseg.workflows.models import open_model

    (tmp_path / "plans.json").write_text(content, encoding="latin-1")
    (tmp_path / "dataset.json").write_text("{}")
    with pytest.raises(ModelError) as caught:
        open_model(tmp_path)
    assert "plans.json" in str(caught.value)
