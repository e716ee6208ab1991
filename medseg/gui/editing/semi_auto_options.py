"""The Edit panel's semi-automatic tools' options, a group each: grow from seeds (seed kind, locality slider,
region margin, Apply / Cancel), level tracing's tolerance, the 3D click's k, and the scissors' operation and slab.

Every widget is bound to a Property of the document's tool controller; Apply and Cancel call
the controller (through the runner, which first lets a running preview finish).
"""

from __future__ import annotations

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QLabel,
    QPushButton,
    QSlider,
    QWidget,
)

from medseg.edit.interaction import ToolController
from medseg.edit.properties import Property
from medseg.gui.common.bind import bind
from medseg.gui.editing.grow_runner import GrowRunner

SLIDER_STEPS_PER_UNIT = 2  # the locality slider moves in 0.5 HU/mm


def bind_slider(slider: QSlider, prop: Property) -> QSlider:
    """A slider for a float Property (in steps of 1 / SLIDER_STEPS_PER_UNIT), both ways, no echo."""
    slider.setRange(int(prop.minimum * SLIDER_STEPS_PER_UNIT), int(prop.maximum * SLIDER_STEPS_PER_UNIT))
    slider.setValue(round(prop.value * SLIDER_STEPS_PER_UNIT))
    slider.valueChanged.connect(lambda v: prop.set(v / SLIDER_STEPS_PER_UNIT))

    def show(value) -> None:
        blocked = slider.blockSignals(True)
        slider.setValue(round(value * SLIDER_STEPS_PER_UNIT))
        slider.blockSignals(blocked)

    prop.changed.connect(show)
    slider.setToolTip(f"{prop.label} ({prop.unit})")
    return slider


def _group(parent: QWidget) -> tuple[QWidget, QGridLayout]:
    group = QWidget(parent)
    grid = QGridLayout(group)
    grid.setContentsMargins(0, 0, 0, 0)
    return group, grid


class SemiAutomaticOptions(QObject):
    """The widgets, in one group per tool (:attr:`groups`), made in ``parent`` (the Edit panel lays them out)."""

    done = Signal()  # Apply or Cancel finished: the disabled button must not hand the focus to a box below it

    def __init__(self, controller: ToolController, runner: GrowRunner, parent: QWidget) -> None:
        super().__init__(parent)
        self.controller, self.runner = controller, runner
        self.seed_kind = bind(QComboBox(parent), controller.seed_kind)
        self.locality = bind_slider(QSlider(Qt.Orientation.Horizontal, parent), controller.seed_locality)
        self.locality_label = QLabel(parent)
        controller.seed_locality.changed.connect(self._show_locality)
        self._show_locality(controller.seed_locality.value)
        self.roi_margin = bind(QDoubleSpinBox(parent), controller.roi_margin_mm)
        self.existing_seeds = bind(QCheckBox("Labels are seeds", parent), controller.existing_seeds)
        self.apply_button = QPushButton("Apply", parent)
        self.apply_button.setToolTip("Write the grown labels (one undo step) and clear the seeds")
        self.cancel_button = QPushButton("Cancel", parent)
        self.cancel_button.setToolTip("Drop the seeds and the preview; the segmentation stays as it was")
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.cancel)
        self.tolerance = bind(QDoubleSpinBox(parent), controller.trace_tolerance_hu)
        self.confidence_k = bind(QDoubleSpinBox(parent), controller.confidence_k)
        self.scissors = bind(QComboBox(parent), controller.scissors_operation)
        self.slab = bind(QCheckBox("Slab", parent), controller.scissors_slab)
        self.slab_mm = bind(QDoubleSpinBox(parent), controller.slab_mm)
        self.seed_kind.setObjectName("seed_kind")
        self.existing_seeds.setObjectName("existing_seeds")
        self.scissors.setObjectName("scissors_operation")
        self.slab.setObjectName("scissors_slab")
        self.slab_mm.setObjectName("slab_mm")
        for widget, prop in ((self.locality, controller.seed_locality), (self.roi_margin, controller.roi_margin_mm),
                             (self.tolerance, controller.trace_tolerance_hu), (self.confidence_k, controller.confidence_k)):
            widget.setObjectName(next(n for n, p in controller.settings.items() if p is prop))  # the catalogue's name
        # One group per tool: the Edit panel shows the active tool's only (see medseg.gui.editing.tool_options).
        grow, grid = _group(parent)
        grid.addWidget(QLabel("Seeds", grow), 0, 0)
        grid.addWidget(self.seed_kind, 0, 1)
        grid.addWidget(QLabel("ROI +", grow), 0, 2)
        grid.addWidget(self.roi_margin, 0, 3)
        grid.addWidget(QLabel("Locality", grow), 1, 0)
        grid.addWidget(self.locality, 1, 1, 1, 2)
        grid.addWidget(self.locality_label, 1, 3)
        grid.addWidget(self.existing_seeds, 2, 0, 1, 2)
        grid.addWidget(self.apply_button, 2, 2)
        grid.addWidget(self.cancel_button, 2, 3)
        trace, grid = _group(parent)
        grid.addWidget(QLabel("Within ±", trace), 0, 0)
        grid.addWidget(self.tolerance, 0, 1)
        grid.setColumnStretch(2, 1)
        confidence, grid = _group(parent)
        grid.addWidget(QLabel("Mean ± k·SD, k", confidence), 0, 0)
        grid.addWidget(self.confidence_k, 0, 1)
        grid.setColumnStretch(2, 1)
        scissors, grid = _group(parent)
        grid.addWidget(self.scissors, 0, 0, 1, 2)
        grid.addWidget(self.slab, 0, 2)
        grid.addWidget(self.slab_mm, 0, 3)
        #: the groups by the catalogue settings they hold (none: the scissors' are the controller's own)
        self.groups: dict[str, QWidget] = {"grow": grow, "trace": trace, "confidence": confidence, "scissors": scissors}
        controller.grow_changed.connect(lambda _box=None: self._sync())
        self._sync()

    def _show_locality(self, value) -> None:
        self.locality_label.setText(f"{float(value):.1f} HU/mm")

    def _sync(self) -> None:
        active = self.controller.grow is not None
        self.apply_button.setEnabled(active)
        self.cancel_button.setEnabled(active)

    def apply(self) -> bool:
        self.runner.wait()
        changed = self.controller.apply_grow()
        self._sync()
        self.done.emit()
        return changed

    def cancel(self) -> None:
        self.controller.cancel_grow()
        self._sync()
        self.done.emit()
