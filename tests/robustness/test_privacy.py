"""ONNX Runtime writes no telemetry (device id, OS, CPU, Python path) to the user's cache when
medseg imports it: in the CLI, in the frozen app's launcher, and in a notebook that imports
medseg. Each runs with an empty HOME and the cache is searched afterwards."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

RUNS = {
    "cli": [sys.executable, "-m", "medseg", "devices"],
    "launcher": [sys.executable, str(REPO / "installers" / "launcher.py"), "devices"],
    "library": [sys.executable, "-c", "import medseg.model.backends, onnxruntime; print(onnxruntime.__version__)"],
}


def _users_environment(home: Path) -> dict[str, str]:
    """This environment as a user's machine has it, with an empty HOME. ONNX Runtime writes no
    telemetry where CI is set (as on a CI machine), which would make both checks vacuous."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ORT_", "XDG_CACHE")) and k != "CI"}
    env["HOME"] = str(home)
    return env


@pytest.mark.parametrize("entry", list(RUNS))
def test_no_onnxruntime_telemetry_is_written(tmp_path: Path, entry: str) -> None:
    env = _users_environment(tmp_path)
    run = subprocess.run(RUNS[entry], capture_output=True, text=True, env=env, timeout=300, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    written = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*") if p.is_file())
    assert not [p for p in written if "onnxruntime" in p or "Microsoft" in p], written


def test_onnxruntime_would_write_it_without_the_setting(tmp_path: Path) -> None:
    """The check above can fail: bare ONNX Runtime does write the database in this HOME."""
    env = _users_environment(tmp_path)
    subprocess.run([sys.executable, "-c", "import onnxruntime"], check=True, env=env, timeout=300, cwd=tmp_path)
    assert any(p.name == "onnxruntime.db" for p in tmp_path.rglob("*"))
