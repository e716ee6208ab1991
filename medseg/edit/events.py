"""The observer list of the Qt-free models: its home is :mod:`medseg.core.events` (the settings model, below
``edit``, uses it too); the editing modules import it from here as before."""

from medseg.core.events import Event

__all__ = ["Event"]
