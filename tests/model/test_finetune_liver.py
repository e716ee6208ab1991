"""Fine-tuning the starter model with a new label (liver) and judging it on another patient.

Train: ``resources/datasets/liver_finetune.json``: example_ct_sm with TotalSegmentator's liver
(label 5) over rule-based body/lungs/bones, plus liver-free starter scans as rehearsal.
Judge: example_ct_dicom, a different patient (contrast-enhanced, Siemens), against
example_seg_dicom, which is stored LAS and is resampled onto the DICOM grid first.
This is the issue's whole recipe (``make liver``), run for real on every CI run.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from medseg.cli import main
from medseg.model.package import load_package, starter_model_path

ROOT = Path(__file__).resolve().parents[2]
MANIFEST = ROOT / "resources" / "datasets" / "liver_finetune.json"
# The recipe, the same as the Makefile's LIVER_TRAIN (checked below).
RECIPE = ["--epochs", "20", "--iterations", "40", "--batch-size", "6", "--validate-every", "100",
          "--no-mirror", "--tissue-shift", "-20", "60"]
LIVER_TARGET = 0.7


def test_the_makefile_runs_the_same_recipe() -> None:
    makefile = (ROOT / "Makefile").read_text()
    match = re.search(r"^LIVER_TRAIN := (.+)$", makefile, re.MULTILINE)
    assert match and shlex.split(match.group(1)) == RECIPE


@pytest.mark.slow
@pytest.mark.timeout(1800)  # about 9 minutes on a free 2-core CPU (800 optimiser steps)
def test_starter_learns_the_liver_on_another_patient(ct_dir: Path, tmp_path: Path, capsys) -> None:
    model = tmp_path / "liver_model"
    data_root = str(ct_dir.parent)
    assert main(["train", str(MANIFEST), "--data-root", data_root, "--out", str(model),
                 "--from", str(starter_model_path()), *RECIPE]) == 0
    out = capsys.readouterr().out
    assert "output heads replaced" in out and "liver" in out
    assert "resampled onto the image in patient coordinates (nearest neighbour)" in out  # the LAS label map, said

    assert main(["evaluate", str(model), str(MANIFEST), "--data-root", data_root, "--held-out", "--json",
                 "--record"]) == 0
    report = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert report["event"] == "done"
    (case,) = report["cases"]
    assert case["case"] == "example_ct_dicom"
    scores = {label["name"]: label for label in case["labels"]}
    assert set(scores) == {"body", "lungs", "bones", "liver"}
    assert 600 < scores["liver"]["reference_ml"] < 800  # the LAS reference landed on the DICOM grid
    assert scores["liver"]["dice"] >= LIVER_TARGET, scores["liver"]
    assert scores["bones"]["dice"] > 0.7  # fine-tuning kept what the starter knew

    package = load_package(model)  # the package says where it came from and how it scored
    assert package.configurations["2d"].orientation == "LPS"  # RAS training scan, LPS judged scan: one orientation
    assert package.provenance["base_model"] == load_package(starter_model_path()).name
    assert package.provenance["training_command"].startswith("medseg train ")
    (recorded,) = package.provenance["evaluations"]
    assert recorded["cases"]["example_ct_dicom"]["liver"]["dice"] == round(scores["liver"]["dice"], 4)
