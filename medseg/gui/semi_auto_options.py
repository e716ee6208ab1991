"""The Edit panel's semi-automatic tools: grow from seeds (seed kind, locality slider, region margin,
Apply / Cancel), level tracing's tolerance, the 3D click's k, and the scissors' operation and slab.

Every widget is bound to a Property of the document's tool controller; Apply and Cancel call
the controller (through the runner, which first lets a running preview finish).
"""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
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
from medseg.gui.bind import bind
from medseg.gui.grow_runner import GrowRunner

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


class SemiAutomaticOptions(QWidget):
    done = Signal()  # Apply or Cancel finished: the disabled button must not hand the focus to a box below it

    def __init__(self, controller: ToolController, runner: GrowRunner, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller, self.runner = controller, runner
        self.seed_kind = bind(QComboBox(self), controller.seed_kind)
        self.locality = bind_slider(QSlider(Qt.Orientation.Horizontal, self), controller.seed_locality)
        self.locality_label = QLabel(self)
        controller.seed_locality.changed.connect(self._show_locality)
        self._show_locality(controller.seed_locality.value)
        self.roi_margin = bind(QDoubleSpinBox(self), controller.roi_margin_mm)
        self.existing_seeds = bind(QCheckBox("Labels are seeds", self), controller.existing_seeds)
        self.apply_button = QPushButton("Apply", self)
        self.apply_button.setToolTip("Write the grown labels (one undo step) and clear the seeds")
        self.cancel_button = QPushButton("Cancel", self)
        self.cancel_button.setToolTip("Drop the seeds and the preview; the segmentation stays as it was")
        self.apply_button.clicked.connect(self.apply)
        self.cancel_button.clicked.connect(self.cancel)
        self.tolerance = bind(QDoubleSpinBox(self), controller.trace_tolerance_hu)
        self.confidence_k = bind(QDoubleSpinBox(self), controller.confidence_k)
        self.scissors = bind(QComboBox(self), controller.scissors_operation)
        self.slab = bind(QCheckBox("Slab", self), controller.scissors_slab)
        self.slab_mm = bind(QDoubleSpinBox(self), controller.slab_mm)
        for widget, prop in ((self.locality, controller.seed_locality), (self.roi_margin, controller.roi_margin_mm),
                             (self.tolerance, controller.trace_tolerance_hu), (self.confidence_k, controller.confidence_k)):
            widget.setObjectName(next(n for n, p in controller.settings.items() if p is prop))  # the catalogue's name
        grid = QGridLayout(self)
        grid.setContentsMargins(0, 0, 0, 0)
        grid.addWidget(QLabel("Seeds", self), 0, 0)
        grid.addWidget(self.seed_kind, 0, 1)
        grid.addWidget(QLabel("ROI +", self), 0, 2)
        grid.addWidget(self.roi_margin, 0, 3)
        grid.addWidget(QLabel("Locality", self), 1, 0)
        grid.addWidget(self.locality, 1, 1, 1, 2)
        grid.addWidget(self.locality_label, 1, 3)
        grid.addWidget(self.existing_seeds, 2, 0, 1, 2)
        grid.addWidget(self.apply_button, 2, 2)
        grid.addWidget(self.cancel_button, 2, 3)
        grid.addWidget(QLabel("Trace ±", self), 3, 0)
        grid.addWidget(self.tolerance, 3, 1)
        grid.addWidget(QLabel("3D k", self), 3, 2)
        grid.addWidget(self.confidence_k, 3, 3)
        grid.addWidget(self.scissors, 4, 0, 1, 2)
        grid.addWidget(self.slab, 4, 2)
        grid.addWidget(self.slab_mm, 4, 3)
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
