"""The recovery offer after a crash is on top in a REAL X window with no window manager (issue #42.6): it
opened behind the window, whose native window the 3D view's OpenGL surface made again after the box."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from test_real_window import _start_xvfb, _x_env

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Xvfb and xcb are Linux")


def test_the_recovery_offer_is_on_top_without_a_window_manager(ct_dir, tmp_path, artifacts_dir):
    server, display = _start_xvfb()
    try:
        env = _x_env(display, tmp_path)
        env.update(MEDSEG_DATA_DIR=str(tmp_path / "medseg-data"), MEDSEG_CONFIG_DIR=str(tmp_path / "medseg-config"))
        done = subprocess.run([sys.executable, str(Path(__file__).with_name("recovery_probe.py")),
                               str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"), str(tmp_path / "out")],
                              env=env, capture_output=True, text=True, timeout=300)
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copy(tmp_path / "out" / "recovery_offer_screen.png", artifacts_dir / "gui_day2_recovery_real_window.png")
    result = json.loads((tmp_path / "out" / "result.json").read_text())
    assert result["platform"] == "xcb" and result["modal"]
    assert "(1 unsaved edit)" in result["text"]
    assert result["box_shown_share"] > 0.98, result  # the screen shows the box, not the window over it
