"""A user's first DICOM series in a new process pays for its imports (issue #40: the first load must
not take longer than SimpleITK's). SimpleITK (60-90 ms to import) is medseg's fallback decoder for a
few transfer syntaxes and its reader of image files, scipy.ndimage (~0.2 s) resamples tilted or shifted
stacks only: an ordinary series needs neither. A fresh process shows what a load really imports."""

from __future__ import annotations

import json
import subprocess
import sys

SCRIPT = """
import json, sys
from medseg.io import load
volume = load(sys.argv[1])
print(json.dumps({"shape": list(volume.array.shape),
                  "imported": sorted(m for m in ("SimpleITK", "scipy.ndimage", "torch") if m in sys.modules)}))
"""


def test_an_ordinary_series_loads_without_simpleitk_or_scipy(ct_dir):
    series = ct_dir / "dcm_qa_ct" / "Philips_Ingenuity_phantom_mixed_series"
    run = subprocess.run([sys.executable, "-c", SCRIPT, str(series)], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    result = json.loads(run.stdout.strip().splitlines()[-1])
    assert result["shape"][1:] == [512, 512] and result["shape"][0] > 1
    assert result["imported"] == [], result
