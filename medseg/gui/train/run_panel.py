"""Training panel: settings, Start / Pause / Resume / Stop, progress with ETA, live curves, log, summary.

The settings form is medseg.gui.train.run_settings, the question about the base model's labels before Start
medseg.gui.train.label_set_question, the plots written at the end medseg.gui.train.run_plots.

One device: the engine runs in a worker thread of this process. Several processes: the
same run is started as ``torchrun ... -m medseg train --json`` and followed through its
event stream. Either way every event goes to the curves, the log and the run folder
(``runs/<time>/``: model package, checkpoints, events.jsonl, metrics.csv, command.txt,
plot PNGs), and "Use this model" makes the result the Segment tab's model at once.
"""

from __future__ import annotations

import logging
import math
import shlex
import time
from pathlib import Path
from typing import Any

from PySide6.QtCore import Qt, Signal, Slot
from PySide6.QtWidgets import (
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QVBoxLayout,
    QWidget,
)

from medseg.errors import DatasetError, MedsegError
from medseg.gui.common.jobs import Job
from medseg.gui.train.dataset_panel import DatasetPanel
from medseg.gui.train.label_set_question import confirm_label_set
from medseg.gui.train.plots import LiveCurves
from medseg.gui.train.run_plots import RunPlots
from medseg.gui.train.run_settings import RunSettingsForm, precision_text
from medseg.gui.train.runner import InProcessRunner, TorchrunRunner, torchrun_command
from medseg.model.training.run_record import RunRecorder, read_events

log = logging.getLogger(__name__)

KEPT_RULE = "starter"  # the label rule that gives the starter's labels to a case that lacks them


