"""DistributedDataParallel on the CPU: 2 gloo processes under torchrun == 1 process, same global batch and seed."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from medseg.model.train import CHECKPOINT_LAST, HISTORY_FILE, load_checkpoint

TINY_TRAINING = [
    "--configuration", "2d", "--target-spacing", "3", "6", "6", "--memory-gb", "0.02",
    "--base-features", "4", "--max-features", "8", "--stages", "3",
    "--epochs", "2", "--iterations", "3", "--batch-size", "4", "--seed", "5", "--device", "cpu", "--threads", "1",
]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture()
def tiny_manifest(ct_dir: Path, tmp_path: Path) -> Path:
    manifest = tmp_path / "tiny.json"
    manifest.write_text(json.dumps({
        "name": "ddp", "data_root": str(ct_dir / "totalsegmentator"), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label_rule": "starter"}]}))
    return manifest


def _run(command: list[str], env_extra: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
    env.update(env_extra or {})
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def test_two_gloo_processes_match_one_process(tiny_manifest: Path, tmp_path: Path) -> None:
    single = _run([sys.executable, "-m", "medseg", "train", str(tiny_manifest), "--out", str(tmp_path / "one"),
                   *TINY_TRAINING])
    torchrun = Path(sys.executable).with_name("torchrun")
    double = _run([str(torchrun), "--nproc_per_node", "2", "--master_addr", "127.0.0.1",
                   "--master_port", str(_free_port()), "-m", "medseg", "train", str(tiny_manifest),
                   "--out", str(tmp_path / "two"), *TINY_TRAINING], {"OMP_NUM_THREADS": "1"})
    assert "over 2 process(es)" in double.stdout and "over 1 process(es)" in single.stdout
    assert double.stdout.count("model package written") == 1  # rank 0 alone writes and prints

    curve_one = [loss for epoch in json.loads((tmp_path / "one.training" / HISTORY_FILE).read_text())
                 for loss in epoch["iteration_losses"]]
    curve_two = [loss for epoch in json.loads((tmp_path / "two.training" / HISTORY_FILE).read_text())
                 for loss in epoch["iteration_losses"]]
    assert len(curve_one) == len(curve_two) == 6
    np.testing.assert_allclose(curve_two, curve_one, rtol=1e-4)
    assert curve_one[-1] < curve_one[0]  # it did train

    weights_one, _, _ = load_checkpoint(tmp_path / "one.training" / CHECKPOINT_LAST)
    weights_two, _, _ = load_checkpoint(tmp_path / "two.training" / CHECKPOINT_LAST)
    assert weights_one.keys() == weights_two.keys()
    for key in weights_one:
        torch.testing.assert_close(weights_two[key], weights_one[key], rtol=1e-4, atol=1e-5, msg=key)
