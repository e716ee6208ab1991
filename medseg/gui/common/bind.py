"""``bind(widget, prop)``: couple a widget to a Qt-free Property, both ways, without feedback loops.

The widget shows the property's value, range and enabled state; a user change sets the
property; a property change (from code, another widget, a test) updates the widget with
its signals blocked, so neither side echoes the other (ITK-SNAP's coupling, napari's
``connect_setattr``). ``follow_setting`` is the same coupling to a field of the app's settings model
(``medseg.settings``). Supported: QDoubleSpinBox, QSpinBox, QCheckBox, QRadioButton/QAbstractButton
(checkable, for bool), QComboBox (for choices).
"""

from __future__ import annotations

from typing import Any, Callable, TypeVar

import shiboken6
from PySide6.QtWidgets import QAbstractButton, QComboBox, QDoubleSpinBox, QSpinBox, QWidget

from medseg.edit.properties import Property
from medseg.settings import SETTINGS, Settings


def _quiet(widget: QWidget, apply) -> None:
    blocked = widget.blockSignals(True)
    try:
        apply()
    finally:
        widget.blockSignals(blocked)


W = TypeVar("W", bound=QWidget)


def bind(widget: W, prop: Property) -> W:
    if isinstance(widget, (QDoubleSpinBox, QSpinBox)):
        if prop.minimum is not None and prop.maximum is not None:
            widget.setRange(prop.minimum, prop.maximum)
        if isinstance(widget, QDoubleSpinBox):
            widget.setDecimals(prop.decimals)
        if prop.step:
            if isinstance(widget, QDoubleSpinBox):
                widget.setSingleStep(prop.step)
            else:
                widget.setSingleStep(int(prop.step))  # a whole-number setting's step
        if prop.unit:
            widget.setSuffix(f" {prop.unit}")
        widget.setValue(prop.value)
        widget.valueChanged.connect(prop.set)
        prop.changed.connect(lambda v: _quiet(widget, lambda: widget.setValue(v)))
    elif isinstance(widget, QComboBox):
        choices = list(prop.choices or ())
        if widget.count() == 0:
            widget.addItems([str(c) for c in choices])
        widget.setCurrentIndex(choices.index(prop.value))
        widget.currentIndexChanged.connect(lambda i: prop.set(choices[i]) if 0 <= i < len(choices) else None)
        prop.changed.connect(lambda v: _quiet(widget, lambda: widget.setCurrentIndex(choices.index(v))))
    elif isinstance(widget, QAbstractButton):
        widget.setCheckable(True)
        widget.setChecked(bool(prop.value))
        widget.toggled.connect(lambda checked: prop.set(bool(checked)))
        prop.changed.connect(lambda v: _quiet(widget, lambda: widget.setChecked(bool(v))))
    else:
        raise TypeError(f"bind() does not know {type(widget).__name__}")
    if prop.label and not widget.toolTip():
        widget.setToolTip(prop.label)
    widget.setEnabled(prop.enabled)
    prop.enabled_changed.connect(widget.setEnabled)
    return widget


def follow_setting(widget: QWidget, name: str, show: Callable[[Any], None], settings: Settings = SETTINGS) -> None:
    """Call ``show(value)`` with the widget's signals blocked whenever the setting ``name`` changes (the other half
    of a binding: the widget's own signal assigns the setting). The observer goes with the widget: a closed
    window's panels must not hear, or hold, the settings of the next one."""

    def changed(setting: str, value: Any) -> None:
        if setting != name:
            return
        if not shiboken6.isValid(widget):
            drop()
            return
        _quiet(widget, lambda: show(value))

    def drop(*_args: Any) -> None:
        if changed in settings.changed.callbacks():
            settings.changed.disconnect(changed)

    settings.changed.connect(changed)
    widget.destroyed.connect(drop)
