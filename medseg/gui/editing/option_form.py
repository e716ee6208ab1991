"""The tools' option widgets, built from what the tools declare (:mod:`medseg.edit.effects`): each effect's
:class:`~medseg.edit.effects.base.Form` lays out cells, each field is bound to the Property of its setting or
option, and the Property (made from the operation's or the effect's
:class:`~medseg.edit.operation.Parameter`) gives the widget its range, unit, step, choices and tip. So a tool's
options appear with it, and no widget is written by hand for one.

A number is a spin box (a slider when the form asks), a yes/no a check box, a choice a list; a readout shows a
value as text; an action is a button that runs the effect's method of that name, enabled while the effect has
work pending (Apply, Cancel); a custom cell holds a widget the panel supplies (the Interactive AI row, which says
what a prompt costs).
"""

from __future__ import annotations

from typing import Callable

from PySide6.QtCore import QObject, Qt, Signal
from PySide6.QtWidgets import (
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QGridLayout,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QSlider,
    QWidget,
)

from medseg.edit.effects import EFFECTS
from medseg.edit.effects.base import Cell, Effect, Form
from medseg.edit.interaction import ToolController
from medseg.edit.properties import Property
from medseg.gui.common.bind import bind

SLIDER_STEPS_PER_UNIT = 2  # a slider moves in half units (the seed locality: 0.5 HU/mm)


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


def field_widget(cell: Cell, prop: Property, parent: QWidget) -> QWidget:
    """The widget of a setting or option, by what its Property holds."""
    if prop.choices is not None:
        widget: QWidget = bind(QComboBox(parent), prop)
    elif isinstance(prop.value, bool):
        widget = bind(QCheckBox(cell.text, parent), prop)
    elif cell.widget == "slider":
        widget = bind_slider(QSlider(Qt.Orientation.Horizontal, parent), prop)
    else:
        widget = bind(QDoubleSpinBox(parent), prop)
    widget.setObjectName(cell.name)  # the setting's or option's one name (tests and the panel find it by it)
    return widget


def _readout(label: QLabel, prop: Property, pattern: str) -> QLabel:
    def show(value) -> None:
        label.setText(pattern.format(float(value)))

    prop.changed.connect(show)
    show(prop.value)
    return label


class OptionForms(QObject):
    """Every effect's option forms as widgets made in ``parent`` (the Edit panel lays them out): :attr:`groups`
    by form name, :attr:`widgets` by setting or option name, :attr:`buttons` by (effect, action). ``custom``: the
    widgets of custom cells; ``before``: what to do before an effect's action runs, by (effect, action) (Apply waits for the preview)."""

    done = Signal()  # an action finished: the disabled button must not hand the focus to a box below it

    def __init__(self, controller: ToolController, parent: QWidget, custom: dict[str, QWidget] | None = None,
                 before: dict[tuple[str, str], Callable[[], object]] | None = None) -> None:
        super().__init__(parent)
        self.controller, self.custom, self.before = controller, dict(custom or {}), dict(before or {})
        self.groups: dict[str, QWidget] = {}
        self.widgets: dict[str, QWidget] = {}
        self.buttons: dict[tuple[str, str], QPushButton] = {}
        self.focus_order: list[QWidget] = []  # the fields and buttons, form by form, as the eye reads them
        for name, effect in EFFECTS.items():
            for form in effect.forms:
                self.groups[form.name] = self._build(form, name, parent)
            if any(form.actions for form in effect.forms):
                controller.effects[name].layer_changed.connect(lambda _box=None, n=name: self._sync(n))
                self._sync(name)

    def _build(self, form: Form, effect: str, parent: QWidget) -> QWidget:
        if len(form.cells) == 1 and form.cells[0].kind == "custom":
            return self.custom[form.cells[0].name]  # a widget of its own: it is the group
        group = QWidget(parent)
        layout = QHBoxLayout(group) if form.row else QGridLayout(group)
        layout.setContentsMargins(0, 0, 0, 0)
        for cell in form.cells:
            widget = self._cell(cell, effect, group)
            if isinstance(layout, QGridLayout):
                layout.addWidget(widget, cell.row, cell.column, cell.rows, cell.columns)
            else:
                layout.addWidget(widget)
        if isinstance(layout, QHBoxLayout):
            layout.addStretch(1)
        else:
            for column, factor in form.stretch:
                layout.setColumnStretch(column, factor)
        return group

    def _cell(self, cell: Cell, effect: str, group: QWidget) -> QWidget:
        settings = self.controller.settings
        if cell.kind == "text":
            return QLabel(cell.text, group)
        if cell.kind == "field":
            self.widgets[cell.name] = field_widget(cell, settings[cell.name], group)
            self.focus_order.append(self.widgets[cell.name])
            return self.widgets[cell.name]
        if cell.kind == "readout":
            return _readout(QLabel(group), settings[cell.name], cell.text)
        if cell.kind == "action":
            button = QPushButton(cell.text, group)
            button.setToolTip(cell.tip)
            button.clicked.connect(lambda _=False, e=effect, a=cell.name: self.run(e, a))
            self.buttons[effect, cell.name] = button
            self.focus_order.append(button)
            return button
        if cell.kind == "custom":
            return self.custom[cell.name]
        raise ValueError(f"an options form has no cell of kind {cell.kind!r}")

    def effect(self, name: str) -> Effect:
        return self.controller.effects[name]

    def run(self, effect: str, action: str):
        """Run an effect's action (Apply, Cancel) as its button does."""
        if (effect, action) in self.before:
            self.before[effect, action]()  # Apply writes what the preview shows, the last stroke's included
        result = getattr(self.effect(effect), action)()
        self._sync(effect)
        self.done.emit()
        return result

    def _sync(self, effect: str) -> None:
        active = self.effect(effect).active
        for (owner, _action), button in self.buttons.items():
            if owner == effect:
                button.setEnabled(active)
