"""``medseg demo``: the app with the built-in synthetic demo study loaded.

Without a display (no $DISPLAY/$WAYLAND_DISPLAY and QT_QPA_PLATFORM unset) it does not
abort: it renders offscreen, saves a screenshot, prints where, and exits 0.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("demo", help="start the desktop app with the built-in demo study")
    parser.add_argument("--screenshot", metavar="PNG", help="save a screenshot once the study is shown")
    parser.add_argument("--quit-after", metavar="SECONDS", type=float, help="close the window after this many seconds")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.gui.app import display_available, run_gui

    screenshot, headless = args.screenshot, not display_available()
    if headless:
        os.environ["QT_QPA_PLATFORM"] = "offscreen"
        screenshot = screenshot or str(Path(tempfile.gettempdir()) / "medseg-demo.png")
        print("medseg: no display found; rendering the demo offscreen instead.", flush=True)
    code = run_gui(demo=True, screenshot=screenshot, quit_after=args.quit_after)
    if headless and code == 0:
        print(f"medseg: the demo study was loaded; screenshot: {screenshot}")
    return code
