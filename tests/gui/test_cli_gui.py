"""`medseg demo` without a display and `medseg gui PATH --screenshot`: real processes."""

from __future__ import annotations

import os
import subprocess
import sys

from PySide6.QtGui import QImage


def _env_without_display() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM")}
    return env


def test_demo_without_display_saves_a_screenshot_and_exits_0(tmp_path, artifacts_dir):
    shot = artifacts_dir / "gui_demo.png"
    env = _env_without_display()
    env["XDG_CONFIG_HOME"] = str(tmp_path)  # QSettings of this run stay in tmp
    result = subprocess.run([sys.executable, "-m", "medseg", "demo", "--screenshot", str(shot)],
                            env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert "no display" in result.stdout
    assert str(shot) in result.stdout
    image = QImage(str(shot))
    assert image.width() >= 800 and image.height() >= 500


def test_gui_opens_a_path_and_takes_a_screenshot(tmp_path, ct_dir):
    shot = tmp_path / "lung.png"
    env = _env_without_display()
    env["QT_QPA_PLATFORM"] = "offscreen"
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    result = subprocess.run([sys.executable, "-m", "medseg", "gui", str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"),
                             "--screenshot", str(shot)], env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert not QImage(str(shot)).isNull()
