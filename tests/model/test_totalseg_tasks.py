"""The TotalSegmentator task table medseg runs from (resources/models/totalseg_tasks.json) against
TotalSegmentator 2.18.0's own tables (the installed test peer), and against medseg's catalogue."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from medseg.catalogue.entries import load_catalogue
from medseg.model.totalseg.tasks import load_task_table, task_spec

ROOT = Path(__file__).resolve().parents[2]
GENERATOR = ROOT / "resources" / "models" / "generate_totalseg_tasks.py"


def _generator():
    spec = importlib.util.spec_from_file_location("generate_totalseg_tasks", GENERATOR)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_shipped_table_is_what_totalsegmentator_says():
    generator = _generator()
    shipped = (ROOT / "resources" / "models" / "totalseg_tasks.json").read_text(encoding="utf-8")
    assert shipped == generator.render(generator.generate()), \
        "resources/models/totalseg_tasks.json is stale: run resources/models/generate_totalseg_tasks.py"


def test_the_table_covers_exactly_the_catalogues_totalsegmentator_ct_tasks():
    from totalsegmentator.map_tasks_config import TASK_CONFIGS

    table = load_task_table()
    independent = {name for name in TASK_CONFIGS
                   if not name.endswith("_mr") and name not in {"vertebrae_mr", "brain_aneurysm", "test",
                                                               "total_highres_test"}}
    catalogue = {entry.task: entry for entry in load_catalogue() if entry.id.startswith("totalsegmentator/")}
    assert set(table) == independent == set(catalogue)
    for task, entry in catalogue.items():
        spec_modes = {mode.configuration: [n.dataset for n in mode.networks] for mode in task_spec(task).modes.values()}
        assert spec_modes == {c.name: list(c.datasets) for c in entry.configurations}, task
        assert task_spec(task).labels == {s.value: s.name for s in entry.structures}, task


def test_the_facts_the_pipeline_depends_on():
    """Spot checks written from TotalSegmentator 2.18.0's python_api.py and map_tasks_config.py by hand."""
    total = task_spec("total")
    assert [n.dataset for n in total.modes["default"].networks] == [291, 292, 293, 294, 295]
    assert total.modes["default"].networks[1].classes[1] == "sacrum" and total.modes["fast"].step == 0.8
    lung = task_spec("lung_vessels").modes["default"]
    # robust_crop: the 3 mm total network; crop_addon forced to 20 mm since no crop_model is named
    assert (lung.crop.task, lung.crop.mode, lung.crop.addon_mm, lung.step) == ("total", "fast", (20, 20, 20), 0.5)
    assert lung.resample == (0.703125, 0.703125, 1.0)
    effusion = task_spec("pleural_pericard_effusion").modes["default"]
    assert effusion.folds is None and effusion.resample is None and effusion.crop.addon_mm == (20, 20, 20)
    teeth = task_spec("teeth").modes["default"]
    assert (teeth.crop.task, teeth.crop.addon_mm, teeth.nnunet_configuration) == (
        "craniofacial_structures", (10, 10, 10), "3d_lowres_high")
    assert task_spec("abdominal_muscles").modes["default"].crop.task == "body"
    heart = task_spec("heartchambers_highres")
    assert heart.commercial and heart.modes["default"].remove_outside.dilation_mm == 10
    muscles = task_spec("headneck_muscles").modes["default"]
    assert [n.dataset for n in muscles.networks] == [778, 779] and all(n.classes for n in muscles.networks)
    assert task_spec("appendicular_bones").auxiliary_labels == {12: "humerus", 13: "femur", 14: "liver", 15: "spleen"}
    assert task_spec("vertebrae_pp_refined").refine.task == "vertebrae_body"
    assert task_spec("aorta_annulus").modes["default"].folds == (0, 1, 2, 3, 4)


def test_fast_and_fastest_pick_the_modes_totalsegmentator_picks():
    from medseg.errors import ModelError

    total, body = task_spec("total"), task_spec("body")
    assert [total.configuration_for(), total.configuration_for(fast=True), total.configuration_for(fastest=True)] == [
        "1.5mm", "3mm", "6mm"]
    assert body.configuration_for(fastest=True) == "6mm" == body.configuration_for(fast=True)  # its fast mode
    assert task_spec("liver_segments").configuration_for() == "default"
    with pytest.raises(ModelError, match="liver_segments has no --fast mode"):
        task_spec("liver_segments").configuration_for(fast=True)


def test_an_unknown_task_is_refused_by_name():
    from medseg.errors import ModelError

    with pytest.raises(ModelError, match="'livr_segments'.*not one of TotalSegmentator"):
        task_spec("livr_segments")


def test_the_table_file_is_plain_json_with_its_format():
    document = json.loads((ROOT / "resources" / "models" / "totalseg_tasks.json").read_text(encoding="utf-8"))
    assert document["format"] == "medseg-totalsegmentator-tasks" and document["totalsegmentator_version"] == "2.18.0"
