"""Keep ``None`` alive under PySide6 6.12 on CPython 3.11.

Every call of a Qt method that returns nothing (``update()``, ``setToolTip()``,
``processEvents()``...) made from Python through PySide6 6.12.0 on CPython 3.11 takes one
reference from ``None`` that it never gave (measured: 1000 calls, refcount of None down by
1000; CPython 3.12 made None immortal, which hides it there). The app starts with a few
thousand to tens of thousands of references to None, so a long session of scrolling or of
turning the 3D view (each mouse move calls ``update()``) ends in "Fatal Python error:
none_dealloc". Until PySide6 is fixed, None gets a reserve of references at start-up.
"""

from __future__ import annotations

import ctypes
import sys

RESERVE = 1 << 40  # a trillion void calls


def keep_none_alive() -> None:
    if sys.version_info >= (3, 12) or getattr(keep_none_alive, "done", False):
        return  # immortal there
    refcount = ctypes.c_ssize_t.from_address(id(None))  # ob_refcnt is a PyObject's first field
    refcount.value += RESERVE
    keep_none_alive.done = True  # type: ignore[attr-defined]
