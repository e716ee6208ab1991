"""Issue #51: ``medseg batch`` loads a model's networks once for all its studies (TotalSegmentator's users asked
for it: its issues #523, #581). Counted where the weights are read and the networks built, on real CT crops with
a TotalSegmentator --fast model (its exact layout, small random weights: tests/model/ts_fixture.py) and with
the built-in starter; the labels of every study are those of a study segmented on its own (the oracle: the one
segment use case, which loads everything afresh)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from infer_fixtures import ct_crop
from ts_fixture import make_totalseg_weights

from medseg.cli import main
from medseg.model import infer
from medseg.model.totalseg import convert, import_totalsegmentator_task
from medseg.workflows.segment import SegmentRequest, SegmentSettings, segment_study

# three pieces of TotalSegmentator's example abdomen (3 mm): three studies of a batch
CROPS = {f"study{i}": ("totalsegmentator/example_ct_sm.nii.gz", (slice(4 + 4 * i, 20 + 4 * i), slice(30, 54),
                                                                  slice(30, 62))) for i in range(3)}


@pytest.fixture
def archive(ct_dir: Path, tmp_path: Path) -> Path:
    root = tmp_path / "archive"
    root.mkdir()
    for name, crop in CROPS.items():
        sitk.WriteImage(ct_crop(ct_dir, crop), str(root / f"{name}.nii.gz"))
    return root


@pytest.fixture
def counted(monkeypatch) -> dict[str, int]:
    """How often a TotalSegmentator part's weights are read and a package's engine is built."""
    counts = {"part loads": 0, "engines built": 0}
    load, make_runner = convert.PartRef.load, infer._make_runner

    def counting_load(self):
        counts["part loads"] += 1
        return load(self)

    def counting_runner(*args, **kwargs):
        counts["engines built"] += 1
        return make_runner(*args, **kwargs)

    monkeypatch.setattr(convert.PartRef, "load", counting_load)
    monkeypatch.setattr(infer, "_make_runner", counting_runner)
    return counts


def _labels(out: Path, study: str) -> np.ndarray:
    (path,) = out.glob(f"*{study}.nii.gz")  # the case id is the study's path under the archive
    return sitk.GetArrayFromImage(sitk.ReadImage(str(path)))


def test_a_batch_of_three_studies_reads_totalsegmentators_weights_once(archive, tmp_path, counted):
    model = import_totalsegmentator_task(make_totalseg_weights(tmp_path / "weights", [297]), tmp_path / "model")
    out = tmp_path / "out"
    assert main(["batch", str(archive), "-o", str(out), "--model", str(model), "--threads", "1"]) == 0
    assert counted["part loads"] == 1  # one network (--fast), three studies
    for name in CROPS:  # each study's labels: a study segmented on its own (its weights read again)
        alone = segment_study(SegmentRequest(archive / f"{name}.nii.gz", str(model),
                                             SegmentSettings(configuration="3mm")))
        assert (_labels(out, name) == alone.label_map.array).all(), name
    assert counted["part loads"] == 1 + len(CROPS)


def test_a_batch_builds_the_starters_engine_once(archive, tmp_path, counted):
    out = tmp_path / "out"
    assert main(["batch", str(archive), "-o", str(out), "--threads", "1"]) == 0
    assert counted["engines built"] == 1  # the 2D network, once for the three studies
    for name in CROPS:
        alone = segment_study(SegmentRequest(archive / f"{name}.nii.gz"))
        assert (_labels(out, name) == alone.label_map.array).all(), name
    assert counted["engines built"] == 1 + len(CROPS)
