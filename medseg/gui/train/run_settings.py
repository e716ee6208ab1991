"""The Train tab's settings: what a run trains (base model, labels) and how (epochs, device, processes, AMP …).

:class:`RunSettings` is what the form says; the same settings make the in-process engine call and the
``medseg train`` command line (a torchrun run, the run folder's command.txt).
"""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path
from typing import Any, Callable

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
    QFormLayout,
    QListWidget,
    QListWidgetItem,
    QSpinBox,
    QWidget,
)

from medseg.gui.train.dataset_panel import SCRATCH_PLAN_OPTIONS

STARTER = "Starter model (body, lungs, bones)"
SCRATCH = "From scratch"
OTHER = "Model package or nnU-Net folder…"


@dataclasses.dataclass
class RunSettings:
    """What the panel's controls say; the same settings make the engine call and the command line."""

    base: str | None  # a package path, "starter", or None (from scratch)
    labels: list[str]
    epochs: int = 4
    iterations: int = 20
    learning_rate: float = 0.01
    batch_size: int = 4
    device: str = "auto"
    processes: int = 1
    amp: bool = True
    augmentation: str = "default"  # default | no-mirror | off
    threads: int = 0
    profile: bool = False  # a torch.profiler trace and the phase table in the run folder's profile/
    # the base model's labels this run keeps though they were not ticked (their targets: the starter's rule
    # labeller where a case does not hold them); set by the question before Start
    kept: list[str] = dataclasses.field(default_factory=list)

    def cli_arguments(self, manifest: Path, out: Path, resume: bool) -> list[str]:
        from medseg.model.package import starter_model_path

        arguments = [str(manifest), "--out", str(out), "--epochs", str(self.epochs), "--iterations",
                     str(self.iterations), "--batch-size", str(self.batch_size), "--lr", str(self.learning_rate),
                     "--device", self.device]
        if self.base is not None:
            arguments += ["--from", str(starter_model_path() if self.base == "starter" else self.base)]
        else:
            options = SCRATCH_PLAN_OPTIONS
            arguments += ["--configuration", str(options["configuration"]), "--memory-gb", "0.35", "--base-features",
                          str(options["base_features"]), "--max-features", str(options["max_features"])]
        if not self.amp:
            arguments.append("--no-amp")
        if self.augmentation == "off":
            arguments.append("--no-augment")
        elif self.augmentation == "no-mirror":
            arguments.append("--no-mirror")
        if self.threads:
            arguments += ["--threads", str(self.threads)]
        if self.profile:
            arguments += ["--profile", str(out.parent / "profile")]
        if resume:
            arguments.append("--resume")
        return arguments

    def engine_call(self, manifest: Path, out: Path, resume: bool):
        """The in-process run: the same manifest and settings as the command line."""
        def make(cancel=None):
            from medseg.workflows.training import TrainingSettings, TrainRequest, start_training

            settings = TrainingSettings(epochs=self.epochs, iterations=self.iterations, batch_size=self.batch_size,
                                        learning_rate=self.learning_rate, device=self.device, amp=self.amp,
                                        augment=self.augmentation != "off", mirror=self.augmentation != "no-mirror")
            return start_training(TrainRequest(
                manifest, out, settings, plan=None if self.base is not None else SCRATCH_PLAN_OPTIONS, base=self.base,
                resume=resume, profile=out.parent / "profile" if self.profile else None,
                provenance={"training_command": "medseg train (Train & Export tab) "
                            + shlex.join(self.cli_arguments(manifest, out, resume)),
                            **({"kept_base_labels": {
                                "labels": list(self.kept),
                                "how": "fine-tuned with them as targets: a case's own labels where it "
                                       "has them, else the starter's rule labeller under the case's "
                                       "labels"}} if self.kept else {})}), cancel).events
        return make


def precision_text(started: dict[str, Any]) -> str:
    """What the started event says about the arithmetic: the Train tab shows whether AMP is on."""
    return "mixed precision, AMP" if started.get("amp") else "full precision, float32"


