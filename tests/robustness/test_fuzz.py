"""A bounded coverage-guided fuzzing run of every file reader, in CI (see fuzz.py for the
harness and the longer run by hand). 15 s per target by default (MEDSEG_FUZZ_SECONDS), in
a child process under a 3 GB address-space limit: a crash, a hang over 60 s or memory past
the limit fails the test with the input's traceback; the input is kept in the test's folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).with_name("fuzz.py")
TARGETS = ["dicom", "nifti", "nrrd", "seg", "sidecar", "model_json", "zip", "dicomdir"]
SECONDS = int(os.environ.get("MEDSEG_FUZZ_SECONDS", "15"))


@pytest.mark.parametrize("target", TARGETS)
def test_fuzzing_finds_no_crash(target: str, tmp_path: Path) -> None:
    run = subprocess.run([sys.executable, str(HARNESS), target, f"-max_total_time={SECONDS}", "-seed=20261204",
                          f"-artifact_prefix={tmp_path}/"], capture_output=True, text=True, cwd=tmp_path,
                         timeout=SECONDS + 240)
    log = run.stdout + run.stderr
    done = re.search(r"Done (\d+) runs in (\d+) second", log)
    print(f"fuzz {target}: {done.group(1) if done else '?'} inputs in {done.group(2) if done else '?'} s")
    assert run.returncode == 0 and done, log[-4000:]
    assert int(done.group(1)) > 20  # it really ran
