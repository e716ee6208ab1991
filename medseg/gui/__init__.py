"""The desktop application: Qt widgets, views and workers (the only package that imports PySide6)."""

from medseg.gui.none_guard import keep_none_alive

keep_none_alive()  # before any PySide6 call: see none_guard
