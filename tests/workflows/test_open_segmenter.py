"""The notebook call that keeps one model loaded for many studies (medseg.workflows.segmenter, issue #51): the
example in docs/guide-researcher.md runs as it is, on real CT, writes one result per study whose labels are
those of ``medseg segment``'s use case for that study alone, and builds the model's engine once."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from infer_fixtures import ct_crop

from medseg.errors import ModelError
from medseg.model import infer
from medseg.workflows.segment import SegmentRequest, segment_study
from medseg.workflows.segmenter import open_segmenter

GUIDE = Path(__file__).resolve().parents[2] / "docs" / "guide-researcher.md"


def _example() -> str:
    text = GUIDE.read_text()
    marker = text.index("tests/workflows/test_open_segmenter.py runs this block")
    return re.search(r"```python\n(.*?)```", text[marker:], re.S).group(1)


def test_the_guides_example_segments_each_study_with_one_engine_built(ct_dir, tmp_path, monkeypatch, capsys):
    scans = tmp_path / "scans"
    scans.mkdir()
    sitk.WriteImage(ct_crop(ct_dir, ("totalsegmentator/example_ct_sm.nii.gz",
                                     (slice(6, 22), slice(20, 70), slice(20, 80)))), str(scans / "abdomen.nii.gz"))
    shutil.copytree(ct_dir / "dcmqi_ct3slice_masks" / "image", scans / "chest_dicom")
    built = []
    make_runner = infer._make_runner
    monkeypatch.setattr(infer, "_make_runner", lambda *a, **k: built.append(a[0]) or make_runner(*a, **k))
    monkeypatch.chdir(tmp_path)
    exec(compile(_example(), str(GUIDE), "exec"), {})
    assert len(built) == 1  # the starter's 2D network, built once for both studies
    printed = capsys.readouterr().out.splitlines()
    assert [line.split()[0] for line in printed] == ["abdomen.nii.gz", "chest_dicom"]
    for study, written in (("abdomen.nii.gz", "abdomen"), ("chest_dicom", "chest_dicom")):
        alone = segment_study(SegmentRequest(scans / study))
        labels = sitk.GetArrayFromImage(sitk.ReadImage(str(tmp_path / "segmentations" / f"{written}.nii.gz")))
        assert np.array_equal(labels, alone.label_map.array), study


def test_fast_needs_a_model_with_a_fast_configuration():
    with pytest.raises(ModelError, match="has no fast configuration installed"):
        open_segmenter("starter", fast=True)
