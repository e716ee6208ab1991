"""Each TotalSegmentator CT task run by medseg against TotalSegmentator 2.18.0 itself, same weights, real CT.

The weights are in TotalSegmentator's exact layout for each task (ts_fixture: folder names, trainers, nnU-Net
configurations, plans spacing, folds and class maps read from TotalSegmentator's own tables), small and
random, except the crop models: those are trained (tests/model/make_ts_crop_weights.py) to mark their
structures inside a small cube only, so that each crop task really crops and a test that ignored the crop
would fail. Each task runs on a real CT holding its crop structure (ts_fixture.TASK_IMAGE); tasks without a
crop on a small piece of TotalSegmentator's example abdomen (the five-fold 0.8 mm ones on a smaller piece).
TotalSegmentator runs every task in one process of its own (ts_peer). Acceptance (issue 49): labels equal on
>= 99.9 % of voxels, Dice >= 0.99 for every structure with >= 1000 voxels in either output, TotalSegmentator's
names and numbers.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import SimpleITK as sitk
import torch
from totalsegmentator.map_to_binary import class_map
from ts_fixture import CROP_IMAGES, TASK_IMAGE, crop_networks, crop_weights, make_oracle_weights, read_ct, task_networks
from ts_peer import assert_agrees, read_multilabel, run_totalsegmentator_tasks

from medseg.core.volume import Volume
from medseg.model.totalseg import import_totalsegmentator_task, load_totalseg_model, segment_totalseg

torch.set_num_threads(2)

# The module's fixture runs TotalSegmentator on every task before the first test, and pytest-timeout counts it in
# that test's time: the project's 900 s is too short for it on a loaded machine (it reached 900 s at load 3-14).
pytestmark = pytest.mark.timeout(1800)

# The CT tasks checked so far (ts_fixture.CT_TASKS has all 41): the five 1.5 mm parts merged; one network, no
# crop; crops by the 6 mm model (liver, brain on a tilted head CT); a crop by the body model; five folds;
# auxiliary labels removed; no resample (nnU-Net's own resampling).
# The others say why not in the catalogue (`medseg models list` prints it): the tests' crop networks do not mark
# their crop structures yet (the lungs, the clavicles; the 3 mm model marks the heart over the whole chest), or
# their sub-millimetre runs of a crop take too long for every test run.
TASKS = ["total", "breasts", "liver_segments", "abdominal_muscles", "aorta_annulus", "kidney_cysts", "cerebral_bleed",
         "liver_vessels", "trunk_cavities", "renal_arteries",
         # no crop: one network each; total_v3's five parts merged; body's and vertebrae_pp's clean-ups at
         # network resolution; vertebrae_pp_refined's refinement with the vertebrae_body network; five folds
         "total_v3", "body", "vertebrae_body", "vertebrae_pp", "vertebrae_pp_refined", "appendicular_bones",
         "tissue_types", "tissue_4_types", "face", "thigh_shoulder_muscles", "aortic_dissection",
         "pulmonary_artery_landmarks",
         # sub-millimetre runs of the skull's crop on the tilted head CT (0.75 x 0.75 x 1 mm, 0.47 x 0.47 x 0.85 mm,
         # 0.5 mm): the trained 6 mm crop network marks a small piece of skull, so the crop is ~45 mm a side
         "head_glands_cavities", "head_muscles", "oculomotor_muscles", "craniofacial_structures",
         # sub-millimetre runs on a small piece holding the crop structure (ts_fixture.CROP_IMAGES): lung_vessels
         # (0.7 mm, the 3 mm crop network), liver_lesions (0.75 mm), hip_implant (nnU-Net's own resampling)
         "lung_vessels", "liver_lesions", "hip_implant"]

CATALOGUE = Path(__file__).parents[2] / "resources" / "models" / "catalogue.json"


def default_configuration(task: str) -> str:
    """The configuration the catalogue runs by default: the one TotalSegmentator runs without --fast."""
    entry = next(m for m in json.loads(CATALOGUE.read_text())["models"] if m["id"] == f"totalsegmentator/{task}")
    return next(c["name"] for c in entry["configurations"] if c["mode"] == "default")


def crops(task: str) -> bool:
    return bool(crop_networks(task))


def least_labels(task: str) -> int:
    """How many values (background included) TotalSegmentator's output must hold for agreement to mean something.
    A random network marks many of its classes; a task whose network is one of the trained crop networks
    (craniofacial_structures: 115, trained to mark teeth_lower in a small cube) marks that one structure."""
    if any(crop_weights(network.dataset_id) is not None for network in task_networks(task)):
        return 2
    return min(len(class_map[task]) + 1, 3)


@pytest.fixture(scope="module")
def peer(tmp_path_factory, ct_dir):
    """Every task's weights, its image, and TotalSegmentator's output of it (all tasks in one peer process)."""
    root = tmp_path_factory.mktemp("totalseg_tasks")
    weights = make_oracle_weights(root / "weights", TASKS)
    images = {}
    for key in {TASK_IMAGE.get(task, "small") for task in TASKS}:
        images[key] = root / f"{key}.nii.gz"
        sitk.WriteImage(read_ct(ct_dir, CROP_IMAGES[key]), str(images[key]))
    jobs = [(images[TASK_IMAGE.get(task, "small")], root / f"ts_{task}.nii.gz", task) for task in TASKS]
    errors = run_totalsegmentator_tasks(jobs, weights, root / "home")
    return {"root": root, "weights": weights, "images": images, "outputs": {task: out for _, out, task in jobs},
            "errors": {task: errors[out] for _, out, task in jobs}}


@pytest.mark.parametrize("task", TASKS)
def test_task_agrees_with_totalsegmentator(peer, task, tmp_path):
    assert peer["errors"][task] is None, f"TotalSegmentator failed on {task}:\n{peer['errors'][task]}"
    theirs, names = read_multilabel(peer["outputs"][task])
    assert names == class_map[task]  # TotalSegmentator's own class map is what it wrote
    image = peer["images"][TASK_IMAGE.get(task, "small")]
    volume = Volume.from_sitk(sitk.ReadImage(str(image)))
    model = load_totalseg_model(import_totalsegmentator_task(peer["weights"], tmp_path / "model", task=task))
    assert {value: model.labels[value] for value in names} == names  # the same numbers for the same names
    result, run = segment_totalseg(volume, model, default_configuration(task), device="cpu")
    ours = result.label_map.array
    assert {v: result.label_map.meta.labels[v].name for v in np.unique(ours) if v} == \
        {v: names[v] for v in np.unique(ours) if v}
    assert_agrees(ours, theirs, min_classes=least_labels(task))
    if crops(task):
        # the crop model marks a small cube: the crop is a real one, and nothing is labelled outside it
        box = tuple(run.crop_xyz[::-1])  # (z, y, x) of the stored array
        assert run.crop_xyz is not None
        sizes = [s.indices(n)[1] - s.indices(n)[0] for s, n in zip(box, ours.shape)]
        assert np.prod(sizes) < 0.5 * ours.size, f"crop {sizes} of {ours.shape} is no real crop"
        inside = np.zeros(ours.shape, bool)
        inside[box] = True
        assert not theirs[~inside].any() and not ours[~inside].any()
        assert theirs[inside].any()


def test_the_catalogue_claims_exact_for_the_tasks_checked_here():
    """`medseg models list` says `exact` for a TotalSegmentator task only where this file compares it with
    TotalSegmentator itself; every other CT task of the table says it runs the pipeline unchecked."""
    from medseg.catalogue import load_catalogue
    from medseg.model.totalseg.tasks import load_task_table

    entries = {e.task: e.support for e in load_catalogue() if e.kind == "totalsegmentator"}
    assert {task for task, support in entries.items() if support == "exact"} == set(TASKS)
    assert {task for task, support in entries.items() if support == "pipeline"} == set(load_task_table()) - set(TASKS)


def test_models_list_says_why_a_task_is_not_exact(capsys, monkeypatch, tmp_path):
    """Each CT task not compared here carries its reason in the catalogue (data), and `medseg models list`
    prints it under the task's row."""
    from medseg.cli import main

    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    assert main(["models", "list"]) == 0
    lines = capsys.readouterr().out.splitlines()
    for task in ("lung_nodules", "heartchambers_highres", "coronary_arteries"):
        row = next(i for i, line in enumerate(lines) if line.startswith(f"totalsegmentator/{task} "))
        assert "runs: pipeline" in lines[row] and "not exact yet: " in lines[row + 1]
    row = next(i for i, line in enumerate(lines) if line.startswith("totalsegmentator/vertebrae_pp "))
    assert "runs: exact" in lines[row] and lines[row + 1].startswith("totalsegmentator/")
