"""The window binds to the app's settings model (medseg.settings): a widget's change goes to the model, the model's
change to the widget and to the runtime, and QSettings keeps the model between windows (medseg.gui.common.app_settings);
``medseg gui --threads N`` is that session's count, not a kept one, until the user chooses another."""

from __future__ import annotations

import pytest
import torch
from PySide6.QtWidgets import QCheckBox

from medseg import threads
from medseg.gui.common import app_settings
from medseg.gui.common.app_settings import THREADS_SETTING
from medseg.gui.shell.main_window import MainWindow
from medseg.settings import SETTINGS, Settings


@pytest.fixture
def budget_restored():
    before, torch_before = threads.budget_count(), torch.get_num_threads()
    yield
    SETTINGS.reset()
    threads.BUDGET.set_count(before)
    torch.set_num_threads(torch_before)


@pytest.fixture
def four_cores(monkeypatch):
    """A machine whose affinity mask holds 4 CPUs, whatever this one has: the threads box offers 0 to 4 and a
    kept 3 is in range (set before the window is made: its box reads the range once)."""
    monkeypatch.setattr(threads, "affinity_cores", lambda: 4)


def _new_window(qtbot) -> MainWindow:
    """The next start of the app (the same process: the model is the one SETTINGS)."""
    later = MainWindow()
    qtbot.addWidget(later)
    return later


def test_threads_chosen_in_the_window_reach_the_runtime_are_kept_and_come_back_in_a_new_window(
        four_cores, window, qtbot, budget_restored):
    box = window.segment_panel.threads_box
    box.setValue(2)  # what the spin box's arrows and typing do
    assert SETTINGS.threads == 2
    assert threads.budget_count() == threads.CoreCount(2, threads.FROM_SETTING) and torch.get_num_threads() == 2
    assert int(app_settings.settings().value(THREADS_SETTING)) == 2

    SETTINGS.threads = 1  # from code (a script, another panel): the box shows it, the runtime follows
    assert box.value() == 1 and threads.budget() == 1 and torch.get_num_threads() == 1

    app_settings.settings().setValue(THREADS_SETTING, 3)  # what an earlier session left in the store
    later = _new_window(qtbot)
    assert later.segment_panel.threads_box.value() == 3 and SETTINGS.threads == 3
    assert threads.budget_count() == threads.CoreCount(3, threads.FROM_SETTING)
    assert box.value() == 3  # the first window's box shows the one setting too
    later.close()


def test_medseg_gui_threads_is_this_sessions_until_the_user_chooses_in_the_window(four_cores, window, qtbot,
                                                                                  budget_restored):
    app_settings.settings().setValue(THREADS_SETTING, 3)  # the kept setting
    SETTINGS.from_command_line(threads=1)  # `medseg gui --threads 1` (medseg.cli.main)
    later = _new_window(qtbot)
    box = later.segment_panel.threads_box
    assert box.value() == 1 and threads.budget_count() == threads.CoreCount(1, threads.FROM_OPTION)
    assert int(app_settings.settings().value(THREADS_SETTING)) == 3  # not replaced by this session's count
    box.setValue(2)  # the user chooses: the app's setting from now on, kept
    assert threads.budget_count() == threads.CoreCount(2, threads.FROM_SETTING)
    assert int(app_settings.settings().value(THREADS_SETTING)) == 2
    later.close()


def test_the_interactive_option_and_the_model_are_one_setting_both_ways(window):
    small_first = window.findChild(QCheckBox, "prompt_small_first")
    assert small_first is not None and not small_first.isChecked() and SETTINGS.interactive_mode == "exact"
    small_first.setChecked(True)  # what a click does
    assert SETTINGS.interactive_mode == "small-first"
    SETTINGS.interactive_mode = "exact"
    assert not small_first.isChecked()


def test_opened_studies_and_folders_go_through_the_model_into_the_store(window, driver, ct_dir, qtbot):
    path = ct_dir / "pyradiomics_lung1" / "lung1_image.nrrd"
    driver.open_image_file(path)
    assert SETTINGS.recent_studies[0] == str(path) and SETTINGS.last_folder == str(path.parent)
    kept = Settings()  # what the next start reads from the store
    app_settings.load(kept)
    assert kept.recent_studies == (str(path),) and kept.last_folder == str(path.parent)
    assert [action.text() for action in window.recent_menu.actions()][0] == str(path)


def test_the_segment_panels_device_is_the_settings_device_both_ways(window, qtbot):
    panel = window.segment_panel
    box = panel.device_box
    assert (panel.device, SETTINGS.device) == ("auto", "auto")  # the first device listed: automatic
    box.setCurrentIndex(box.findData("cpu"))  # what choosing it in the list does
    assert SETTINGS.device == "cpu"
    SETTINGS.device = "auto"  # from code: the box shows it, and Segment runs on it
    assert box.currentData() == "auto" and panel.device == "auto"
    SETTINGS.device = "cuda:7"  # a device this machine does not list: the panel keeps what it has
    assert panel.device == "auto"
