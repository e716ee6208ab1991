"""Two TotalSegmentator tasks that the same crop model crops, in one run: the crop network runs once.

liver_vessels (around the liver) and kidney_cysts (around kidneys, liver, spleen, colon) are both cropped by what
TotalSegmentator's 6 mm ``total`` network (dataset 298) finds: one run of it serves both crops.
Each task is installed on its own, with its own copy of that network
(as ``medseg models install`` does), so the run can only share the crop by what it is (the same
weights, steps and device), not by the folder. The crop network is the trained one of
tests/model/data/ts_crop_weights.npz, which marks a compact liver on this CT, so the crop really
crops. The oracle: each task run on its own (a fresh run each, so nothing is shared), merged the same way.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "model"))
from ts_fixture import CROP_IMAGES, make_oracle_weights, read_ct

from medseg.core.volume import Volume
from medseg.model.totalseg import import_totalsegmentator_task
from medseg.model.totalseg.convert import PartRef
from medseg.workflows.models import open_model
from medseg.workflows.segment import Segmenter, SegmentSettings
from medseg.workflows.segment_many import merge_results, segment_with_models

TASKS = ("liver_vessels", "kidney_cysts")  # cheap ones (little or no resampling) of the 298-cropped
CROP_NETWORK = 298  # TotalSegmentator's 6 mm total network: what crops both (its task table)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    root = tmp_path_factory.mktemp("two-liver-tasks")
    weights = make_oracle_weights(root / "weights", TASKS)
    return {task: import_totalsegmentator_task(weights, root / task, task=task) for task in TASKS}


@pytest.fixture(scope="module")
def abdomen(ct_dir) -> Volume:
    return Volume.from_sitk(read_ct(ct_dir, CROP_IMAGES["abdomen"]))


def test_the_crop_runs_once_for_two_tasks_and_the_labels_are_the_separate_runs(installed, abdomen, monkeypatch):
    from totalsegmentator.map_tasks_config import TASK_CONFIGS

    # TotalSegmentator's own table: both tasks crop with the 6 mm total network (not robust_crop's 3 mm one)
    assert all(TASK_CONFIGS[t].get("crop") and not TASK_CONFIGS[t].get("robust_crop") for t in TASKS)
    assert all(TASK_CONFIGS[t].get("crop_model", "total") == "total" for t in TASKS)
    assert installed[TASKS[0]] != installed[TASKS[1]]  # two installs, two copies of the crop network
    loaded: list[int | None] = []
    original = PartRef.load
    monkeypatch.setattr(PartRef, "load", lambda self: loaded.append(self.dataset) or original(self))
    settings = SegmentSettings(device="cpu")

    separate = [Segmenter(open_model(installed[t]), settings).segment(abdomen) for t in TASKS]
    assert loaded.count(CROP_NETWORK) == 2  # on their own, each task runs the crop network (as TotalSegmentator)
    assert all(study.details["runs"] == ["total (6mm)"] for study in separate)
    loaded.clear()

    models = [open_model(installed[t]) for t in TASKS]
    combined = segment_with_models(abdomen, models, settings)
    assert loaded.count(CROP_NETWORK) == 1  # one crop run for both tasks
    assert sorted(d for d in loaded if d != CROP_NETWORK) == sorted(
        d for t in TASKS for d in _own_networks(t))  # and each task's own networks, once each

    first, second = combined.studies
    assert first.details["runs"] == ["total (6mm)"]
    assert second.details["runs"] == ["total (6mm), made once for this run's tasks"]  # said where it shows
    for mine, alone in zip(combined.studies, separate):
        assert np.array_equal(mine.label_map.array, alone.label_map.array), mine.model.name
    expected = merge_results(abdomen, separate)
    assert np.array_equal(combined.label_map.array, expected.label_map.array)
    assert combined.labels == expected.labels
    found = {label.provenance.algorithm_name for label in combined.labels.values()}
    assert found == {f"totalsegmentator/{t}" for t in TASKS}  # both tasks found something: the check means something
    # the crops cropped: each task's labels lie in a box well inside the image (the random task networks label
    # everywhere they run; a crop model that marked the whole image would give boxes as large as the image)
    for study in separate:
        found = np.nonzero(study.label_map.array)
        extent = [int(axis.max() - axis.min() + 1) for axis in found]
        assert any(e < 0.8 * n for e, n in zip(extent, abdomen.shape_zyx)), (study.model.name, extent)


def _own_networks(task: str) -> list[int]:
    from totalsegmentator.map_tasks_config import TASK_CONFIGS

    ids = TASK_CONFIGS[task]["task_id"]
    return [int(i) for i in (ids if isinstance(ids, list) else [ids])]
