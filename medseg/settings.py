"""The app's settings: one typed, evented, Qt-free model that owns what a user chooses for the whole app.

:data:`SETTINGS` holds the CPU threads, the compute device, the model Segment runs, the Interactive AI
tool's options, the recent studies and the folders the file dialogs start in. Everything reads it; it
changes only by assigning a field (``SETTINGS.threads = 4``), which checks the value's type and range
and tells every observer (``SETTINGS.changed.connect(callback)``, called with the field's name and its new
value) when, and only when, the value really changed, so two-way bindings cannot loop.

Who fills it, and who only reads it:

- the command line fills it from its flags for one session (``medseg --threads N``:
  :meth:`Settings.from_command_line`); a field set so is *session-only*, never saved and never replaced
  by the saved one;
- the desktop app binds its widgets to it and keeps it between sessions: ``medseg.gui.common.app_settings``
  is the one module that knows QSettings (what is saved, under which key); nothing else reads QSettings;
- ``workflows`` and the runtime read it: the thread budget (:mod:`medseg.threads`) follows ``threads``
  through :func:`apply_threads`, which observes :data:`SETTINGS` (napari's evented models, ITK-SNAP's
  property models: the view never writes to the runtime itself).

Folders chosen by the environment (``$MEDSEG_MODELS``, ``$MEDSEG_DATA_DIR``, ...) are read where they are
used (:mod:`medseg.app_dirs`), each time, so that a changed variable holds at once.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from typing import Any

from medseg import threads as thread_budget
from medseg.core.events import Event
from medseg.errors import MedsegError

DEFAULT_INTERACTIVE_MODEL = "nninteractive/v1.0"
INTERACTIVE_RUNTIMES = ("auto", "torch", "openvino", "openvino-bf16")
INTERACTIVE_MODES = ("exact", "small-first")  # small-first: InteractiveSession(small_first=True), off by default
MAX_RECENT = 10

_CHOICES: dict[str, tuple[str, ...]] = {"interactive_runtime": INTERACTIVE_RUNTIMES,
                                        "interactive_mode": INTERACTIVE_MODES}


@dataclass(eq=False)
class Settings:
    """What the user chose for the whole app. Assigning a field checks it and tells the observers."""

    threads: int = 0  # CPU threads for every job of the app; 0: automatic (every core medseg may use)
    device: str = "auto"  # where the Segment panel runs a model (the device list offers only what is present)
    segment_model: str | None = None  # the model Segment runs: a catalogue id or a folder; None: the built-in starter
    interactive_model: str = DEFAULT_INTERACTIVE_MODEL  # the model the Interactive AI tool asks
    interactive_runtime: str = "auto"  # its runtime: auto (measured), torch, openvino, openvino-bf16
    interactive_mode: str = "exact"  # exact, or small-first (a small region first, refined where it grew)
    recent_studies: tuple[str, ...] = ()  # File ▸ Recent studies, newest first
    last_folder: str = ""  # where the Open dialogs start ("": the home folder)
    results_folder: str = ""  # where the user last saved a result ("": beside the study)
    # Fields the command line set for this session: the saved value does not replace them and they are not saved.
    session_only: set[str] = field(default_factory=set, repr=False)
    changed: Event = field(default_factory=Event, repr=False)  # (name, value)

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FIELDS:
            value = _checked(name, value)
            if "changed" not in self.__dict__:  # __init__: not evented yet
                object.__setattr__(self, name, value)
                return
            if value == getattr(self, name):
                return
            object.__setattr__(self, name, value)
            self.changed.emit(name, value)
            return
        object.__setattr__(self, name, value)

    def update(self, **values: Any) -> None:
        """Several fields at once, each checked before any changes (one bad value changes nothing)."""
        for name, value in values.items():
            if name not in _FIELDS:
                raise MedsegError(f"there is no setting {name!r}")
            _checked(name, value)
        for name, value in values.items():
            setattr(self, name, value)

    def values(self) -> dict[str, Any]:
        """Every setting by name (what a settings file would hold)."""
        return {name: getattr(self, name) for name in _FIELDS}

    def from_command_line(self, threads: int | None = None) -> None:
        """This session's command line: ``--threads N`` (session-only); without it, what an earlier command line
        of this process set is dropped (automatic, or the app's kept setting once a window loads it)."""
        if threads is not None:
            self.session_only.add("threads")
            self.threads = threads
        elif "threads" in self.session_only:
            self.session_only.discard("threads")
            self.threads = 0

    def choose(self, name: str, value: Any) -> None:
        """The user chose ``value`` (a widget): the app's setting from now on, kept, even where the command line
        had set this session's."""
        self.session_only.discard(name)
        setattr(self, name, value)

    def add_recent_study(self, path: str) -> tuple[str, ...]:
        """``path`` first in the recent studies (once), at most :data:`MAX_RECENT`; returns them."""
        self.recent_studies = ((path,) + tuple(p for p in self.recent_studies if p != path))[:MAX_RECENT]
        return self.recent_studies

    def reset(self) -> None:
        """Every field to its default, nothing session-only (a new session; tests)."""
        self.session_only.clear()
        defaults = Settings()
        for name in _FIELDS:
            setattr(self, name, getattr(defaults, name))


def _field_types() -> dict[str, Any]:
    hints = typing.get_type_hints(Settings)
    return {f.name: hints[f.name] for f in dataclasses.fields(Settings) if f.name not in ("session_only", "changed")}


def _checked(name: str, value: Any) -> Any:
    """``value`` as the field holds it; a value of the wrong type or out of range is refused in words."""
    kind = _FIELD_TYPES[name]
    if kind is int:
        if isinstance(value, bool) or not isinstance(value, int):
            raise MedsegError(f"the setting {name} must be a whole number, got {value!r}")
    elif kind is str:
        if not isinstance(value, str):
            raise MedsegError(f"the setting {name} must be text, got {value!r}")
    elif kind == (str | None):
        if value is not None and not isinstance(value, str):
            raise MedsegError(f"the setting {name} must be text or nothing, got {value!r}")
        value = value or None  # "" and None both mean "none chosen"
    elif kind == tuple[str, ...]:
        if isinstance(value, str) or not all(isinstance(item, str) for item in value):
            raise MedsegError(f"the setting {name} must be a list of texts, got {value!r}")
        value = tuple(value)
    if name in _CHOICES and value not in _CHOICES[name]:
        raise MedsegError(f"the setting {name} must be one of {', '.join(_CHOICES[name])}, got {value!r}")
    if name == "threads":
        if value < 0:
            raise MedsegError(f"the setting threads must be 0 (automatic) or more, got {value}")
        if thread_budget.too_many(value, "the CPU threads setting"):
            raise MedsegError(thread_budget.too_many(value, "the CPU threads setting"))
    return value


_FIELD_TYPES = _field_types()
_FIELDS = tuple(_FIELD_TYPES)

SETTINGS = Settings()


def apply_threads(settings: Settings = SETTINGS, count: thread_budget.CoreCount | None = None) -> int:
    """The process's thread budget from ``settings``: its thread count (``--threads`` when the command line
    gave it, else the app's setting), or ``count`` (batch: this process's share of the machine's cores), or
    automatic (OMP_NUM_THREADS, else every usable core). Returns the budget."""
    source = thread_budget.FROM_OPTION if "threads" in settings.session_only else thread_budget.FROM_SETTING
    return thread_budget.configure(settings.threads or None, source, count=count)


def _runtime_follows(name: str, _value: Any) -> None:
    if name == "threads":
        apply_threads(SETTINGS)


SETTINGS.changed.connect(_runtime_follows)

__all__ = ["DEFAULT_INTERACTIVE_MODEL", "INTERACTIVE_MODES", "INTERACTIVE_RUNTIMES", "MAX_RECENT", "SETTINGS",
           "Settings", "apply_threads"]
