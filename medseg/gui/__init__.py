"""The desktop application: Qt widgets, views and workers (the only package that imports PySide6)."""
