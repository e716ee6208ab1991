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


def test_gui_labels_are_checked_before_a_window_opens(tmp_path, ct_dir):
    env = _env_without_display()
    study = str(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    missing = tmp_path / "no_such_seg.nii.gz"
    result = subprocess.run([sys.executable, "-m", "medseg", "gui", study, "--labels", str(missing), "--screenshot",
                             str(tmp_path / "x.png")], env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and f"{missing}: no such segmentation file" in result.stderr
    assert not (tmp_path / "x.png").exists()
    alone = subprocess.run([sys.executable, "-m", "medseg", "gui", "--labels", study], env=env,
                           capture_output=True, text=True, timeout=120)
    assert alone.returncode != 0 and "--labels needs a study" in alone.stderr


def test_gui_opens_a_study_with_its_labels_offscreen(tmp_path, ct_dir):
    """TotalSegmentator's label map over its abdomen CT: the screenshot shows the overlay (coloured
    pixels the same run without --labels does not have) and says the 3D view cannot draw offscreen."""
    import numpy as np

    env = _env_without_display()
    env["XDG_CONFIG_HOME"] = str(tmp_path)
    study = ct_dir / "totalsegmentator"
    shots = {}
    for name, extra in (("plain", []), ("labels", ["--labels", str(study / "example_seg.nii.gz")])):
        shots[name] = tmp_path / f"{name}.png"
        result = subprocess.run([sys.executable, "-m", "medseg", "gui", str(study / "example_ct_sm.nii.gz"), *extra,
                                 "--screenshot", str(shots[name])], env=env, capture_output=True, text=True, timeout=300)
        assert result.returncode == 0, result.stderr
    assert "3D view: unavailable" in result.stdout

    def coloured(path) -> int:
        image = QImage(str(path)).convertToFormat(QImage.Format.Format_RGB888)
        data = np.frombuffer(image.constBits(), np.uint8, image.bytesPerLine() * image.height())
        pixels = data.reshape(image.height(), image.bytesPerLine())[:, :image.width() * 3].reshape(-1, 3).astype(int)
        return int(((pixels.max(axis=1) - pixels.min(axis=1)) > 60).sum())

    assert coloured(shots["labels"]) > coloured(shots["plain"]) + 5_000  # organs in three views (12k here)
