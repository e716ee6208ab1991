"""The Train tab's "De-identify" option: cases added to the training set get pseudonymous names."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from medseg.core.labels import Label
from medseg.gui.train.dataset_panel import DatasetPanel
from medseg.io import load


def test_added_case_gets_a_pseudonym(qtbot, ct_dir: Path, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("MEDSEG_CONFIG_DIR", str(tmp_path / "config"))
    image = load(ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series")  # "STD BRAIN 5MM", patient "HEAD"
    labels = image.with_array((np.asarray(image.array) > 300).astype(np.uint8))
    case = (image, labels, {1: Label(1, "bone", (255, 255, 0))}, image.meta.series_description)
    panel = DatasetPanel(tmp_path / "workspace", lambda: case)
    qtbot.addWidget(panel)
    try:
        _add_three(panel, image, tmp_path)
    finally:
        panel.shutdown()  # the case inspection runs in a worker


def _add_three(panel: DatasetPanel, image, tmp_path: Path) -> None:
    panel.add_current_case()
    panel.deidentify_box.setChecked(True)
    panel.add_current_case()
    panel.add_current_case()  # the same series again: the same pseudonym (made unique by the set)
    names = [entry.spec.name for entry in panel.training_set.entries]
    assert names[0] == "STD_BRAIN_5MM"
    assert names[1].startswith("case-") and names[2].startswith(names[1]) and names[2] != names[1]
    folder = tmp_path / "workspace" / "cases" / names[1]
    written = b"".join(p.read_bytes() for p in folder.iterdir() if p.suffix == ".json")
    assert json.loads((folder / "case.json").read_text())["name"] == names[1]
    for identifying in (b"BRAIN", b"HEAD", b"PLASTIC", image.meta.series_uid.encode()):
        assert identifying not in written
