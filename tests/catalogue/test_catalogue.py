"""The shipped catalogue against TotalSegmentator 2.18.0's own task table (the peer, installed by
``make setup`` from .ci/totalsegmentator-peer.txt): every open CT task is listed, with the peer's class
numbers and names, networks, weight folders and releases, resampling and licence flags."""

from __future__ import annotations

import json

import pytest
from totalsegmentator_catalogue import reference, url

from medseg.catalogue.entries import load_catalogue, parse_catalogue
from medseg.errors import ModelError


@pytest.fixture(scope="module")
def expected():
    return reference()


def test_every_open_ct_task_is_listed(expected):
    catalogue = load_catalogue()
    open_tasks = {task for task, facts in expected.items() if not facts["licensed"]}
    assert {"total", "body", "lung_vessels", "liver_segments", "vertebrae_body"} <= open_tasks  # the oracle is whole
    listed = {entry.task for entry in catalogue if entry.id.startswith("totalsegmentator/")}
    assert listed == set(expected)
    assert "medseg/starter" in catalogue and catalogue.get("medseg/starter").builtin == "starter"


def test_classes_networks_and_downloads_match_the_peer(expected):
    catalogue = load_catalogue()
    for task, facts in expected.items():
        entry = catalogue.get(f"totalsegmentator/{task}")
        assert {s.value: s.name for s in entry.structures} == facts["classes"], task
        assert {c.mode: list(c.datasets) for c in entry.configurations} == facts["datasets"], task
        for configuration in entry.configurations:
            spacing = facts["resample_xyz_mm"][configuration.mode]
            assert (list(configuration.spacing_mm) if configuration.spacing_mm else None) == spacing, task
            assert configuration.trainer == facts["trainer"][configuration.mode], task
        files = {f.dataset: f for f in entry.files}
        assert set(files) == set(facts["weights"]), task
        for dataset, weights in facts["weights"].items():
            assert files[dataset].folder == weights["folder"], task
            assert list(files[dataset].urls) == ([url(weights)] if url(weights) else []), task
            assert files[dataset].sha256 is None  # the publisher gives none: install records what it got
        assert entry.licence.acceptance_required == facts["licensed"], task
        assert entry.licence.commercial_use == (not facts["licensed"]), task
        assert entry.licence.spdx == ("Apache-2.0" if not facts["licensed"] else "LicenseRef-TotalSegmentator-Licensed")
        if facts["groups"]:
            assert {s.value: s.group for s in entry.structures} == facts["groups"], task


def test_total_has_117_structures_in_five_groups():
    entry = load_catalogue().get("totalsegmentator/total")
    assert len(entry.structures) == 117
    assert {g: len(s) for g, s in entry.groups().items()} == {"organs": 24, "vertebrae": 26, "cardiac": 18,
                                                               "muscles": 23, "ribs": 26}
    assert [c.name for c in entry.configurations] == ["3mm", "6mm", "1.5mm"]
    assert "10.1148/ryai.230024" in entry.citation


def test_a_damaged_catalogue_is_a_clear_error(tmp_path):
    document = json.loads(load_catalogue().source.read_text())
    document["models"][1]["files"][0]["sha256"] = "not-a-digest"
    bad = tmp_path / "catalogue.json"
    bad.write_text(json.dumps(document))
    with pytest.raises(ModelError, match="SHA-256 that is not 64 hex digits"):
        parse_catalogue(bad)
    document["models"][1]["files"][0]["sha256"] = None
    document["models"][2]["id"] = document["models"][1]["id"]
    bad.write_text(json.dumps(document))
    with pytest.raises(ModelError, match="more than once"):
        parse_catalogue(bad)


def test_cli_lists_and_describes_the_catalogue(capsys, monkeypatch, tmp_path):
    from medseg.cli import main

    monkeypatch.setenv("MEDSEG_MODELS", str(tmp_path / "models"))
    monkeypatch.setenv("MEDSEG_SYSTEM_MODELS", "")
    assert main(["models", "list", "--json"]) == 0
    rows = {row["id"]: row for row in json.loads(capsys.readouterr().out)}
    assert rows["medseg/starter"]["state"] == "built in"
    total = rows["totalsegmentator/total"]
    assert (total["state"], total["structures"], total["checksum"]) == ("not installed", 117, "no published checksum")
    licensed = rows["totalsegmentator/heartchambers_highres"]
    assert licensed["acceptance_required"] and licensed["commercial_use"] is False
    assert main(["models", "info", "totalsegmentator/heartchambers_highres"]) == 0
    text = capsys.readouterr().out
    assert "must be accepted before installing" in text and "license-academic" in text
    assert main(["models", "install", "totalsegmentator/heartchambers_highres", "--accept-licence"]) == 1
    assert "installed only with your TotalSegmentator licence key" in capsys.readouterr().err
