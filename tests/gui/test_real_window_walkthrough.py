"""The first hour of a clinician, in a REAL X window (Xvfb, the xcb plugin), as the README's checklist
describes it: open a real series, Segment, brush, grow, save a DICOM SEG, open it again, quit.

The app runs in its own process (``walkthrough_script.py``) driving its real widgets; the whole X
screen is grabbed after each step (look at them: test-artifacts/walk_*.png).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from PySide6.QtGui import QImage
from test_real_window import _as_array, _start_xvfb, _x_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="X11/xcb is the Linux desktop")


def test_first_hour_in_a_real_window(ct_dir, tmp_path, artifacts_dir):
    import highdicom as hd

    server, display = _start_xvfb()
    try:
        result = subprocess.run(
            [sys.executable, str(Path(__file__).with_name("walkthrough_script.py")),
             str(ct_dir / "totalsegmentator" / "example_ct_dicom"), str(artifacts_dir)],
            env=_x_env(display, tmp_path), capture_output=True, text=True, timeout=1500)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert result.returncode == 0, result.stdout + result.stderr
    steps = {s["step"]: s for s in json.loads((artifacts_dir / "steps.json").read_text())}
    assert list(steps) == ["start", "opened", "segmented", "edited", "saved", "reopened", "quit"]
    # A real window that fills most of the 1600 x 1000 screen, and a real picture of the CT on it.
    assert steps["start"]["window"][0] >= 1400 and steps["start"]["window"][1] >= 850
    opened = _as_array(QImage(steps["opened"]["screenshot"]))
    assert np.unique(opened[..., 0]).size > 100  # greys of a CT, not a blank screen
    assert "Axial slice" in steps["opened"]["readout"] and "HU" in steps["opened"]["readout"]
    assert {"body", "bones"} <= set(steps["segmented"]["labels"].values())
    assert steps["segmented"]["message"].startswith("Segmented in ")
    # the result is said under the Segment button too (the overlay section is scrolled away there)
    assert steps["segmented"]["segment_result"].startswith("Model medseg-starter")
    assert steps["segmented"]["segment_result_visible"]
    edited = steps["edited"]
    assert 0 < edited["painted_voxels"] < edited["grown_voxels"]
    assert edited["message"].startswith("Grow 2 mm on lesion: lesion +")
    assert steps["saved"]["message"].startswith("walkthrough_seg.dcm") and not steps["saved"]["unsaved_after_save"]
    seg = hd.seg.segread(steps["saved"]["seg"])
    assert "lesion" in {item.SegmentLabel for item in seg.SegmentSequence}
    assert steps["reopened"]["same_voxels"]
    assert steps["quit"]["visible_after_close"] is False  # saved: quitting asked nothing