class TrainingPanel(QWidget):
    run_ended = Signal(object)  # the last record (done / failed)
    model_chosen = Signal(str)  # "Use this model": the package path
    failed = Signal(object)
    plots_saved = Signal(str)  # the run folder, once its plot PNGs are written

    def __init__(self, dataset_panel: DatasetPanel, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.dataset_panel = dataset_panel
        self.runner: InProcessRunner | TorchrunRunner | None = None
        self.recorder: RunRecorder | None = None
        self.run_folder: Path | None = None
        self.package_path: Path | None = None
        self.last_checkpoint: str | None = None
        self.records: list[dict[str, Any]] = []
        self._first_iteration: tuple[float, int] | None = None
        self._last_progress_update = 0.0
        self.start_clicked_at: float | None = None
        self._kept: list[str] = []  # the base model's labels the current run keeps
        self.paused = False
        self._build()
        self.dataset_panel.changed.connect(self.form.refresh_labels)
        self._update_buttons()

    # --- construction ---------------------------------------------------------------------------------
    def _build(self) -> None:
        self.form = RunSettingsForm(lambda: self.dataset_panel.training_set.label_names, self)
        self.start_button = QPushButton("Start", self)
        self.pause_button = QPushButton("Pause", self)
        self.resume_button = QPushButton("Resume", self)
        self.stop_button = QPushButton("Stop", self)
        self.use_button = QPushButton("Use this model", self)
        self.open_run_button = QPushButton("Open run…", self)
        buttons = QHBoxLayout()
        for button in (self.start_button, self.pause_button, self.resume_button, self.stop_button):
            buttons.addWidget(button)
        self.start_button.clicked.connect(lambda: self.start(resume=False))
        self.pause_button.clicked.connect(self.pause)
        self.resume_button.clicked.connect(self.resume)
        self.stop_button.clicked.connect(self.stop)
        self.use_button.clicked.connect(self.use_model)
        self.open_run_button.clicked.connect(lambda: self.open_run())
        self.progress = QProgressBar(self)
        self.progress.setRange(0, 1000)
        self.eta_label = QLabel("", self)
        self.summary = QLabel("", self)
        self.summary.setWordWrap(True)
        self.summary.setVisible(False)  # shown with a finished run's summary: empty, its lines went to the log
        self.summary.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.log_pane = QPlainTextEdit(self)
        self.log_pane.setReadOnly(True)
        self.log_pane.setMaximumBlockCount(2000)
        left = QWidget(self)
        left_layout = QVBoxLayout(left)
        left_layout.addWidget(self.form)
        left_layout.addLayout(buttons)
        left_layout.addWidget(self.progress)
        left_layout.addWidget(self.eta_label)
        left_layout.addWidget(self.summary)
        extra = QHBoxLayout()
        extra.addWidget(self.use_button)
        extra.addWidget(self.open_run_button)
        left_layout.addLayout(extra)
        left_layout.addWidget(self.log_pane, 1)
        self.curves = LiveCurves(self)
        self.plots = RunPlots(self.curves, self)
        self.plots.saved.connect(self.plots_saved)
        self.plots.not_saved.connect(self._log)
        splitter = QSplitter(Qt.Orientation.Horizontal, self)
        splitter.addWidget(left)
        splitter.addWidget(self.curves)
        splitter.setStretchFactor(1, 1)
        QVBoxLayout(self).addWidget(splitter)

    # --- running ---------------------------------------------------------------------------------------
    @property
    def running(self) -> bool:
        return self.runner is not None and self.runner.running

    def start(self, resume: bool = False) -> bool:
        if self.running:
            return False
        settings = self.form.settings()
        training_set = self.dataset_panel.training_set
        try:
            if not training_set.entries:
                raise DatasetError("add cases to the training set first")
            if not settings.labels:
                raise DatasetError("choose at least one label to train")
            if not any(not e.validation for e in training_set.entries):
                raise DatasetError("every case is held out for validation: train on at least one")
            if not resume and not confirm_label_set(settings, self):
                return False
            if resume:
                settings.kept = list(self._kept)  # the run goes on with the labels it started with
            manifest = training_set.save(settings.labels, settings.kept, KEPT_RULE if settings.kept else None)
            self._kept = list(settings.kept)
            if not resume or self.run_folder is None:
                self.run_folder = training_set.folder / "runs" / time.strftime("run-%Y%m%d-%H%M%S")
                # what the previous run made is not this run's: "Use this model" waits for this one's package
                self.package_path = None
                self.last_checkpoint = None
                self._show_summary("")
                self.curves.clear()
                self.records = []
                self.log_pane.clear()
        except MedsegError as error:
            self.failed.emit(error)
            return False
        out = self.run_folder / "model"
        arguments = settings.cli_arguments(manifest, out, resume)
        self.recorder = RunRecorder(self.run_folder)
        if settings.processes > 1:
            from medseg import threads

            command = torchrun_command(settings.processes, arguments)
            # its processes split this app's CPU threads (each otherwise took torchrun's one thread)
            share = threads.process_share(0, settings.processes, threads.budget_count()).threads
            self.runner = TorchrunRunner(command, self, threads_per_process=share)
            self.recorder.write_command(shlex.join(command))
        else:
            self.recorder.write_command("medseg train " + shlex.join(arguments) + "   # run in the app's worker thread")
            self.runner = InProcessRunner(settings.engine_call(manifest, out, resume), self)
        self.runner.record.connect(self.on_record)
        self.runner.ended.connect(self._on_ended)
        self._first_iteration = None
        self._show_summary("")
        self.progress.setFormat("preparing the dataset… %p%")
        self.progress.setValue(0)
        self.eta_label.setText("preparing the dataset: starting the engine…")
        self._log(f"{'Resuming' if resume else 'Starting'} run in {self.run_folder}")
        if settings.kept:
            self._log(f"keeping the base model's {', '.join(settings.kept)}: fine-tuned with them as targets "
                      "(a case's own labels where it has them, else the starter's rule labeller under yours)")
        self.start_clicked_at = time.monotonic()
        self.runner.start()
        self._update_buttons()
        return True

    def pause(self) -> None:
        runner = self.runner
        if runner is not None and runner.running:
            runner.pause()
            self.paused = True
            self._log("paused")
            self._update_buttons()

    def resume(self) -> None:
        runner = self.runner
        if runner is not None and runner.running and self.paused:
            runner.resume()
            self.paused = False
            self._log("resumed")
            self._update_buttons()
        elif not self.running and self.last_checkpoint:
            self.start(resume=True)

    def stop(self) -> None:
        runner = self.runner
        if runner is not None and runner.running:
            self.paused = False
            runner.stop()
            self._log("stopping… (the last completed epoch's checkpoint is kept)")

    def shutdown(self) -> None:
        self.form.shutdown()
        if self.runner is not None and self.runner.running:
            self.runner.wait_stopped()
        self.plots.finish_now()
        if self.recorder is not None:
            self.recorder.close()

    # --- events ------------------------------------------------------------------------------------------
    @Slot(object)
    def on_record(self, record: dict[str, Any]) -> None:
        self.records.append(record)
        if self.recorder is not None:
            self.recorder.record(record)
        self.curves.add(record)
        kind = record.get("event")
        if kind == "iteration":
            self._on_iteration(record)
        elif kind == "epoch":
            dice = ", ".join(f"{k} {v:.3f}" for k, v in (record.get("validation_dice") or {}).items() if v is not None)
            validation = record.get("validation_loss")
            self._log(f"epoch {record['epoch'] + 1}/{record['epochs']}: loss {record['train_loss']:.4f}"
                      + (f", validation loss {validation:.4f}" if validation is not None else "")
                      + (f", Dice {dice}" if dice else "") + (" (best)" if record.get("is_best") else ""))
        elif kind == "checkpoint":
            self.last_checkpoint = record["path"]
        elif kind == "preparing":
            self._on_preparing(record)
        elif kind in ("message", "fallback"):
            self._log(("fallback: " if kind == "fallback" else "") + record["text"])
        elif kind == "started":
            self.progress.setFormat("%p%")
            self.progress.setValue(0)
            self._log(f"{record['total_steps']} iterations on {record['device']} "
                      f"({record['world_size']} process(es), global batch {record['global_batch']}), "
                      f"{precision_text(record)}")
            self.eta_label.setText(f"starting on {record['device']}, {precision_text(record)}…")

    def _on_preparing(self, record: dict[str, Any]) -> None:
        """Before the first iteration (seconds to minutes on a CPU): what is being prepared, how far, since when."""
        done, total = int(record["done"]), max(1, int(record["total"]))
        since = f" (+{time.monotonic() - self.start_clicked_at:.1f} s)" if self.start_clicked_at is not None else ""
        self.progress.setFormat("preparing the dataset… %p%")
        self.progress.setValue(int(1000 * done / total))
        self.eta_label.setText(f"preparing the dataset ({done + 1}/{total}): {record['text']}…")
        self._log(f"preparing{since}: {record['text']}")

    def _on_iteration(self, record: dict[str, Any]) -> None:
        now = time.monotonic()
        step, total = int(record["step"]) + 1, int(record["total_steps"])
        if self._first_iteration is None:
            self._first_iteration = (now, step)
        if now - self._last_progress_update < 0.1 and step < total:
            return  # a visible QProgressBar repaints synchronously: ~10 updates a second at most
        self._last_progress_update = now
        self.progress.setValue(int(1000 * step / max(total, 1)))
        started, first = self._first_iteration
        done = step - first
        eta = (now - started) / done * (total - step) if done else math.nan
        self.eta_label.setText(f"iteration {step}/{total}, loss {record['loss']:.4f}, lr {record['learning_rate']:.2e}"
                               + (f", {time_left(eta)}" if not math.isnan(eta) else ""))

    @Slot(object)
    def _on_ended(self, record: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder.close()
        if self.run_folder is not None:
            self.plots.save(self.run_folder)
        if record["event"] == "done":
            self.package_path = Path(record["package"]) if record.get("package") else None
            self.last_checkpoint = None  # finished: nothing to resume
            self.progress.setValue(1000)
            self.eta_label.setText("done")
            self._show_summary(self.summary_text(record))
            self._log(f"done: model package {self.package_path}")
        elif record.get("cancelled"):
            self._log("stopped; Resume continues from the last checkpoint" if self.last_checkpoint
                      else "stopped before the first checkpoint")
            self.eta_label.setText("stopped")
            if self.last_checkpoint:
                self._package_stopped_run(record)
                return  # run_ended follows once the package is written
        else:
            self._log(f"failed: {record.get('error')}" + (f"\n{record['hint']}" if record.get("hint") else ""))
            self.eta_label.setText("failed")
            self.failed.emit(MedsegError(str(record.get("error")), path=record.get("path"), hint=record.get("hint")))
        self._update_buttons()
        self.run_ended.emit(record)

    def _package_stopped_run(self, record: dict[str, Any]) -> None:
        """A stopped run is still a model: package its best (else last) checkpoint, usable and exportable."""
        from medseg.model.training.config import CHECKPOINT_BEST

        assert self.last_checkpoint is not None and self.run_folder is not None, "a started run wrote a checkpoint"
        last = Path(self.last_checkpoint)
        checkpoint = last.parent / CHECKPOINT_BEST if (last.parent / CHECKPOINT_BEST).is_file() else last
        out = self.run_folder / "model-stopped"  # beside the checkpoints; a resumed run finishes into "model"
        name = self.dataset_panel.training_set.name

        def work(progress=None, cancel=None):
            from medseg.model.package import save_package
            from medseg.model.training.checkpoints import package_from_checkpoint

            package = package_from_checkpoint(checkpoint, name, provenance={"stopped_by_user": True})
            return save_package(package, out)

        def packaged(path: Any) -> None:
            self.package_path = Path(path)
            self._log(f"stopped: model package {self.package_path} from {checkpoint.name}")
            self._update_buttons()
            self.run_ended.emit({**record, "package": str(self.package_path)})

        def failed(error: BaseException) -> None:
            self._log(f"stopped; the checkpoint could not be packaged: {error}")
            self._update_buttons()
            self.run_ended.emit(record)

        self._package_job = Job("package stopped run", work, self, title="Packaging the stopped run")
        self._package_job.finished_ok.connect(packaged)
        self._package_job.finished_error.connect(failed)
        self._package_job.start()

    def summary_text(self, done: dict[str, Any]) -> str:
        epochs = [r for r in self.records if r.get("event") == "epoch"]
        iterations = [r for r in self.records if r.get("event") == "iteration"]
        best = done.get("best_epoch")
        scored = epochs[best] if best is not None and best < len(epochs) else (epochs[-1] if epochs else {})
        dice = ", ".join(f"{k} {v:.3f}" for k, v in (scored.get("validation_dice") or {}).items() if v is not None)
        seconds = float(done.get("seconds") or 0.0)
        rate = len(iterations) / seconds if seconds else math.nan
        started = next((r for r in self.records if r.get("event") == "started"), {})
        precision = f" ({precision_text(started)})" if started else ""
        return (f"<b>Run finished</b>: best epoch {best + 1 if best is not None else 'n/a (no validation cases)'}"
                f"{'<br>Dice ' + dice if dice else ''}<br>{duration_text(seconds)} on {done.get('device') or '?'}{precision}, "
                f"{rate:.2f} iterations/s")

    def use_model(self) -> None:
        """The Segment tab's model becomes this run's package (only ever one this run wrote)."""
        package = self.package_path
        if package is None or self.run_folder is None or not package.resolve().is_relative_to(self.run_folder.resolve()):
            return
        from medseg.settings import SETTINGS

        SETTINGS.segment_model = str(package)  # the Segment tab's model chooser follows the setting
        self._log(f"the Segment tab now uses {package}")
        self.model_chosen.emit(str(package))

    def open_run(self, folder: str | None = None) -> None:
        """Reopen a run folder: its curves and summary from events.jsonl."""
        folder = folder or QFileDialog.getExistingDirectory(self, "Run folder (with events.jsonl)")
        if not folder:
            return
        try:
            events = read_events(folder)
        except OSError as error:
            self.failed.emit(MedsegError(f"not a run folder: {error}", path=folder))
            return
        self.curves.clear()
        self.records = []
        self.run_folder = Path(folder)
        for record in events:
            self.records.append(record)
            self.curves.add(record)
        self.curves.redraw()
        done = [r for r in events if r.get("event") == "done"]
        if done:
            self.package_path = Path(done[-1]["package"]) if done[-1].get("package") else None
            self._show_summary(self.summary_text(done[-1]))
        self._update_buttons()

    def _show_summary(self, text: str) -> None:
        self.summary.setText(text)
        self.summary.setVisible(bool(text))

    def _log(self, text: str) -> None:
        self.log_pane.appendPlainText(text)

    def _update_buttons(self) -> None:
        running = self.running
        paused = running and self.paused
        self.start_button.setEnabled(not running)
        self.pause_button.setEnabled(running and not paused)
        self.resume_button.setEnabled(paused or (not running and bool(self.last_checkpoint)))
        self.stop_button.setEnabled(running)
        made_here = (self.package_path is not None and self.run_folder is not None
                     and self.package_path.resolve().is_relative_to(self.run_folder.resolve()))
        self.use_button.setEnabled(not running and made_here)
        self.use_button.setToolTip(f"Segment with {self.package_path}" if made_here else
                                   "This run has not written a model yet (it is written at the end, or from the "
                                   "last checkpoint when the run is stopped)")


def duration_text(seconds: float) -> str:
    """"17 min 44 s", "1 h 5 min", "12 s": a duration in words ("17:44" read like a clock time)."""
    seconds = max(0, int(round(seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours} h {minutes} min"
    return f"{minutes} min {secs} s" if minutes else f"{secs} s"


def time_left(seconds: float) -> str:
    """The training's estimate: "about 17 min 44 s left"."""
    return f"about {duration_text(seconds)} left"
