"""Small observable values for tool options (ITK-SNAP's property models): a value, its allowed
range or choices, and whether it is enabled. The GUI binds widgets to them with one helper
(``medseg.gui.common.bind``); tests and scripts set them directly. Setting a value clamps it to
the range and notifies only on a real change, so two-way binding cannot loop.
"""

from __future__ import annotations

from typing import Any, Generic, Sequence, TypeVar

from medseg.edit.events import Event

T = TypeVar("T")


class Property(Generic[T]):
    def __init__(self, value: T, minimum: Any = None, maximum: Any = None, choices: Sequence[T] | None = None,
                 label: str = "", unit: str = "", step: float | None = None, decimals: int = 1) -> None:
        self.minimum, self.maximum = minimum, maximum
        self.choices = tuple(choices) if choices is not None else None
        self.label, self.unit, self.step, self.decimals = label, unit, step, decimals
        self._enabled = True
        self._value = self._clean(value)
        self.changed = Event()  # (value)
        self.enabled_changed = Event()  # (enabled)

    def _clean(self, value: Any) -> T:
        if self.choices is not None and value not in self.choices:
            raise ValueError(f"{value!r} is not one of {self.choices}")
        if self.minimum is not None and value < self.minimum:
            value = self.minimum
        if self.maximum is not None and value > self.maximum:
            value = self.maximum
        return value

    @property
    def value(self) -> T:
        return self._value

    @value.setter
    def value(self, value: T) -> None:
        self.set(value)

    def set(self, value: T) -> None:
        value = self._clean(value)
        if value != self._value:
            self._value = value
            self.changed.emit(value)

    @property
    def enabled(self) -> bool:
        return self._enabled

    @enabled.setter
    def enabled(self, enabled: bool) -> None:
        if bool(enabled) != self._enabled:
            self._enabled = bool(enabled)
            self.enabled_changed.emit(self._enabled)
