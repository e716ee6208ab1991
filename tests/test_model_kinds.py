"""Model kinds are plug-ins: nothing above ``medseg/model`` asks which kind of model it holds.

The layers above ``model/`` (workflows, catalogue, cli, batch, gui) call the pipeline protocol
(medseg.model.kinds) and its capabilities. A check of a kind — comparing a card's kind, testing for a
TotalSegmentator pipeline, importing a kind's model class to test an instance — would make each new kind
a chain of branches again; this test finds such checks by their shapes.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from medseg.model.kinds import KINDS, kind_named, kind_of, open_path

ROOT = Path(__file__).resolve().parents[1] / "medseg"
ABOVE_MODEL = ("workflows", "catalogue", "cli", "batch", "gui")

KIND_CHECKS = [
    (r"\bcard\.kind\s*[!=]=", "compares a card's kind"),
    (r"\bkind\s*[!=]=\s*(TOTALSEG_MODEL|NNUNET_RESULT|MEDSEG_PACKAGE|INTERACTIVE_MODEL)", "compares a kind title"),
    (r"\b(TOTALSEG_MODEL|NNUNET_RESULT|MEDSEG_PACKAGE|INTERACTIVE_MODEL)\s*[!=]=", "compares a kind title"),
    (r"\.pipeline\s+is\s+(not\s+)?None", "tests whether a model is a pipeline kind"),
    (r"\bis_totalseg_(folder|model|reference)\b", "asks whether a folder is a TotalSegmentator model"),
    (r"\bis_nnunet_result\b", "asks whether a folder is an nnU-Net result"),
    (r"\bis_nninteractive_folder\b", "asks whether a folder is an nnInteractive model"),
    (r"isinstance\([^)]*\b(TotalSegModel|ModelPackage|InteractiveModel|TotalSegPipeline|PackagePipeline)\b",
     "tests a model's class"),
    (r"\bentry\.kind\s*[!=]=", "compares a catalogue entry's kind"),
    (r"\bentry\.task\s*[!=]=", "branches on a catalogue entry's task"),
]


def _sources():
    for room in ABOVE_MODEL:
        yield from sorted((ROOT / room).rglob("*.py"))


def test_no_module_above_model_checks_a_models_kind():
    found = []
    for path in _sources():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            code = line.split("#", 1)[0]
            for pattern, what in KIND_CHECKS:
                if re.search(pattern, code):
                    found.append(f"{path.relative_to(ROOT.parent)}:{number}: {what}: {line.strip()}")
    assert not found, "kind checks above medseg/model (use the pipeline's capabilities):\n" + "\n".join(found)


def test_the_patterns_find_the_checks_they_name(tmp_path):
    """The grep itself can fail: each pattern matches the shape of check it is there to find."""
    samples = ["if model.card.kind == TOTALSEG_MODEL:", "if model.pipeline is not None:",
               "if is_totalseg_folder(path):", "isinstance(model, TotalSegModel)", "if entry.task != 'total':",
               "if entry.kind == 'interactive':", "ok = is_nnunet_result(path)"]
    for sample in samples:
        assert any(re.search(pattern, sample) for pattern, _ in KIND_CHECKS), sample


def test_one_table_of_kinds_with_distinct_ids():
    ids = [kind.id for kind in KINDS]
    assert len(ids) == len(set(ids)) and {"medseg", "nnunet", "totalsegmentator", "nninteractive"} <= set(ids)
    assert kind_named("totalsegmentator").capabilities.structure_subset
    assert kind_named("nninteractive").capabilities.interactive


def test_catalogue_entries_name_kinds_of_the_table():
    from medseg.catalogue import load_catalogue

    kinds = {entry.id: entry.kind for entry in load_catalogue()}
    assert kinds["medseg/starter"] == "medseg" and kinds["nninteractive/v1.0"] == "nninteractive"
    assert kinds["totalsegmentator/total"] == "totalsegmentator"
    assert set(kinds.values()) <= {kind.id for kind in KINDS}


def test_a_folder_of_no_kind_is_refused_naming_what_medseg_looks_for(tmp_path):
    from medseg.errors import ModelError

    (tmp_path / "notes.txt").write_text("not a model")
    assert kind_of(tmp_path) is None
    with pytest.raises(ModelError, match="no model.json .* no plans.json"):
        open_path(tmp_path)


def test_an_interactive_model_opens_and_refuses_to_segment_a_series_in_words(tmp_path):
    from medseg.errors import ModelError
    from medseg.workflows.segment import Segmenter

    folder = tmp_path / "interactive"
    folder.mkdir()
    (folder / "interactive.json").write_text('{"format": "medseg-interactive-model", "name": "nnInteractive v1.0",'
                                             ' "license": "CC BY-NC-SA 4.0"}')
    opened = open_path(folder, "nninteractive/v1.0")
    assert opened.card.name == "nnInteractive v1.0" and opened.capabilities.interactive
    with pytest.raises(ModelError, match="answers prompts"):
        Segmenter(opened)
