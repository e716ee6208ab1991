"""``medseg train|export --json``: the event stream (one JSON object per line) a script or the GUI follows."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime
import pytest

from medseg.cli import main
from medseg.model.package import load_package

TS = "totalsegmentator"
TINY = ["--configuration", "2d", "--target-spacing", "3", "6", "6", "--memory-gb", "0.02", "--base-features", "4",
        "--max-features", "8", "--stages", "3", "--epochs", "2", "--iterations", "3", "--batch-size", "4",
        "--seed", "5", "--device", "cpu", "--threads", "1"]


@pytest.fixture(scope="module")
def manifest(ct_dir: Path, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("events") / "tiny.json"
    path.write_text(json.dumps({
        "name": "events", "data_root": str(ct_dir), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": f"{TS}/example_ct_sm.nii.gz", "label_rule": "starter"},
                  {"name": "ct3", "image": "dcmqi_ct3slice_masks/image", "label_rule": "starter"}],
        "validation": ["ct3"]}))
    return path


def _stream(capsys) -> list[dict]:
    return [json.loads(line) for line in capsys.readouterr().out.splitlines()]


@pytest.fixture(scope="module")
def trained(manifest: Path, tmp_path_factory):
    out = tmp_path_factory.mktemp("model") / "tiny"
    capture = pytest.MonkeyPatch()
    import io
    import sys

    buffer = io.StringIO()
    capture.setattr(sys, "stdout", buffer)
    try:
        code = main(["train", str(manifest), "--out", str(out), *TINY, "--json"])
    finally:
        capture.undo()
    return code, out, [json.loads(line) for line in buffer.getvalue().splitlines()]


def test_train_json_is_a_full_event_stream(trained) -> None:
    code, out, events = trained
    assert code == 0
    kinds = [e["event"] for e in events]
    assert kinds[-1] == "done" and "failed" not in kinds
    started = next(e for e in events if e["event"] == "started")
    assert started["total_steps"] == 6 and started["world_size"] == 1 and started["device"] == "cpu"
    iterations = [e for e in events if e["event"] == "iteration"]
    assert [e["step"] for e in iterations] == list(range(6))  # every optimiser step, in order
    assert all(e["loss"] > 0 and e["learning_rate"] > 0 for e in iterations)
    assert iterations[-1]["learning_rate"] < iterations[0]["learning_rate"]  # poly decay
    epochs = [e for e in events if e["event"] == "epoch"]
    assert [e["epoch"] for e in epochs] == [0, 1]
    for epoch in epochs:  # validated every epoch on the held-out case: per-label Dice and a loss
        assert set(epoch["validation_dice"]) == {"body", "lungs", "bones"}
        assert epoch["validation_loss"] > 0
    checkpoints = [e for e in events if e["event"] == "checkpoint"]
    assert sum(not c["best"] for c in checkpoints) == 2 and all(Path(c["path"]).is_file() for c in checkpoints)
    done = events[-1]
    assert Path(done["package"]) == out
    assert load_package(done["package"]).names == {0: "background", 1: "body", 2: "lungs", 3: "bones"}
    # the CPU was chosen explicitly: no fallback; the fallback is reported when 'auto' finds no GPU
    assert not [e for e in events if e["event"] == "fallback" and "GPU" in e["text"]]


def test_a_failure_is_the_last_event(tmp_path: Path, capsys) -> None:
    missing = tmp_path / "nothing-here"
    assert main(["train", str(missing), "--out", str(tmp_path / "m"), *TINY, "--json"]) == 1
    events = _stream(capsys)
    assert events[-1]["event"] == "failed" and not events[-1]["cancelled"]
    # the file in its own field (a script reads it there), the problem in words without it
    assert events[-1]["path"] == str(missing) and events[-1]["error"] == "dataset not found"


def test_export_json_reports_parity_and_the_file_runs_in_onnx_runtime(trained, ct_dir: Path, tmp_path: Path,
                                                                        capsys) -> None:
    _, model, _ = trained
    out = tmp_path / "tiny.onnx"
    image = ct_dir / "dcmqi_ct3slice_masks" / "image"
    assert main(["export", str(model), "--format", "onnx", "-o", str(out), "--check-image", str(image), "--json"]) == 0
    events = _stream(capsys)
    (parity,) = [e for e in events if e["event"] == "parity"]
    assert parity["passed"] and parity["agreement"] >= 0.9999 and parity["runtime"] == "onnxruntime-cpu"
    assert events[-1] == {"event": "done", "path": str(out), "format": "onnx", "parity": [parity["text"]],
                          "checked": True}
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    plan = load_package(model).configurations["2d"]
    tiles = np.random.default_rng(0).normal(size=(2, 1, *plan.patch_size)).astype(np.float32)
    (logits,) = session.run(None, {"image": tiles})
    assert logits.shape == (2, 4, *plan.patch_size)
