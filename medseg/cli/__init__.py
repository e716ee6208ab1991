"""Command line: ``medseg <command> ...``.

Each command lives in its own module in this package and exposes
``register(subparsers)``, which adds its sub-parser and sets ``func`` (a callable taking
the parsed args and returning an exit code). Commands are discovered, so adding one
never touches this file.
"""

from __future__ import annotations

import argparse
import importlib
import os
import pkgutil
import sys

from medseg import __version__
from medseg.errors import MedsegError

# Explicit so that frozen builds (PyInstaller) know every command module.
COMMAND_MODULES = sorted(m.name for m in pkgutil.iter_modules(__path__) if not m.name.startswith("_"))


def build_parser() -> argparse.ArgumentParser:
    from medseg.workflows.edit_operations import register_operations

    register_operations()  # the model-backed editing operations: `medseg edit --segment` is built from them
    parser = argparse.ArgumentParser(prog="medseg", description="CT segmentation with a resolution-adaptive U-Net.")
    parser.add_argument("--version", action="version", version=f"medseg {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMAND_MODULES:
        module = importlib.import_module(f"{__name__}.{name}")
        module.register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        # No command: the desktop app, if the GUI command is available.
        if "gui" in COMMAND_MODULES:
            args = parser.parse_args(["gui", *(argv or [])])
        else:
            parser.print_help()
            return 2
    # What was typed, for provenance (``medseg train`` records its own command line).
    args.argv = list(argv) if argv is not None else sys.argv[1:]
    from medseg.cli._console import EscapingStream, os_error_message, refuse_empty_paths

    # Text from files (series descriptions, paths, reasons) reaches the terminal escaped.
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = EscapingStream(sys.stdout), EscapingStream(sys.stderr)
    try:
        refuse_empty_paths(parser, args)
        if getattr(args, "threads", None) is not None or getattr(args, "computes", False):
            from medseg.settings import SETTINGS, apply_threads

            SETTINGS.from_command_line(threads=getattr(args, "threads", None))  # this session's, never saved
            apply_threads(SETTINGS)  # before torch & co start their pools (a command that computes: automatic too)
        return int(args.func(args) or 0)
    except MedsegError as error:
        print(f"medseg: error: {error}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("medseg: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `medseg info --json | head`: the reader left, nothing is wrong
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except OSError as error:  # the machine's limits, met where no check names them: said, not a traceback
        print(f"medseg: error: {os_error_message(error)}", file=sys.stderr)
        return 1
    finally:
        sys.stdout, sys.stderr = streams


if __name__ == "__main__":
    sys.exit(main())
