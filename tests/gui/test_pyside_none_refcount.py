"""PySide6 6.12.0 on CPython 3.11 dropped a reference to None on every void Qt call (1000 calls of
QTimer.stop(): None's refcount down by 1000), so a long session (scrolling, turning the 3D view) ended
in "Fatal Python error: none_dealloc". The pinned PySide6 must not: this guards every upgrade."""

from __future__ import annotations

import subprocess
import sys
import textwrap

VOID_CALLS = textwrap.dedent("""
    import sys
    from PySide6.QtCore import QCoreApplication, QTimer
    app = QCoreApplication([])
    timer = QTimer()
    before = sys.getrefcount(None)
    for _ in range(1000):
        timer.stop()
    print(before - sys.getrefcount(None), flush=True)
    for _ in range(200_000):  # far more than None's references in a fresh process
        timer.stop()
    print("survived", flush=True)
""")


def test_void_qt_calls_leave_none_alone():
    # A fresh interpreter: the test process's own None references must not hide a leak.
    run = subprocess.run([sys.executable, "-c", VOID_CALLS], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0 and run.stdout.split() == ["0", "survived"], run.stdout + run.stderr
