"""What a panel or controller may ask of the window it sits in: tell the user something, show an error.

Panels bind to the document, the view state and ``workflows``; for the two things only the window can do
they get an object with this shape (the main window is one), never the window's own internals.
"""

from __future__ import annotations

from typing import Protocol


class WindowServices(Protocol):
    def notify(self, text: str, level: str = "info", log_text: str | None = None) -> None:
        """A result the user should read (saved, opened, segmented): kept in the window's message area.
        ``log_text``: what the log gets instead, without file or patient names."""

    def show_error(self, error: BaseException) -> None:
        """What went wrong: a dialog (a cancel is a notice; a model for another modality, a question)."""
