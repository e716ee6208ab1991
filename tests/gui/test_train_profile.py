"""The Train tab's "Profile" box and what it says about precision (issue #27), on real CT.

A tiny CPU fine-tune of the starter from the tab with Profile ticked: the run folder gets a
torch.profiler trace and the phase table, the log shows the table, and the tab says the run
trained in full precision (the CPU has no AMP) although the AMP box was ticked.
"""

from __future__ import annotations

import json

from medseg.model.profiling import TRAIN_PHASES


def test_profile_box_writes_a_trace_and_the_phase_table(window, qtbot, ct_dir, tmp_path, artifacts_dir):
    tab = window.train_tab
    panel, training = tab.dataset_panel, tab.training_panel
    panel.set_workspace(tmp_path / "workspace")
    window.tabs.setCurrentWidget(tab)
    tab.pages.setCurrentWidget(training)
    manifest = tmp_path / "set.json"
    manifest.write_text(json.dumps({
        "name": "profiled", "data_root": str(ct_dir / "totalsegmentator"), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label_rule": "starter"}]}))
    panel.add_folder(str(manifest))  # the panel opens a manifest as it opens a folder
    qtbot.waitUntil(lambda: panel.job is None and all(e.info is not None for e in panel.training_set.entries),
                    timeout=120_000)
    training.form.refresh_labels()
    training.form.epochs.setValue(1)
    training.form.iterations.setValue(3)
    training.form.batch_size.setValue(2)
    training.form.list_devices()  # what showing its page does: a job lists them
    qtbot.waitUntil(lambda: training.form.devices_ready, timeout=30_000)
    training.form.device.setCurrentIndex(training.form.device.findData("cpu"))  # setCurrentText("CPU") matched no item
    assert training.form.device.currentData() == "cpu"
    assert training.form.amp.isChecked()  # asked for, but the CPU trains in float32: the tab must say so
    training.form.profile.setChecked(True)
    assert "--profile" in training.form.settings().cli_arguments(manifest, tmp_path / "run" / "model", False)
    with qtbot.waitSignal(training.run_ended, timeout=600_000) as blocker:
        training.start_button.click()
    assert blocker.args[0]["event"] == "done", training.log_pane.toPlainText()[-2000:]

    log = training.log_pane.toPlainText()
    (started,) = [line for line in log.splitlines() if line.startswith("3 iterations on cpu")]
    assert started.endswith("full precision, float32")
    assert "on cpu (full precision, float32)" in training.summary.text()
    assert "medseg train: where the time went" in log
    profile = training.run_folder / "profile"
    phases = json.loads((profile / "phases.json").read_text())
    names = [row["phase"] for row in phases["phases"]]
    assert [n for n in TRAIN_PHASES if n in names] == [n for n in names if n in TRAIN_PHASES]  # the table's order
    assert {"load", "preprocess", "batches", "network", "write"} <= set(names)
    calls = {row["phase"]: row["calls"] for row in phases["phases"]}
    assert calls["network"] == 3 and calls["batches"] == 3  # one per iteration
    (trace,) = profile.glob("*.pt.trace.json")
    events = json.loads(trace.read_text())["traceEvents"]
    assert {"network", "batches"} <= {e.get("name") for e in events}  # the phases are named ranges in the trace
    window.grab().save(str(artifacts_dir / "gui_train_profile.png"))
