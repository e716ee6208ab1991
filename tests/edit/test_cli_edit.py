"""`medseg edit` on real CT against SimpleITK, and bad operations refused before anything runs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

from medseg.cli import main
from medseg.io import read_image

from edit_cases import CARTILAGES, LIVER


def test_keep_largest_grow_and_lock_match_simpleitk(abdomen_files, tmp_path: Path, capsys):
    image_path, labels_path = abdomen_files
    out = tmp_path / "cleaned.nii.gz"
    code = main(["edit", str(image_path), "--labels", str(labels_path), "-o", str(out), "--totalsegmentator-names",
                 "--keep-largest", "costal_cartilages", "--lock", "liver", "--grow", "spleen", "6", "--json"])
    assert code == 0
    summary = json.loads(capsys.readouterr().out)
    assert [o["operation"] for o in summary["operations"]] == [
        "--keep-largest costal_cartilages", "--lock liver", "--grow spleen 6"]
    original = sitk.ReadImage(str(labels_path))
    written = sitk.ReadImage(str(out))
    assert written.GetSize() == original.GetSize() and np.allclose(written.GetOrigin(), original.GetOrigin())
    before, after = sitk.GetArrayFromImage(original), sitk.GetArrayFromImage(written)

    largest = sitk.GetArrayFromImage(sitk.RelabelComponent(sitk.ConnectedComponent(original == CARTILAGES, True))) == 1
    assert np.array_equal(after == CARTILAGES, largest)
    spleen = sitk.Cast(original == 1, sitk.sitkUInt8)
    distance = sitk.GetArrayFromImage(sitk.SignedMaurerDistanceMap(spleen, insideIsPositive=False,
                                                                   squaredDistance=False, useImageSpacing=True))
    grown = (before == 1) | (distance <= 6 + 1e-4)
    assert np.array_equal(after == 1, grown & (before != LIVER))  # unlocked labels are overwritten, liver is not
    assert np.array_equal(after == LIVER, before == LIVER)  # locked: the grown spleen went around it
    assert np.count_nonzero(after == 1) > np.count_nonzero(before == 1)
    sidecar = json.loads((tmp_path / "cleaned.labels.json").read_text())
    assert sidecar[str(LIVER)]["name"] == "liver" and sidecar[str(LIVER)]["locked"] is True


@pytest.mark.parametrize("operations, message", [
    (["--grow", "5", "-2"], "must not be negative"),
    (["--keep-largest", "no_such_organ"], "no label named 'no_such_organ'"),
    (["--threshold", "200", "100", "3"], "range is empty"),
    (["--lock", "5", "--shrink", "5", "2"], "locked by an earlier --lock"),
    (["--union", "5", "5"], "the same label"),
    (["--keep-largest", "250"], "no label 250"),
])
def test_bad_operations_are_named_before_anything_runs(abdomen_files, tmp_path: Path, capsys, operations, message):
    image_path, labels_path = abdomen_files
    out = tmp_path / "out.nii.gz"
    code = main(["edit", str(image_path), "--labels", str(labels_path), "-o", str(out),
                 "--keep-largest", "117", *operations])
    assert code == 1
    assert message in capsys.readouterr().err
    assert not out.exists()


def test_threshold_then_islands_from_an_empty_map(abdomen_files, tmp_path: Path):
    image_path, _ = abdomen_files
    out = tmp_path / "bone.nrrd"
    assert main(["edit", str(image_path), "-o", str(out), "--threshold", "250", "3000", "9",
                 "--remove-smaller", "9", "1.0"]) == 0
    hu = sitk.ReadImage(str(image_path))
    mask = sitk.BinaryThreshold(hu, 250, 3000)
    kept = sitk.RelabelComponent(sitk.ConnectedComponent(mask, True), minimumObjectSize=int(np.ceil(1.0 / 0.027)))
    written = read_image(out)
    assert np.array_equal(written.array == 9, sitk.GetArrayFromImage(kept) > 0)
