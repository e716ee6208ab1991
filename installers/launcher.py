"""Entry script of the frozen app (PyInstaller runs this; the source tree uses ``medseg.cli:main``).

``freeze_support`` lets child processes that torch or multiprocessing start (DataLoader
workers, spawn) re-enter the frozen executable as workers instead of as a second medseg.
"""

import multiprocessing
import os
import sys

if __name__ == "__main__":
    # No ONNX Runtime telemetry (medseg/__init__.py sets it too; this covers anything imported first).
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    # The windowed executable (medseg-gui on Windows/macOS) has no console: sys.stdout and
    # sys.stderr are None there, and the app's progress and status prints would fail.
    for stream in ("stdout", "stderr"):
        if getattr(sys, stream) is None:
            setattr(sys, stream, open(os.devnull, "w", encoding="utf-8"))
    multiprocessing.freeze_support()
    from medseg.cli import main

    sys.exit(main())
