"""The command line fills the app's settings model (medseg.settings) from its flags, and the runtime follows the
model: ``--threads N`` is this session's thread count (not a saved setting) before any library starts its pools,
and the next command without it computes with the automatic count again."""

from __future__ import annotations

import os

import pytest
import SimpleITK as sitk
import torch

from medseg import threads
from medseg.cli import main
from medseg.settings import SETTINGS


def test_threads_on_the_command_line_are_this_sessions_setting_and_reach_the_libraries(ct_dir, tmp_path,
                                                                                     budget_restored):
    series = ct_dir / "dcmqi_ct3slice_masks" / "image"
    assert main(["convert", str(series), str(tmp_path / "ct.nii.gz"), "--threads", "2", "--quiet"]) == 0
    assert sitk.ReadImage(str(tmp_path / "ct.nii.gz")).GetSize()[2] == 3  # the command ran
    assert (SETTINGS.threads, SETTINGS.session_only) == (2, {"threads"})
    assert threads.budget_count() == threads.CoreCount(2, threads.FROM_OPTION)
    assert (torch.get_num_threads(), sitk.ProcessObject.GetGlobalDefaultNumberOfThreads()) == (2, 2)
    assert os.environ["OMP_NUM_THREADS"] == "2"  # the pools not started yet, child processes

    assert main(["convert", str(series), str(tmp_path / "again.nii.gz"), "--quiet"]) == 0
    assert (SETTINGS.threads, SETTINGS.session_only) == (0, set())
    automatic = threads.ThreadBudget().count  # what a budget nobody configured counts
    assert threads.budget_count() == automatic and torch.get_num_threads() == automatic.threads


def test_a_thread_count_the_machine_cannot_run_is_refused_before_the_settings_change(tmp_path, capsys):
    too_many = 4 * (os.cpu_count() or 1) + 1
    with pytest.raises(SystemExit) as refused:
        main(["convert", "in.nrrd", str(tmp_path / "out.nii.gz"), "--threads", str(too_many)])
    assert refused.value.code == 2 and "far more threads than this machine can run" in capsys.readouterr().err
    assert SETTINGS.threads == 0
