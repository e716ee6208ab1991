"""The Segment panel's CPU threads setting: automatic is every core medseg may use; a number
replaces it for every job of the app (and is remembered); the plan says how many threads and
which CPU engine will run the model, and why."""

from __future__ import annotations

import os

import pytest
import torch

from medseg import threads
from medseg.gui.common import app_settings
from medseg.gui.common.app_settings import THREADS_SETTING


@pytest.fixture
def chest(driver, ct_dir):
    yield driver.open_image_file(ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd")
    threads.configure(None)  # the next test starts from the default again


def _usable() -> int:
    import psutil

    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    logical, physical = psutil.cpu_count(), psutil.cpu_count(logical=False)
    return max(1, round(cpus * physical / logical)) if physical and logical and physical < logical else cpus


def test_the_threads_setting_sets_the_apps_budget_and_the_plan_shows_it(window, chest, qtbot, artifacts_dir):
    panel = window.segment_panel
    box = panel.threads_box
    assert box.value() == 0 and box.text().startswith(f"automatic ({_usable()}")
    assert threads.budget() == _usable()
    plan = panel.plan_label.toPlainText()
    assert f"runs on: the CPU, {_usable()} thread" in plan
    assert "engine: PyTorch (set by MEDSEG_CPU_ENGINE)" in plan  # the suite pins the engine (tests/conftest.py)

    box.setValue(1)
    assert (threads.budget(), torch.get_num_threads()) == (1, 1)
    assert "runs on: the CPU, 1 thread (the app's CPU threads setting)" in panel.plan_label.toPlainText()
    assert int(app_settings.settings().value(THREADS_SETTING)) == 1
    panel.grab().save(str(artifacts_dir / "gui_segment_panel_threads.png"))

    box.setValue(0)
    assert threads.budget() == _usable() and int(app_settings.settings().value(THREADS_SETTING)) == 0
    assert f"runs on: the CPU, {_usable()} thread" in panel.plan_label.toPlainText()
