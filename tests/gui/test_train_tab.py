"""The Train & Export tab on real CT: build a dataset through the GUI's own actions, fine-tune on the
CPU with live curves, pause / resume / stop / resume, use the model in the Segment tab, export it
to ONNX with the parity line; a 2-process gloo DDP run through torchrun reports into the same plots.

Runs are tiny (a few iterations of the 2D starter model) to keep CI time small.
"""

from __future__ import annotations

import gc
import json
import shutil
import time

import numpy as np
import onnxruntime
import pytest
import SimpleITK as sitk
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QImage
from PySide6.QtWidgets import QApplication

from medseg.model.package import load_package, starter_model_path
from medseg.model.training import CHECKPOINT_LAST, load_checkpoint
from medseg.model.training.run_record import METRICS_FILE, read_events

TS = "totalsegmentator"


def _segment_and_add(window, qtbot, open_image) -> None:
    """Open a real CT, segment it with the starter (the 'corrected case'), Add current case."""
    open_image()
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000):
        window.segment_action.trigger()
    panel = window.train_tab.dataset_panel
    before = len(panel.training_set.entries)
    panel.add_current_button.click()
    assert len(panel.training_set.entries) == before + 1
    # The case is kept in the dataset; opening the next image must not stop at "discard edits?".
    window.document.mark_saved()
    _wait_inspected(qtbot, panel)


def _wait_inspected(qtbot, panel) -> None:
    qtbot.waitUntil(lambda: panel.job is None and all(e.info is not None for e in panel.training_set.entries),
                    timeout=120_000)


def _train(qtbot, training, resume: bool = False):
    with qtbot.waitSignal(training.run_ended, timeout=600_000) as blocker:
        if resume:
            training.resume_button.click()
        else:
            training.start_button.click()
    return blocker.args[0]


class GapMeter:
    """The longest gap between ticks of a 5 ms GUI-thread timer: how long the event loop was blocked."""

    def __init__(self) -> None:
        self.timer = QTimer()
        self.timer.setInterval(5)
        self.timer.timeout.connect(self._tick)
        self.last = None
        self.longest = 0.0
        self.longest_ended_at = 0.0  # time.perf_counter() when the longest gap ended

    def _tick(self) -> None:
        now = time.perf_counter()
        if self.last is not None and now - self.last > self.longest:
            self.longest, self.longest_ended_at = now - self.last, now
        self.last = now

    def start(self) -> None:
        self.last, self.longest = None, 0.0
        self.timer.start()

    def stop(self) -> float:
        self.timer.stop()
        return self.longest


