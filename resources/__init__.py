"""Packaged resources (icons, colour tables, the starter model), importable as ``medseg.resources``.

Load files with ``importlib.resources.files("medseg.resources")``, never by relative path.
"""
