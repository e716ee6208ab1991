"""``medseg gui [PATH]``: the desktop app (also what plain ``medseg`` starts)."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
    from medseg.cli._console import thread_count

    parser = subparsers.add_parser("gui", help="start the desktop app (optionally opening a study)")
    parser.add_argument("path", nargs="?", help="DICOM folder, zip, DICOMDIR, or NIfTI/NRRD/MHA file to open")
    parser.add_argument("--labels", metavar="FILE", help="a segmentation to open over the study: a label map "
                        "(NIfTI/NRRD/MHA, with its .labels.json) or a DICOM SEG")
    parser.add_argument("--screenshot", metavar="PNG", help="save a screenshot once the study is shown, then quit")
    parser.add_argument("--quit-after", metavar="SECONDS", type=float, help="close the window after this many seconds")
    parser.add_argument("--threads", type=thread_count, metavar="N",
                        help="CPU threads for this session (default: the app's setting, else every core medseg may use)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.gui.app import display_available, run_gui

    if args.labels:  # refused before a window opens
        from pathlib import Path

        from medseg.errors import MedsegError

        if not args.path:
            raise MedsegError("--labels needs a study to open them over", hint="medseg gui STUDY --labels FILE")
        if not Path(args.labels).is_file():
            raise MedsegError("no such segmentation file", path=args.labels)
    if not display_available() and not args.screenshot:
        from medseg.errors import DisplayError

        raise DisplayError("no display found (no $DISPLAY or $WAYLAND_DISPLAY)",
                           hint="use `medseg demo` or --screenshot for an offscreen rendering, "
                                "or the command-line tools (`medseg --help`)")
    if not display_available():
        import os

        os.environ["QT_QPA_PLATFORM"] = "offscreen"
    return run_gui(args.path, screenshot=args.screenshot, quit_after=args.quit_after, labels=args.labels)
