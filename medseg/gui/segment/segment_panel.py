"""The Segment panel: the model, the compute devices actually present, and the plan that
will run for the open series (configuration and why, target spacing, patch, stages with
per-axis strides, tiles, memory estimate) — shown before pressing Segment.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from PySide6.QtCore import Qt, QTimer, Signal
from PySide6.QtGui import QTextOption
from PySide6.QtWidgets import (
    QCheckBox,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSizePolicy,
    QSpinBox,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from medseg.edit.document import SegmentationDocument
from medseg.gui.common.bind import follow_setting
from medseg.gui.segment.elided import ElidedButton, ElidedComboBox
from medseg.gui.segment.plan_text import plan_html
from medseg.settings import SETTINGS

if TYPE_CHECKING:
    from medseg.gui.segment.segment_flow import SegmentFlow
    from medseg.gui.study.study_loader import StudyLoader
    from medseg.model.kinds import ModelCard, ModelPipeline, OpenedModel


class SegmentPanel(QGroupBox):
    runtime_prepared = Signal()  # the AI runtime was imported (or failed to be): the plan is shown

    def __init__(self, document: SegmentationDocument, flow: SegmentFlow, loader: StudyLoader,
                 parent: QWidget | None = None) -> None:
        """``flow``: which model runs and the run itself (medseg.gui.segment.segment_flow); ``loader``: runs it."""
        super().__init__("Segment", parent)
        self.document, self.flow, self.loader = document, flow, loader
        self.model_label = QLabel(self)
        self.model_label.setWordWrap(False)
        # its text (a model's name, a chosen folder's) never widens the side panel: a long run folder's
        # path made the panel 200 px wider at every start after "Use this model" (the tooltip has it whole)
        self.model_label.setSizePolicy(QSizePolicy.Policy.Ignored, QSizePolicy.Policy.Preferred)
        self.model_label.setMinimumWidth(0)
        from medseg.gui.segment.model_chooser import ModelChooser

        self.model_chooser = ModelChooser(self)
        self.model_chooser.use.connect(flow.use_model_reference)
        self.model_chooser.install.connect(lambda model_id: flow.open_models_dialog(install=model_id))
        self.model_chooser.pick_folder.connect(flow.choose_model)
        self.model_chooser.manage.connect(lambda: flow.open_models_dialog())
        self.device_box = ElidedComboBox(self)  # long texts are elided: the panel never passes its dock (issue 52)
        self.device_box.setToolTip("Where the model runs; only what this machine has is listed")
        # the box is bound to the settings model's device; the plan follows the device: a TotalSegmentator
        # model's choice and estimates, a model's CPU engine
        self.device_box.currentIndexChanged.connect(lambda _index: self._device_chosen())
        follow_setting(self.device_box, "device", self._show_device)
        self.threads_box = _threads_box(self)
        self.configuration_box = ElidedComboBox(self)
        self.configuration_box.setToolTip("Which of the model's configurations runs; automatic lets the series' "
                                          "spacing choose (thin- or thick-slice)")
        self.configuration_box.addItem("Configuration: automatic (by the series' spacing)", None)
        self.configuration_box.currentIndexChanged.connect(lambda _index: self._show_plan())
        self.configuration_box.setVisible(False)  # shown when the model has more than one
        from medseg.gui.segment.precision_box import PrecisionBox

        self.precision_box = PrecisionBox(self)  # float32, or a faster tier verified here (issue 51)
        self.precision_box.currentIndexChanged.connect(lambda _index: self._show_plan())
        self.postprocess_box = QCheckBox("Apply the model's post-processing", self)
        self.postprocess_box.setToolTip("The steps the model declares after its network (listed in the plan "
                                        "below); off shows the network's own labels")
        self.postprocess_box.setChecked(True)
        self.postprocess_box.setVisible(False)  # shown when the model declares steps
        # As tall as its text (the side panel scrolls; a second scroll bar inside it hid the plan's end);
        # a rich-text QLabel would be squeezed inside the scroll area instead.
        self.plan_label = QTextBrowser(self)
        self.plan_label.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        # a long word (a folder's path) wraps too: the plan is never wider than the side panel
        self.plan_label.setWordWrapMode(QTextOption.WrapMode.WrapAtWordBoundaryOrAnywhere)
        self.plan_label.document().documentLayout().documentSizeChanged.connect(lambda _size: self._fit_plan())
        self.plan_label.setPlainText("Open an image to see the plan.")
        # a TotalSegmentator model's structure subset (its roi_subset); the names it lists are elided to the panel
        self.structures_button = ElidedButton("Which structures Segment keeps: fewer run faster (the image is "
                                              "cropped around them and only the networks that segment them run)", self)
        self.structures_button.clicked.connect(self.pick_structures)
        self.structures_button.setVisible(False)
        self._structures: tuple[str, ...] | None = None  # None: all of the model's structures
        # several TotalSegmentator tasks into one segmentation (medseg.gui.segment.task_picker); shown once one
        # is installed (the catalogue says which entries are tasks: the panel never asks a model's kind)
        self.tasks_button = ElidedButton("Several TotalSegmentator tasks in one run, into one segmentation "
                                         "(grouped: organs, vessels, heart, head and neck, …)", self)
        self.tasks_button.clicked.connect(self.pick_tasks)
        self.tasks_button.setVisible(False)
        self._tasks: tuple[str, ...] = ()  # catalogue ids; empty: the chosen model alone
        self.parts_label = QLabel(self)  # progress per part while a TotalSegmentator model runs
        self.parts_label.setObjectName("segment-parts")
        self.parts_label.setWordWrap(True)
        self.parts_label.setVisible(False)
        self._parts_done: list[str] = []
        loader.progressed.connect(self._on_progress)
        loader.busy_changed.connect(self._on_busy)
        # the plan again after a run: what it used may have changed (the engine measured meanwhile, issues 51, 52)
        # (after the result's own handler, in a later turn of the event loop: the arrival stays short, issue 52.9)
        loader.segmented.connect(lambda _result: QTimer.singleShot(0, self._show_plan))
        loader.failed.connect(lambda _error: QTimer.singleShot(0, self._show_plan))
        self.run_button = QPushButton("Segment", self)
        self.run_button.clicked.connect(flow.segment)
        self.result_label = QLabel(self)  # the segmentation on screen: which model made it, how, how long
        self.result_label.setWordWrap(True)
        self.result_label.setObjectName("segment-result")
        layout = QVBoxLayout(self)
        layout.addWidget(self.model_chooser)
        layout.addWidget(self.model_label)
        layout.addWidget(self.device_box)
        threads_row = QHBoxLayout()
        threads_row.addWidget(QLabel("CPU threads:", self))
        threads_row.addWidget(self.threads_box, 1)
        layout.addLayout(threads_row)
        layout.addWidget(self.configuration_box)
        layout.addWidget(self.precision_box)
        layout.addWidget(self.postprocess_box)
        layout.addWidget(self.structures_button)
        layout.addWidget(self.tasks_button)
        layout.addWidget(self.plan_label)
        layout.addWidget(self.run_button)
        layout.addWidget(self.parts_label)
        layout.addWidget(self.result_label)
        self.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Minimum)
        self._package: ModelPipeline | None = None
        self._opened: OpenedModel | None = None
        self.card: ModelCard | None = None  # the chosen model's card
        self._package_source: object = ()
        self._devices_filled = False
        self._planned = False  # a study has been open: the model label names the model's card from then on
        self._runtime_error: BaseException | None = None
        # PyTorch and the model readers are imported, and the chosen model read, in a job started once the
        # window has painted (prepare_runtime): done here, when the first study opened (the device list),
        # they froze the window for 1.5-2 s of imports; started before the first paint, the import's
        # long GIL holds (loading torch's libraries) would delay it.
        from medseg.gui.common.jobs import Job
        from medseg.job_registry import JobRegistry

        self._warmup = Job("prepare-ai-runtime", _prepare_runtime(flow.model_path()), self, registry=JobRegistry(),
                           cancellable=False, computes=False)
        self._warmup.finished_ok.connect(self._on_runtime_ready)
        self._warmup.finished_error.connect(self._on_runtime_failed)
        self._closing = False
        document.volume_changed.connect(self.refresh)
        self.refresh()

    def prepare_runtime(self) -> None:
        """Start importing the AI runtime (the window calls this once it has painted; again: nothing)."""
        if not self._closing and not self._warmup.running and not self.runtime_ready:
            self._warmup.start()

    @property
    def runtime_ready(self) -> bool:
        """The AI runtime was imported (or failed to be): the plan can be shown."""
        return self._devices_filled or self._runtime_error is not None

    def _on_runtime_ready(self, result: tuple) -> None:
        choices, source, opened = result
        blocked = self.device_box.blockSignals(True)
        for choice in choices:
            self.device_box.addItem(choice.label, choice.device)
        self.device_box.setCurrentIndex(max(self.device_box.findData(SETTINGS.device), 0))
        self.device_box.blockSignals(blocked)
        SETTINGS.device = self.device  # the setting names a device this machine has (else the first: automatic)
        self._devices_filled = True
        if opened is not None and source == self.flow.model_path():
            self._use_model(source, opened)
        self.refresh()
        self.runtime_prepared.emit()

    def _use_model(self, source: Any, opened: OpenedModel) -> None:
        self._opened, self.card = opened, opened.card
        self._package = opened.pipeline  # what Segment runs and plans (the model's own kind decides how)
        self._package_source = source
        self._fill_configurations(opened.pipeline)

    def _on_runtime_failed(self, error: BaseException) -> None:
        self._runtime_error = error
        self.refresh()
        self.runtime_prepared.emit()

    def shutdown(self) -> None:
        """The window closes: wait for the import still running (a thread destroyed while it runs aborts)."""
        self._closing = True
        self._warmup.wait_stopped()

    def _fit_plan(self) -> None:
        document = self.plan_label.document()
        document.setTextWidth(self.plan_label.viewport().width())
        frame = self.plan_label.frameWidth() * 2 + int(document.documentMargin())
        self.plan_label.setFixedHeight(min(int(document.size().height()) + frame, 900))

    def resizeEvent(self, event) -> None:  # noqa: N802
        super().resizeEvent(event)
        self._fit_plan()

    @property
    def package(self) -> Any:
        """The model Segment will run, its pipeline (None until it has been read, or when it could not be)."""
        return self._package if self._package_source == self.flow.model_path() else None

    @property
    def model_card(self) -> Any:
        """The card of the model Segment will run (None until it has been read)."""
        return self.card if self.package is not None else None

    def show_result(self, text: str, details: str = "") -> None:
        self.result_label.setText(text)
        self.result_label.setToolTip(details)

    @property
    def device(self) -> str:
        return self.device_box.currentData() or "auto"

    def _device_chosen(self) -> None:
        if self._devices_filled:
            SETTINGS.device = self.device
        self._show_plan()

    def _show_device(self, device: str) -> None:
        """The settings model's device (set elsewhere): shown when this machine has it, and planned for."""
        index = self.device_box.findData(device)
        if index >= 0:
            self.device_box.setCurrentIndex(index)
            self._show_plan()

    @property
    def precision(self) -> str:
        """"f32" (the exact path) or a faster tier verified for this model here; several tasks: float32."""
        return "f32" if self._tasks else self.precision_box.precision

    @property
    def postprocess(self) -> bool:
        """Whether the model's declared post-processing runs after its network."""
        return self.postprocess_box.isChecked()

    @property
    def configuration(self) -> str | None:
        """The configuration the user chose, or None for the spacing's choice (and for several tasks: each its own)."""
        return None if self._tasks else self.configuration_box.currentData()

    @property
    def structures(self) -> tuple[str, ...] | None:
        """The structures Segment keeps (a TotalSegmentator model's subset), None for all (and for several tasks:
        each keeps all of its own)."""
        return self._structures if self._takes_subset() and not self.tasks else None

    @property
    def tasks(self) -> tuple[str, ...]:
        """The TotalSegmentator tasks (catalogue ids) Segment runs together; empty: the chosen model alone."""
        return self._tasks

    def pick_tasks(self) -> None:
        """The task picker (grouped; not-installed tasks greyed with Install); its answer applies to the next
        Segment. The model Segment runs, when it is a task, is ticked to begin with."""
        from medseg.gui.segment.model_chooser import chosen_reference
        from medseg.gui.segment.task_picker import TaskPicker, task_choices

        choices = task_choices()
        current = chosen_reference()
        chosen = self._tasks or tuple(c.model_id for c in choices if c.model_id == current and c.installed)
        self.task_picker = TaskPicker(choices, chosen, self)
        self.task_picker.accepted.connect(lambda: self.set_tasks(self.task_picker.chosen()))
        self.task_picker.install.connect(lambda model_id: self.flow.open_models_dialog(install=model_id))
        self.task_picker.open()

    def set_tasks(self, chosen: tuple[str, ...]) -> None:
        from medseg.gui.segment.task_picker import describe

        self._tasks = tuple(chosen)
        self.tasks_button.setText(describe(self._tasks))
        self.tasks_button.setToolTip("Segment runs " + (", then ".join(self._tasks) + " into one segmentation"
                                                        if self._tasks else "the model chosen above alone")
                                     + ". Click to choose TotalSegmentator tasks to run together.")
        self.structures_button.setVisible(self._takes_subset() and not self._tasks)
        # several tasks: each runs the configuration it chooses, with its own steps; the chosen model's boxes go
        several = bool(self._tasks)
        self.configuration_box.setVisible(not several and self._package is not None
                                          and len(self._package.configuration_names()) > 1)
        self.postprocess_box.setVisible(not several and self._package is not None
                                        and bool(self._package.postprocessing))
        self.precision_box.setVisible(not several and self.precision_box.count() > 1)
        if several:
            self.model_label.setText(f"Runs: <b>{len(self._tasks)} tasks</b> (not the model above)")
            self.model_label.setToolTip("Segment runs " + ", then ".join(self._tasks))
        elif self.card is not None and self._planned:
            self.model_label.setText(f"Model: <b>{self.card.name}</b>")
            self.model_label.setToolTip(self.card.describe())
        self._show_plan()

    def _offer_tasks(self) -> None:
        """The task button shows once a TotalSegmentator task is installed (it may be installed while the window
        is open)."""
        from medseg.gui.segment.task_picker import any_installed

        offered = any_installed()
        self.tasks_button.setVisible(offered)
        if offered and not self._tasks:
            self.set_tasks(())

    def _takes_subset(self) -> bool:
        """The model crops its run to a subset of its structures (TotalSegmentator's roi_subset)."""
        return self._package is not None and self._package.capabilities.structure_subset

    def pick_structures(self) -> None:
        """The subset picker (search, groups); its answer applies to the next Segment."""
        card = self.card  # read with the pipeline _takes_subset asks
        if not self._takes_subset() or card is None:
            return
        from medseg.gui.segment.structure_picker import StructurePicker

        self.structure_picker = StructurePicker(card.labels, self._structures, self)
        self.structure_picker.accepted.connect(lambda: self._set_structures(self.structure_picker.chosen()))
        self.structure_picker.open()

    def _set_structures(self, chosen: tuple[str, ...] | None) -> None:
        from medseg.gui.segment.structure_picker import describe

        self._structures = chosen
        self.structures_button.setText(describe(chosen, len(self.card.labels)) if self.card is not None else "")
        self._show_plan()

    def _on_progress(self, _fraction: float, text: str) -> None:
        """A TotalSegmentator run's parts, one line each: done, the one running (its tile), how many follow."""
        import re

        found = re.match(r"part (\d+) of (\d+) \(([^)]*)\)(.*)", text)
        if found is None:
            return
        # the rest: ": tile i of n", or ", third j of 3: tile i of n" when a large image is split
        index, count, subject, detail = int(found[1]), int(found[2]), found[3], found[4].lstrip(":, ")
        while len(self._parts_done) < index - 1:
            self._parts_done.append("…")
        del self._parts_done[index - 1:]
        lines = [f"✓ part {i + 1}: {name}" for i, name in enumerate(self._parts_done)]
        lines.append(f"▶ part {index} of {count}: {subject}" + (f" — {detail}" if detail else ""))
        if index < count:
            lines.append(f"· {count - index} more part{'s' if count - index > 1 else ''} to run")
        self._parts_done.append(subject)
        self.parts_label.setText("\n".join(lines))
        self.parts_label.setVisible(True)

    def _on_busy(self) -> None:
        if not self.loader.busy:
            self._parts_done = []
            self.parts_label.setVisible(False)

    def _fill_configurations(self, package: ModelPipeline) -> None:
        keep = self.configuration
        self.configuration_box.blockSignals(True)
        while self.configuration_box.count() > 1:
            self.configuration_box.removeItem(1)
        capabilities = package.capabilities
        self.configuration_box.setItemText(0, "Configuration: automatic (by the series' spacing"
                                           + (" and this computer's speed)" if capabilities.weighs_speed else ")"))
        configurations = package.configuration_names()
        for name, what in configurations.items():
            self.configuration_box.addItem(f"Configuration: {name} ({what})", name)
        index = self.configuration_box.findData(keep) if keep is not None else 0
        self.configuration_box.setCurrentIndex(max(index, 0))
        self.configuration_box.setVisible(len(configurations) > 1)
        self.configuration_box.blockSignals(False)
        self.postprocess_box.setVisible(bool(package.postprocessing))
        self.structures_button.setVisible(capabilities.structure_subset and not self._tasks)
        if capabilities.structure_subset:
            self._set_structures(None)  # a new model: all of its structures

    def _show_plan(self) -> None:
        if self._tasks:  # several tasks: what runs, in order, and how they meet
            names = [model_id.rsplit("/", 1)[-1] for model_id in self._tasks]
            self.plan_label.setPlainText(
                f"{len(names)} TotalSegmentator task{'s' if len(names) != 1 else ''}, one after another, into one "
                f"segmentation: {', '.join(names)}.\n{names[0]} keeps its values; a value a later task shares moves "
                "to the next free one (the notes and the saved .labels.json say which). Each structure keeps its "
                "task as its source (the label's tooltip; a DICOM SEG names each task as its algorithm). A crop "
                "model several tasks need runs once. Each task runs the configuration it chooses for the series.")
            return
        volume = self.document.volume
        if volume is None or self._package is None:
            return
        from medseg.errors import MedsegError

        try:
            self.plan_label.setHtml(plan_html(self._package.plan(volume, device=self.device,
                                                                 configuration=self.configuration,
                                                                 structures=self.structures))
                                    + self.precision_box.plan_html())
        except MedsegError as error:
            self.plan_label.setPlainText(f"Cannot plan: {error}")

    def refresh(self) -> None:
        """Model name, devices and plan for the open series (the model is read once per choice)."""
        self._offer_tasks()
        source = self.flow.model_path()
        if self.document.volume is None and not self._planned:
            from medseg.gui.segment.model_chooser import chosen_reference

            reference = chosen_reference() if source is not None else None  # the catalogue id, not its folder
            if reference is not None and reference == source:  # a folder: with its parent ("run-…/model")
                reference = "/".join(Path(source).parts[-2:])
            self.model_label.setText(f"Model: {'built-in starter' if reference is None else reference}")
            self.model_label.setToolTip("The model Segment runs" + (f": {source}" if source else ""))
            return
        if self._runtime_error is not None:
            self.plan_label.setPlainText(f"Cannot plan: the AI runtime (PyTorch) could not be loaded: "
                                         f"{type(self._runtime_error).__name__}: {self._runtime_error}")
            return
        if not self._devices_filled:
            self.plan_label.setPlainText("Preparing the AI runtime (PyTorch) for the plan…")
            return  # _on_runtime_ready refreshes
        self._planned = True
        from medseg.errors import MedsegError

        try:
            if source != self._package_source or self._package is None:
                from medseg.workflows.models import open_model

                self._use_model(source, open_model(source))
            card = self.card
            assert card is not None, "_use_model holds the card with the pipeline"
            self.model_label.setText(f"Model: <b>{card.name}</b>")
            self.model_label.setToolTip(card.describe())
            if self._tasks:
                self.set_tasks(self._tasks)  # the tasks' line and boxes, not the model's
        except MedsegError as error:
            self.plan_label.setPlainText(f"Cannot plan: {error}")
            return
        # each study opened reads the tiers again: one verified meanwhile (medseg models verify) is offered
        self.precision_box.refill(self._package)
        self.precision_box.setVisible(not self._tasks and self.precision_box.count() > 1)
        self._show_plan()


