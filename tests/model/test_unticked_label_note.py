"""Issue 52 (12): a named label left out of a training run (unticked) is said to be left out, not "label values
[5] have no name". Real data: TotalSegmentator's example abdomen and its spleen and liver."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from medseg.io import read_image
from medseg.model.training_set import TrainingSet

TS = "totalsegmentator"


def test_an_unticked_named_label_is_left_out_not_unnamed(ct_dir: Path, tmp_path: Path) -> None:
    image = read_image(ct_dir / TS / "example_ct_sm.nii.gz")
    raw = read_image(ct_dir / TS / "example_seg.nii.gz")  # TotalSegmentator's values: 1 spleen, 5 liver
    label_map = image.with_array(np.where(np.isin(raw.array, (1, 5)), raw.array, 0).astype(np.uint8))
    training = TrainingSet(tmp_path / "set")
    training.add_editor_case(image, label_map, {1: "spleen", 5: "liver"}, {1: (150, 90, 90), 5: (200, 70, 60)})
    dataset = training.dataset(["spleen"])  # liver unticked
    (spec,) = dataset.specs
    case = dataset.load(spec)
    assert not any("no name" in note for note in case.notes)
    assert any("liver (5) not chosen for training: treated as background" in note for note in case.notes), case.notes
    spleen = {name: value for value, name in dataset.labels.items()}["spleen"]
    assert set(np.unique(case.label_map.array)) == {0, spleen}  # the liver is background
    assert np.count_nonzero(case.label_map.array == spleen) == np.count_nonzero(raw.array == 1)