class RunSettingsForm(QWidget):
    devices_listed = Signal()  # the device box now lists this machine's training devices

    def __init__(self, label_names: Callable[[], list[str]], parent: QWidget | None = None) -> None:
        """``label_names``: the training set's labels (the ones to tick)."""
        super().__init__(parent)
        self.label_names = label_names
        self.base_combo = QComboBox(self)
        self.base_combo.addItems([STARTER, SCRATCH, OTHER])
        self.base_combo.activated.connect(self._on_base_activated)
        self.base_path: str | None = None
        self.labels_list = QListWidget(self)
        self.labels_list.setMaximumHeight(90)
        self.epochs = _spin(1, 10_000, 4)
        self.iterations = _spin(1, 100_000, 20)
        self.learning_rate = QDoubleSpinBox(self)
        self.learning_rate.setDecimals(5)
        self.learning_rate.setRange(1e-5, 1.0)
        self.learning_rate.setSingleStep(0.001)
        self.learning_rate.setValue(0.01)
        self.batch_size = _spin(1, 256, 4)
        self.device = QComboBox(self)
        # The devices are listed in a job when the tab is first shown: asking for them imports PyTorch
        # (3-6 s, if the Segment panel's own job has not yet) and asks CUDA, which froze the window
        # when done here. Until then "auto" is the choice.
        self.device.addItem("Automatic", "auto")
        self._devices_ready = False
        from medseg.gui.common.jobs import Job
        from medseg.job_registry import JobRegistry

        self._lister = Job("list-training-devices", _list_training_devices, self, registry=JobRegistry(),
                           cancellable=False, computes=False)
        self._lister.finished_ok.connect(self._fill_devices)
        self._lister.finished_error.connect(self._devices_failed)
        self.processes = _spin(1, 16, 1)
        self.processes.setToolTip("More than 1: DistributedDataParallel through torchrun (one process per GPU; "
                                  "gloo processes on the CPU)")
        self.amp = QCheckBox("Mixed precision (AMP, CUDA only)", self)
        self.amp.setChecked(True)
        self.amp.setToolTip("float16 autocast with a gradient scaler on a CUDA GPU (about 1.5x the speed); "
                            "the CPU always trains in float32. The log says which a run uses.")
        self.profile = QCheckBox("Profile (trace + phase table)", self)
        self.profile.setToolTip("Write a torch.profiler trace of a few iterations (open it in Perfetto or "
                                "TensorBoard) and where the time went (load, preprocess, batches, network, "
                                "validation, write) to the run folder's profile/; the table also goes to the log.")
        self.augmentation = QComboBox(self)
        self.augmentation.addItems(["nnU-Net default", "Default without mirroring", "Off"])
        form = QFormLayout(self)
        form.setContentsMargins(0, 0, 0, 0)  # as the panel's own layout had it
        form.addRow("Base model", self.base_combo)
        form.addRow("Labels to train", self.labels_list)
        form.addRow("Epochs", self.epochs)
        form.addRow("Iterations per epoch", self.iterations)
        form.addRow("Learning rate", self.learning_rate)
        form.addRow("Batch size", self.batch_size)
        form.addRow("Device", self.device)
        form.addRow("Processes (DDP)", self.processes)
        form.addRow("", self.amp)
        form.addRow("", self.profile)
        form.addRow("Augmentation", self.augmentation)

    def refresh_labels(self) -> None:
        checked = {self.labels_list.item(i).text() for i in range(self.labels_list.count())
                   if self.labels_list.item(i).checkState() == Qt.CheckState.Checked}
        known = {self.labels_list.item(i).text() for i in range(self.labels_list.count())}
        self.labels_list.clear()
        for name in self.label_names():
            item = QListWidgetItem(name, self.labels_list)
            item.setFlags(item.flags() | Qt.ItemFlag.ItemIsUserCheckable)
            item.setCheckState(Qt.CheckState.Checked if name in checked or name not in known else Qt.CheckState.Unchecked)

    def _on_base_activated(self, index: int) -> None:
        if self.base_combo.itemText(index) == OTHER:
            folder = QFileDialog.getExistingDirectory(self, "Model package or nnU-Net result folder")
            if folder:
                self.set_base_model(folder)
            else:
                self.base_combo.setCurrentIndex(0)

    def set_base_model(self, path: str | None) -> None:
        """A package folder (a previous fine-tune, an imported nnU-Net model); None: the starter."""
        if path is None:
            self.base_combo.setCurrentIndex(0)
            return
        self.base_path = str(path)
        label = f"Package: {Path(path).name}"
        if self.base_combo.findText(label) < 0:
            self.base_combo.insertItem(2, label)
        self.base_combo.setCurrentText(label)

    def showEvent(self, event) -> None:  # noqa: N802
        self.list_devices()
        super().showEvent(event)

    def list_devices(self) -> None:
        """Start listing the training devices this machine has (once; showing the page calls it)."""
        if not self._devices_ready and not self._lister.running:
            self._lister.start()

    @property
    def devices_ready(self) -> bool:
        """The device box lists this machine's devices (or listing them failed: "auto" stays)."""
        return self._devices_ready

    def _fill_devices(self, choices: list) -> None:
        chosen = self.device.currentData()  # keeps the choice made meanwhile if it is there
        self.device.clear()
        for choice in choices:
            self.device.addItem(choice.label, choice.device)
        self.device.setCurrentIndex(max(0, self.device.findData(chosen)))
        self._devices_ready = True
        self.devices_listed.emit()

    def _devices_failed(self, error: BaseException) -> None:
        self.device.setToolTip(f"Could not list the devices ({type(error).__name__}: {error}); "
                               "training chooses automatically")
        self._devices_ready = True
        self.devices_listed.emit()

    def shutdown(self) -> None:
        """The window closes: wait for the listing still running (a thread destroyed while it runs aborts)."""
        self._lister.wait_stopped()

    def settings(self) -> RunSettings:
        text = self.base_combo.currentText()
        base = "starter" if text == STARTER else None if text == SCRATCH else self.base_path
        labels = [self.labels_list.item(i).text() for i in range(self.labels_list.count())
                  if self.labels_list.item(i).checkState() == Qt.CheckState.Checked]
        return RunSettings(
            base=base, labels=labels, epochs=self.epochs.value(), iterations=self.iterations.value(),
            learning_rate=float(self.learning_rate.value()), batch_size=self.batch_size.value(),
            device=self.device.currentData(),
            processes=self.processes.value(), amp=self.amp.isChecked(),
            augmentation={0: "default", 1: "no-mirror", 2: "off"}[self.augmentation.currentIndex()],
            profile=self.profile.isChecked())


def _list_training_devices(progress=None, cancel=None) -> list:
    """A job: import PyTorch (if not yet) and list the devices training can use."""
    from medseg.model.backends import TRAINING, device_choices

    return device_choices(TRAINING)


def _spin(low: int, high: int, value: int) -> QSpinBox:
    spin = QSpinBox()
    spin.setRange(low, high)
    spin.setValue(value)
    return spin
