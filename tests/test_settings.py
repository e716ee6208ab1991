"""The app's settings model (medseg.settings): typed fields, an event for each real change and none otherwise,
refusals in words, the command line's session-only values, and the thread budget that follows the model.
No Qt: the model is driven as a script or the command line would."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import pytest

from medseg import threads
from medseg.errors import MedsegError
from medseg.settings import SETTINGS, Settings, apply_threads


@pytest.fixture
def heard():
    """The (name, value) pairs SETTINGS announced during a test."""
    seen: list[tuple[str, object]] = []

    def listen(name, value):
        seen.append((name, value))

    SETTINGS.changed.connect(listen)
    yield seen
    SETTINGS.changed.disconnect(listen)


def test_each_real_change_is_announced_once_with_its_name_and_value(heard, budget_restored):
    SETTINGS.interactive_mode = "small-first"
    SETTINGS.interactive_mode = "small-first"  # the same again: nothing to tell
    SETTINGS.segment_model = "totalsegmentator/total"
    SETTINGS.results_folder = "/srv/results"
    assert heard == [("interactive_mode", "small-first"), ("segment_model", "totalsegmentator/total"),
                     ("results_folder", "/srv/results")]
    assert SETTINGS.values()["interactive_mode"] == "small-first"


def test_a_value_of_the_wrong_type_or_out_of_range_is_refused_and_changes_nothing(heard):
    for name, value, words in [("threads", "4", "whole number"), ("threads", True, "whole number"),
                               ("threads", -1, "0 (automatic) or more"), ("device", 3, "text"),
                               ("interactive_mode", "fastest", "one of exact, small-first"),
                               ("interactive_runtime", "cuda", "one of auto, torch, openvino, openvino-bf16"),
                               ("recent_studies", "/a/study", "list of texts"), ("segment_model", 7, "text or nothing")]:
        before = getattr(SETTINGS, name)
        with pytest.raises(MedsegError, match=re.escape(words)):
            setattr(SETTINGS, name, value)
        assert getattr(SETTINGS, name) == before, name
    # more threads than four times the machine's logical CPUs is a typo (it crashed the process)
    with pytest.raises(MedsegError, match="far more threads than this machine can run"):
        SETTINGS.threads = 4 * (os.cpu_count() or 1) + 1
    assert heard == []


def test_several_fields_change_together_or_not_at_all(heard):
    with pytest.raises(MedsegError, match="interactive_runtime"):
        SETTINGS.update(interactive_mode="small-first", interactive_runtime="quantum")
    assert (SETTINGS.interactive_mode, heard) == ("exact", [])
    with pytest.raises(MedsegError, match="no setting 'colour'"):
        SETTINGS.update(colour="red")
    SETTINGS.update(interactive_mode="small-first", interactive_runtime="torch")
    assert heard == [("interactive_mode", "small-first"), ("interactive_runtime", "torch")]


def test_no_model_chosen_is_none_whether_given_as_nothing_or_as_empty_text():
    model = Settings(segment_model="")
    assert model.segment_model is None
    model.segment_model = "/models/liver"
    model.segment_model = ""
    assert model.segment_model is None


def test_recent_studies_are_newest_first_once_each_and_at_most_ten():
    model = Settings()
    for index in range(12):
        model.add_recent_study(f"/studies/{index}")
    model.add_recent_study("/studies/5")
    assert model.recent_studies == ("/studies/5", "/studies/11", "/studies/10", "/studies/9", "/studies/8",
                                    "/studies/7", "/studies/6", "/studies/4", "/studies/3", "/studies/2")


def test_the_thread_budget_follows_the_threads_setting(budget_restored):
    SETTINGS.threads = 2
    assert threads.budget_count() == threads.CoreCount(2, threads.FROM_SETTING)
    assert os.environ["OMP_NUM_THREADS"] == "2"  # for the pools not started yet and child processes
    SETTINGS.threads = 0  # automatic: what a budget nobody configured counts (OMP_NUM_THREADS, else the usable cores)
    assert threads.budget_count() == threads.ThreadBudget().count


def test_the_command_lines_threads_are_this_sessions_and_a_later_command_line_drops_them(heard, budget_restored):
    SETTINGS.from_command_line(threads=3)
    assert SETTINGS.threads == 3 and "threads" in SETTINGS.session_only
    assert threads.budget_count() == threads.CoreCount(3, threads.FROM_OPTION)
    assert heard == [("threads", 3)]
    SETTINGS.from_command_line(threads=None)  # the next command of this process gave none
    assert SETTINGS.threads == 0 and "threads" not in SETTINGS.session_only
    assert threads.budget_count() == threads.ThreadBudget().count


def test_a_process_share_is_the_budget_unless_threads_are_given(budget_restored):
    share = threads.CoreCount(1, threads.FROM_AFFINITY, "1 of 2 processes")
    assert apply_threads(SETTINGS, count=share) == 1 and threads.budget_count() == share
    SETTINGS.from_command_line(threads=2)
    assert apply_threads(SETTINGS, count=share) == 2  # --threads is per process


def test_the_settings_model_imports_no_qt():
    probe = "import sys, medseg.settings; print(sorted(m for m in sys.modules if m.split('.')[0] in " \
            "('PySide6', 'shiboken6', 'pyqtgraph')))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=120)
    assert done.stdout.strip() == "[]"
