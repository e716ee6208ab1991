"""``segment -o`` replaces only a model's result that medseg wrote and nobody changed since (issue 43): the
sidecar records the file's SHA-256 and every label's provenance; a label map edited by hand (its bytes
changed, or saved by the editor with edited labels) is the user's work and needs ``--force``. The label
map is the TotalSegmentator reference on its own CT, saved as the starter model's output would be."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.cli import main
from medseg.core.labels import Label, Provenance
from medseg.io import read_image
from medseg.io.label_files import is_written_by, sidecar_path
from medseg.io.segmentations import is_saved_segmentation, save_segmentation


@pytest.fixture
def ct(ct_dir: Path):
    return read_image(ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz")


def _model_result(ct, path: Path, provenance: Provenance) -> Path:
    labels = ct.with_array((ct.array > 200).astype(np.uint8))
    save_segmentation(labels, ct, path, [Label(1, "bones", provenance=provenance)])
    return path


def test_a_model_result_unchanged_may_be_replaced_an_edited_one_may_not(ct, tmp_path) -> None:
    model = Provenance.model("medseg-starter", "2")
    path = _model_result(ct, tmp_path / "seg.nii.gz", model)
    record = json.loads(sidecar_path(path).read_text())["file"]
    import hashlib

    assert record["sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()  # the oracle: hashlib over the file
    assert is_saved_segmentation(path)
    image = sitk.ReadImage(str(path))  # edited by hand in another program: same sidecar, other voxels
    array = sitk.GetArrayFromImage(image)
    array[10, 40:50, 40:50] = 1
    edited = sitk.GetImageFromArray(array)
    edited.CopyInformation(image)
    sitk.WriteImage(edited, str(path))
    assert not is_saved_segmentation(path)
    path = _model_result(ct, tmp_path / "semi.nii.gz", model.edited())  # saved by the editor after a brush stroke
    assert not is_saved_segmentation(path)
    path = _model_result(ct, tmp_path / "drawn.nii.gz", Provenance())  # drawn by a person
    assert not is_saved_segmentation(path)


def test_segment_refuses_to_replace_a_hand_edited_map_before_any_work(ct, three_slices, tmp_path, capsys) -> None:
    path = _model_result(ct, tmp_path / "seg.nii.gz", Provenance.model("medseg-starter", "2").edited())
    before = path.read_bytes()
    assert main(["segment", str(three_slices), "-o", str(path)]) == 1
    err = capsys.readouterr().err
    assert "seg.nii.gz" in err and "nobody changed since (it may hold someone's edits)" in err and "--force" in err
    assert path.read_bytes() == before


def test_an_older_sidecar_without_a_digest_is_not_replaced_silently(ct, tmp_path) -> None:
    path = _model_result(ct, tmp_path / "seg.nii.gz", Provenance.model("medseg-starter", "2"))
    record = json.loads(sidecar_path(path).read_text())
    del record["file"]
    sidecar_path(path).write_text(json.dumps(record))
    assert not is_saved_segmentation(path)


def test_edit_replaces_its_own_output_but_not_an_edited_one(ct_dir, tmp_path, capsys) -> None:
    image = ct_dir / "totalsegmentator" / "example_ct_sm.nii.gz"
    labels = tmp_path / "labels.nii.gz"
    shutil.copy(ct_dir / "totalsegmentator" / "example_seg.nii.gz", labels)
    out = tmp_path / "out.nii.gz"
    argv = ["edit", str(image), "--labels", str(labels), "-o", str(out), "--keep-largest", "5"]
    assert main(argv) == 0
    assert is_written_by(out, "medseg edit")
    assert main(argv) == 0  # its own output, unchanged: replaced
    capsys.readouterr()
    saved = sitk.ReadImage(str(out))
    array = sitk.GetArrayFromImage(saved)
    array[5, 50:60, 50:60] = 5  # touched up in another program: not its own any more
    touched = sitk.GetImageFromArray(array)
    touched.CopyInformation(saved)
    sitk.WriteImage(touched, str(out))
    assert not is_written_by(out, "medseg edit")
    assert main(argv) == 1 and "--force" in capsys.readouterr().err
