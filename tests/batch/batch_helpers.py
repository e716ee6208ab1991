"""Helpers of the batch tests: real CT copied into archives, the CLI in a child process, its JSON events."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def copy_series(source: Path, target: Path, pattern: str = "*") -> Path:
    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.glob(pattern)):
        if path.is_file() and not path.name.startswith("LICENSE"):
            shutil.copy2(path, target / path.name)
    return target


def truncated_copy(source: Path, target: Path, fraction: float = 0.6) -> Path:
    """A DICOM file cut short in its pixel data, as an interrupted copy leaves it."""
    data = source.read_bytes()
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_bytes(data[: int(len(data) * fraction)])
    return target




def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_cli(*args: str, timeout: float = 900, torchrun: int | None = None,
            env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``medseg ARGS`` in a child process (or under torchrun with that many processes)."""
    launcher = [sys.executable, "-m", "medseg"] if torchrun is None else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(torchrun), "--master_addr",
        "127.0.0.1", "--master_port", str(free_port()), "-m", "medseg"]
    full_env = {k: v for k, v in os.environ.items()
                if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")}
    full_env.update(env or {})
    return subprocess.run([*launcher, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO_ROOT,
                          env=full_env)


def events_of(stdout: str) -> list[dict]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]