def _prepare_runtime(source: Any):
    """A job: import PyTorch and the model readers, list this machine's devices (CUDA's first call
    too) and read the chosen model; gives (device choices, source, opened model or None)."""

    def prepare(progress=None, cancel=None) -> tuple:
        from medseg.errors import MedsegError
        from medseg.model.backends import device_choices
        from medseg.workflows.models import open_model

        choices = device_choices()
        try:
            opened = open_model(source)
        except MedsegError:
            opened = None  # the panel reads it again and says why
        return choices, source, opened

    return prepare


def _threads_box(parent: "SegmentPanel") -> QSpinBox:
    """The app's CPU threads (segmenting, training in the app, the 3D surfaces, grow from seeds), bound to the
    settings model's ``threads``: "automatic" (0) is every core this process may use; a number replaces it,
    kept between sessions (medseg.gui.common.app_settings); ``medseg gui --threads N`` sets it for one session.
    The thread budget follows the setting (medseg.settings.apply_threads), not the box."""
    from medseg import threads

    box = QSpinBox(parent)
    usable = threads.usable_cores()
    box.setRange(0, max(threads.affinity_cores(), threads.budget()))
    box.setSpecialValueText(f"automatic ({usable.threads}: every core medseg may use)")
    box.setToolTip("How many CPU threads medseg computes with. Jobs running at the same time (a segmentation, "
                   "the 3D surfaces, grow from seeds) share them. Automatic: " + usable.explain())
    box.setValue(SETTINGS.threads)

    def changed(value: int) -> None:
        SETTINGS.choose("threads", value)  # the app's setting again, kept, after `medseg gui --threads N`

    def shown(value: int) -> None:
        box.setValue(value)
        parent._show_plan()  # the plan says how many threads run it

    box.valueChanged.connect(changed)
    follow_setting(box, "threads", shown)
    return box
