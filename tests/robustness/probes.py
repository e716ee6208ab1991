"""Helpers for the robustness probes: run ``medseg`` in a child process under a memory limit,
optionally inside a private user + mount namespace (``unshare -rm``) where a tiny tmpfs stands
for a full disk. A regression then fails its test instead of taking the CI machine down."""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

# Address space, which bounds resident memory from above. medseg's CLI with torch imported
# maps about 1 GB (libraries, thread stacks); the probes' inputs need far less than this.
DEFAULT_MEMORY_LIMIT = 3 << 30


def limited(memory_bytes: int | None, file_bytes: int | None = None):
    """A preexec_fn setting RLIMIT_AS (and RLIMIT_FSIZE) in the child only."""
    def apply() -> None:
        if memory_bytes is not None:
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))
        if file_bytes is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_bytes, file_bytes))
    return apply


def in_namespace(script: str) -> list[str]:
    """A command prefix: run ``script`` (mounts) as root of a private namespace, then the command."""
    return ["unshare", "-rm", "sh", "-euc", script + ' && exec "$@"', "sh"]


def run_medseg(*args: str | Path, prefix: list[str] | None = None, memory_bytes: int | None = DEFAULT_MEMORY_LIMIT,
               timeout: float = 300, env: dict[str, str] | None = None, cwd: Path | None = None,
               stdin: str | None = None) -> subprocess.CompletedProcess:
    command = [*(prefix or []), sys.executable, "-m", "medseg", *(str(a) for a in args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env, cwd=cwd,
                          preexec_fn=limited(memory_bytes), input=stdin)


def rewrite_series(source: Path, target: Path, crop: int | None = None, **changes) -> Path:
    """Copy a DICOM series, setting header elements (``Modality="MR"``, ``PixelSpacing=[0, 0]``)
    and optionally keeping only the central ``crop`` x ``crop`` pixels (fewer tiles to segment)."""
    import numpy as np
    import pydicom

    target.mkdir(parents=True, exist_ok=True)
    for path in sorted(source.iterdir()):
        dataset = pydicom.dcmread(path)
        for keyword, value in changes.items():
            setattr(dataset, keyword, value)
        if crop is not None:
            rows, columns = dataset.Rows, dataset.Columns
            top, left = (rows - crop) // 2, (columns - crop) // 2
            centre = np.ascontiguousarray(dataset.pixel_array[top:top + crop, left:left + crop])
            dataset.PixelData, dataset.Rows, dataset.Columns = centre.tobytes(), crop, crop
        dataset.save_as(target / path.name)
    return target


def json_event(run: subprocess.CompletedProcess, name: str = "done") -> dict:
    """The first event called ``name`` of a ``--json`` event stream."""
    import json

    assert run.returncode == 0, run.stderr[-3000:]
    events = [json.loads(line) for line in run.stdout.splitlines() if line.startswith("{")]
    return next(e for e in events if e.get("event") == name)