def test_dataset_finetune_pause_stop_resume_use_and_export(driver, window, qtbot, ct_dir, tmp_path, artifacts_dir,
                                                          monkeypatch):
    # This test is about training: re-segmenting and opening the next case go ahead without the
    # "edits would be replaced / lost" questions (those are tested in test_edit_gui.py).
    monkeypatch.setattr(window.editing, "ask_before_segment", lambda _package, then: then("replace"))
    monkeypatch.setattr(window.editing, "may_discard_edits", lambda _what: True)
    tab = window.train_tab
    panel, training, export = tab.dataset_panel, tab.training_panel, tab.export_panel
    panel.set_workspace(tmp_path / "workspace")
    window.tabs.setCurrentIndex(window.tabs.indexOf(tab.parentWidget().parentWidget()))  # the tab scrolls
    errors = []
    tab.failed.connect(errors.append)

    # --- the dataset, through the GUI's own actions --------------------------------------------------
    panel.add_current_button.click()  # nothing open yet: refused by name, nothing added
    assert errors and "open an image" in str(errors.pop()) and not panel.training_set.entries
    _segment_and_add(window, qtbot, lambda: driver.open_image_file(ct_dir / TS / "example_ct_sm.nii.gz"))
    _segment_and_add(window, qtbot, lambda: driver.open_series(ct_dir / "dcmqi_ct3slice_masks" / "image"))  # 3-slice GE CT
    first, second = panel.training_set.entries
    saved = first.spec.image.parent
    assert (saved / "case.json").is_file() and json.loads((saved / "case.json").read_text())["labels"]
    written = sitk.ReadImage(str(first.spec.label))  # the segmentation as shown, on the image grid
    shown = window.document  # the last case is the one still open: saved voxel for voxel, read back by SimpleITK
    assert np.array_equal(sitk.GetArrayFromImage(sitk.ReadImage(str(second.spec.label))), shown.label_map.array)
    assert written.GetSize() == (122, 101, 30)
    assert set(first.info.labels_present) <= {"body", "lungs", "bones"} and "body" in first.info.labels_present
    assert first.info.size_xyz == (122, 101, 30) and first.info.spacing_mm == pytest.approx((3.0, 3.0, 3.0))
    # the 3-slice case is held out: the user ticks its Validation box in the table
    panel.table.item(1, 5).setCheckState(Qt.CheckState.Checked)
    assert second.validation and "1 for training, 1 for validation" in panel.status.text()
    assert "Plan from scratch" in panel.plan_label.text() and "2D" in panel.plan_label.text()

    # An nnU-Net raw dataset whose label map has values dataset.json does not name: flagged per case.
    raw = tmp_path / "Dataset001_Liver"
    (raw / "imagesTr").mkdir(parents=True)
    (raw / "labelsTr").mkdir()
    shutil.copy(ct_dir / TS / "example_ct_sm.nii.gz", raw / "imagesTr" / "sm_0000.nii.gz")
    shutil.copy(ct_dir / TS / "example_seg.nii.gz", raw / "labelsTr" / "sm.nii.gz")
    (raw / "dataset.json").write_text(json.dumps({"channel_names": {"0": "CT"}, "labels": {"background": 0, "liver": 5},
                                                  "file_ending": ".nii.gz", "numTraining": 1}))
    plan_before = panel.plan_label.text()
    panel.add_nnunet(str(raw))
    _wait_inspected(qtbot, panel)
    imported = panel.training_set.entries[2]
    values = set(np.unique(sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / TS / "example_seg.nii.gz")))).tolist())
    problems = panel.training_set.problems(imported)
    assert len(values - {0, 5}) == 40  # 40 values besides the liver (5) that dataset.json does not name
    assert any(p.startswith("unknown label values") and "treated as background" in p for p in problems)
    assert "missing: body, lungs, bones" in problems
    assert panel.training_set.problems(first)[-1].endswith("liver")  # the liver is a label of the set now
    assert panel.table.item(2, 6).text() == "; ".join(problems)
    assert panel.table.item(0, 6).text() == "; ".join(panel.training_set.problems(first))
    assert panel.plan_label.text() != plan_before  # recomputed: two training cases now
    panel.table.selectRow(2)
    panel.remove_button.click()
    _wait_inspected(qtbot, panel)
    assert [e.spec.name for e in panel.training_set.entries] == [first.spec.name, second.spec.name]
    assert panel.training_set.label_names == ["body", "lungs", "bones"]  # the liver left with its case
    assert "liver" not in panel.table.item(0, 6).text()

    # --- a short CPU fine-tune of the starter, with live curves --------------------------------------
    tab.pages.setCurrentWidget(training)
    training.form.refresh_labels()
    assert [training.form.labels_list.item(row).text() for row in range(training.form.labels_list.count())] == [
        "body", "lungs", "bones"]
    training.form.epochs.setValue(2)
    training.form.iterations.setValue(4)
    training.form.batch_size.setValue(2)
    training.form.list_devices()  # what showing its page does: a job lists them
    qtbot.waitUntil(lambda: training.form.devices_ready, timeout=30_000)
    training.form.device.setCurrentIndex(training.form.device.findData("cpu"))
    meter = GapMeter()
    arrivals = []  # (time, event kind) as the GUI thread receives them
    frozen = []  # objects in the collector's permanent generation when each record arrived
    training.start_button.clicked.connect(
        lambda: training.runner.record.connect(lambda r: (arrivals.append((time.perf_counter(), r["event"])),
                                                          frozen.append(gc.get_freeze_count()))))
    saved = []
    training.plots_saved.connect(saved.append)
    meter.start()
    record = _train(qtbot, training)
    qtbot.waitUntil(lambda: bool(saved), timeout=60_000)  # the plot PNGs are written a step per event-loop turn
    gap_gui = meter.stop()
    gui_run_seconds = arrivals[-1][0] - arrivals[0][0]
    # While it ran, the heap was frozen (full collections skip the libraries' objects: the
    # event-loop gaps they caused); when it ended, the heap was given back to the collector.
    assert max(frozen) > 100_000 and gc.get_freeze_count() == 0
    first_iteration = next(t for t, kind in arrivals if kind == "iteration")
    gap_phase = ("while loading and preparing the cases (before the first iteration)"
                 if meter.longest_ended_at <= first_iteration else "during the iterations and validation")
    assert record["event"] == "done", record
    assert training.curves.points_plotted >= 8 + 2  # 8 iterations and 2 validated epochs drawn
    assert len(training.curves.losses) == 8 and len(training.curves.learning_rates) == 8
    epochs = [r for r in training.records if r["event"] == "epoch"]
    scored = {name for name, dice in epochs[-1]["validation_dice"].items() if dice is not None}
    assert "body" in scored and set(training.curves.dice) == scored  # every label scored on the held-out case
    assert all(len(training.curves.dice[name]) == 2 for name in scored)
    run = training.run_folder
    assert (run / "command.txt").read_text().startswith("medseg train ")
    metrics = (run / METRICS_FILE).read_text().splitlines()
    assert metrics[0].startswith("epoch,train_loss,validation_loss,mean_dice") and len(metrics) == 3
    assert [e["event"] for e in read_events(run)][-1] == "done"
    assert saved == [str(run)]
    for key in ("loss", "validation", "dice", "lr"):  # drawn at a fixed size even from a hidden page
        assert QImage(str(run / f"plot_{key}.png")).width() >= 500
    assert "best epoch" in training.summary.text() and "iterations/s" in training.summary.text()
    window.grab().save(str(artifacts_dir / "gui_train_tab_curves.png"))

    # --- pause, resume, stop (the last good checkpoint stays), resume from it ------------------------
    training.form.epochs.setValue(3)
    started = training.start()
    assert started
    qtbot.waitUntil(lambda: sum(r["event"] == "iteration" for r in training.records) >= 2, timeout=300_000)
    training.pause_button.click()
    job = training.runner.job
    assert job.paused and training.resume_button.isEnabled()
    qtbot.waitUntil(lambda: job.held, timeout=300_000)  # the engine stopped at its next yield ...
    QApplication.processEvents()  # ... and what it made before that has arrived
    steps_at_pause = [r["step"] for r in training.records if r["event"] == "iteration"]
    QApplication.processEvents()
    assert job.held and [r["step"] for r in training.records if r["event"] == "iteration"] == steps_at_pause
    training.resume_button.click()
    qtbot.waitUntil(lambda: any(r["event"] == "checkpoint" for r in training.records), timeout=300_000)
    qtbot.waitUntil(lambda: any(r["event"] == "iteration" and r["epoch"] == 1 for r in training.records),
                    timeout=300_000)
    with qtbot.waitSignal(training.run_ended, timeout=300_000) as blocker:
        training.stop_button.click()
    assert blocker.args[0]["event"] == "failed" and blocker.args[0]["cancelled"]
    steps = [r["step"] for r in training.records if r["event"] == "iteration"]
    assert steps[: len(steps_at_pause)] == steps_at_pause and len(steps) > len(steps_at_pause)
    assert steps == list(range(steps[0], steps[0] + len(steps)))  # resumed where it stopped: no step lost or repeated
    work = training.run_folder / "model.training"
    _, _, meta = load_checkpoint(work / CHECKPOINT_LAST)
    assert meta["epoch"] == 0  # the completed epoch's checkpoint, intact
    assert not (training.run_folder / "model").exists()  # no half-made package
    assert training.resume_button.isEnabled()
    # A stopped run is still a usable model: packaged from its checkpoint, listed for export, usable (#25.10).
    stopped = blocker.args[0]["package"]
    assert stopped == str(training.package_path) and training.use_button.isEnabled()
    assert stopped in export.models
    from medseg.workflows.models import open_model

    stopped_model = open_model(stopped).package
    assert stopped_model.provenance["stopped_by_user"] and "after epoch 1" in stopped_model.provenance["weights"]
    record = _train(qtbot, training, resume=True)
    assert record["event"] == "done"
    assert any(r["event"] == "message" and "resumed after epoch 1" in r["text"] for r in training.records)
    assert json.loads((work / "history.json").read_text())[-1]["epoch"] == 2

    # --- "Use this model": the Segment tab segments with it at once ----------------------------------
    training.use_button.click()
    package = load_package(record["package"])
    with qtbot.waitSignal(window.loader.segmented, timeout=300_000) as blocker:
        window.segment_action.trigger()
    assert blocker.args[0].model.name == package.name
    assert package.provenance["base_model"] == load_package(starter_model_path()).name

    # --- export to ONNX from the tab, with the parity line --------------------------------------------
    tab.pages.setCurrentWidget(export)
    assert record["package"] in export.models  # the finished run is listed
    export.model_list.setCurrentRow(export.models.index(record["package"]))
    export.format_combo.setCurrentIndex(0)
    out = tmp_path / "fine_tuned.onnx"
    with qtbot.waitSignal(export.exported, timeout=300_000) as blocker:
        export.export_selected(str(out))
    result = blocker.args[0]
    assert "ONNX Runtime vs PyTorch:" in export.parity_label.text() and "% equal labels on case" in export.parity_label.text()
    assert result.parity[0].passed
    session = onnxruntime.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    tiles = np.zeros((1, 1, 160, 160), dtype=np.float32)
    assert session.run(None, {"image": tiles})[0].shape == (1, 4, 160, 160)

    # --- compare: the starter and the fine-tuned model side by side on the validation case -----------
    export.add_model("")
    compared = []
    export.compared.connect(compared.append)
    export.compare_button.click()
    qtbot.waitUntil(lambda: export.job is None, timeout=300_000)  # done or failed: both end the job
    assert not errors, errors
    (results,) = compared
    # The two finished runs, the package the stopped run left (still listed: it is a model the
    # user may have used) and the starter.
    assert len(results) == 4 and sum("model-stopped" in name for name in results) == 1
    headers = [export.table.horizontalHeaderItem(c).text() for c in range(export.table.columnCount())]
    assert headers[:2] == ["Model", "Case"] and "body Dice" in headers and "body vol. diff %" in headers
    assert export.table.rowCount() == 4 and {export.table.item(r, 1).text() for r in range(4)} == {second.spec.name}
    for row, (model, scores) in enumerate(results.items()):
        body = next(label for label in scores[0].labels if label.name == "body")
        assert export.table.item(row, 0).text() == model
        assert export.table.item(row, headers.index("body Dice")).text() == f"{body.dice:.3f}"
    starter_row = next(r for r in range(4) if "built in" in export.table.item(r, 0).text())
    # the validation labels are the starter's own segmentation of that case: it agrees with itself
    assert export.table.item(starter_row, headers.index("body Dice")).text() == "1.000"
    window.grab().save(str(artifacts_dir / "gui_train_tab_export.png"))

    # --- responsiveness, reported against the same run without the GUI --------------------------------
    from medseg.model.datasets import open_dataset
    from medseg.model.training import TrainConfig, run_training
    from medseg.workflows.models import open_model

    started_at = time.perf_counter()
    run_training(open_dataset(panel.training_set.manifest_path), tmp_path / "headless", TrainConfig(
        epochs=2, iterations_per_epoch=4, batch_size=2, learning_rate=0.01, device="cpu"), base_package=open_model().package)
    headless = time.perf_counter() - started_at
    report = {"longest_event_loop_gap_ms_during_gui_training": round(gap_gui * 1000, 1),
              "longest_gap_when": gap_phase,
              "gui_run_seconds": round(gui_run_seconds, 2),
              "headless_same_run_seconds": round(headless, 2)}
    (artifacts_dir / "train_tab_responsiveness.json").write_text(json.dumps(report, indent=1))
    print("responsiveness:", report)
    assert not errors, errors


