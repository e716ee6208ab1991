"""Robustness: every file in shared/data, each truncated at several offsets and with seeded
random byte flips, either loads or raises MedsegError naming the file; never another
exception, never a hang."""

from __future__ import annotations

import random
from concurrent.futures import ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from pathlib import Path

import numpy as np
import pytest

from medseg.errors import MedsegError
from medseg.io import load

SEED = 20261202
PER_INPUT_TIMEOUT_S = 30


def mutations(data: bytes, rng: random.Random) -> list[tuple[str, bytes]]:
    """Two truncations (one inside the header, one inside the pixel data) and two flip patterns."""
    size = len(data)
    header_cut = rng.randrange(1, max(2, min(size, 4096)))
    body_cut = rng.randrange(size // 2, max(size // 2 + 1, size - 1))
    out = [(f"truncated@{header_cut}", data[:header_cut]), (f"truncated@{body_cut}", data[:body_cut])]
    for label, region, count in (("flips-header", min(size, 4096), 8), ("flips-anywhere", size, 64)):
        mutated = bytearray(data)
        for _ in range(count):
            position = rng.randrange(max(1, region))
            if position < size:
                mutated[position] ^= 1 << rng.randrange(8)
        out.append((label, bytes(mutated)))
    return out


def try_load(path: Path) -> str:
    try:
        volume = load(path)
    except MedsegError as error:
        if path.name not in str(error):
            return f"MedsegError does not name the file: {error}"
        return "error"
    if not np.isfinite(volume.array).all() if volume.array.dtype.kind == "f" else False:
        return "loaded with non-finite voxels"
    return "loaded"


@pytest.mark.timeout(600)
def test_every_file_and_its_mutations_load_or_fail_cleanly(ct_dir: Path, tmp_path: Path) -> None:
    rng = random.Random(SEED)
    originals = sorted(p for p in ct_dir.rglob("*") if p.is_file())
    assert len(originals) >= 150
    inputs: list[tuple[str, Path]] = [("original", p) for p in originals]
    for index, source in enumerate(originals):
        data = source.read_bytes()
        for label, mutated in mutations(data, rng):
            target = tmp_path / f"{index:03d}-{label}" / source.name  # keep the name: its suffix picks the reader
            target.parent.mkdir()
            target.write_bytes(mutated)
            inputs.append((label, target))

    outcomes: dict[str, int] = {}
    problems: list[str] = []
    with ThreadPoolExecutor(max_workers=1) as runner:
        for label, path in inputs:
            future = runner.submit(try_load, path)
            try:
                outcome = future.result(timeout=PER_INPUT_TIMEOUT_S)
            except FutureTimeout:
                problems.append(f"{label} {path}: no answer within {PER_INPUT_TIMEOUT_S} s (hang)")
                break  # the worker thread is stuck; report instead of waiting for it
            except Exception as error:  # noqa: BLE001 - the point of the test: anything but MedsegError is a bug
                outcome = f"{type(error).__name__}: {error}"
            if outcome not in ("loaded", "error"):
                problems.append(f"{label} {path}: {outcome}"[:400])
            outcomes[outcome if outcome in ("loaded", "error") else "bad"] = outcomes.get(
                outcome if outcome in ("loaded", "error") else "bad", 0) + 1
    print(f"robustness: tried {len(inputs)} inputs ({len(originals)} originals, "
          f"{len(inputs) - len(originals)} truncated/flipped): {outcomes}")
    assert not problems, "\n".join(problems[:30])
    assert outcomes.get("loaded", 0) >= 100 and outcomes.get("error", 0) >= 100  # both paths exercised
