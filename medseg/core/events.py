"""A minimal observer list for the Qt-free models (the document, tool options, the app's settings):
``connect(callback)``, ``emit(*args)``."""

from __future__ import annotations

from typing import Any, Callable


class Event:
    def __init__(self) -> None:
        self._callbacks: list[Callable[..., Any]] = []

    def connect(self, callback: Callable[..., Any], *, first: bool = False) -> None:
        """``first``: run before the callbacks connected so far (a model that derives its own state
        from another's event, e.g. the view state from a new image, so widgets then read both current)."""
        if first:
            self._callbacks.insert(0, callback)
        else:
            self._callbacks.append(callback)

    def disconnect(self, callback: Callable[..., Any]) -> None:
        self._callbacks.remove(callback)

    def callbacks(self) -> list[Callable[..., Any]]:
        """The observers connected now, in the order they are called."""
        return list(self._callbacks)

    def emit(self, *args: Any) -> None:
        for callback in list(self._callbacks):
            callback(*args)