def test_two_process_gloo_ddp_from_the_tab_reports_into_the_plots(window, qtbot, ct_dir, tmp_path, artifacts_dir):
    """Processes = 2: the tab starts torchrun (gloo on the CPU) and follows its --json stream."""
    tab = window.train_tab
    panel, training = tab.dataset_panel, tab.training_panel
    panel.set_workspace(tmp_path / "workspace")
    manifest = tmp_path / "ddp.json"  # a folder/manifest source, added as the user would
    manifest.write_text(json.dumps({
        "name": "ddp", "data_root": str(ct_dir / TS), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label_rule": "starter"}]}))
    panel.add_folder(str(manifest))  # the panel opens a manifest as it opens a folder
    _wait_inspected(qtbot, panel)
    training.form.refresh_labels()
    training.form.epochs.setValue(2)
    training.form.iterations.setValue(2)
    training.form.batch_size.setValue(2)
    training.form.list_devices()  # what showing its page does: a job lists them
    qtbot.waitUntil(lambda: training.form.devices_ready, timeout=30_000)
    training.form.device.setCurrentIndex(training.form.device.findData("cpu"))
    training.form.processes.setValue(2)
    record = _train(qtbot, training)
    assert record["event"] == "done", (record, training.log_pane.toPlainText()[-2000:])
    started = next(r for r in training.records if r["event"] == "started")
    assert started["world_size"] == 2 and started["global_batch"] == 2
    assert [r["step"] for r in training.records if r["event"] == "iteration"] == [0, 1, 2, 3]
    assert len(training.curves.losses) == 4 and training.curves.points_plotted >= 4
    command = (training.run_folder / "command.txt").read_text()
    assert "torch.distributed.run --nproc_per_node 2" in command and command.rstrip().endswith("--json")
    assert load_package(record["package"]).provenance["world_size"] == 2
    assert sum(r["event"] == "done" for r in training.records) == 1  # rank 0 alone reports
