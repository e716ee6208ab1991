"""Console helpers shared by the commands (not a command itself: the leading underscore
keeps it out of command discovery)."""

from __future__ import annotations

import errno
import re
import sys

from medseg.progress import Progress, ProgressCallback

# Control characters (but tab, newline, carriage return), DEL, the C1 controls and the Unicode
# direction overrides: from a file's text (a Series Description with ANSI escape sequences, a
# patient name with a NUL) they would reach the terminal and act there (clear it, retitle it,
# reverse the text that follows). They are printed escaped, e.g. "\x1b".
_CONTROLS = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def escape_controls(text: str) -> str:
    """``text`` with every control character written as an escape (``\x1b``, ``\u202e``)."""
    return _CONTROLS.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else
                         f"\\u{ord(m.group()):04x}", text)


class EscapingStream:
    """A text stream that escapes control characters on their way to ``stream`` (stdout, stderr):
    everything a command prints, whatever its source, reaches the terminal as text."""

    def __init__(self, stream) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(escape_controls(text))
        return len(text)

    def writelines(self, lines) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str):
        return getattr(self._stream, name)


def os_error_message(error: OSError) -> str:
    """An OSError (a path too long, a full disk, no permission) in the user's words, naming the file."""
    where = str(error.filename) if error.filename is not None else ""
    if len(where) > 120:
        where = where[:60] + "…" + where[-40:] + f" ({len(where)} characters)"
    reasons = {errno.ENAMETOOLONG: "the file name or path is longer than this file system allows",
               errno.ENOSPC: "the disk is full", errno.EDQUOT: "the disk quota is used up",
               errno.EACCES: "permission denied", errno.EROFS: "the file system is read-only"}
    reason = reasons.get(error.errno or 0, error.strerror or str(error))
    return f"{where}: {reason}" if where else reason


def progress_printer() -> ProgressCallback:
    """A progress callback printing to stderr once per 10 % step or change of stage, so a
    long job shows it is alive without flooding the terminal (stdout stays for results/JSON)."""
    last = {"decile": -1, "stage": ""}

    def show(progress: Progress) -> None:
        decile = int(progress.fraction * 10)
        if progress.stage != last["stage"] or decile != last["decile"]:
            last.update(decile=decile, stage=progress.stage)
            print(f"[{progress.fraction:4.0%}] {progress.text}", file=sys.stderr, flush=True)

    return show


def whole_number(minimum: int = 1):
    """An argparse type: a whole number of at least ``minimum`` (``--tile-batch -5`` was a traceback)."""
    def parse(text: str) -> int:
        import argparse

        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < minimum:
            raise argparse.ArgumentTypeError(f"{value} is less than {minimum}")
        return value
    parse.__name__ = "whole number"
    return parse


def number(low: float | None = None, high: float | None = None, *, above: float | None = None):
    """An argparse type: a finite number in [low, high] (or above ``above``); NaN and infinity are refused."""
    def parse(text: str) -> float:
        import argparse
        import math

        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
        if not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text} is not a finite number")
        if above is not None and not value > above:
            raise argparse.ArgumentTypeError(f"{value:g} must be more than {above:g}")
        if (low is not None and value < low) or (high is not None and value > high):
            bounds = [f"at least {low:g}" if low is not None else "", f"at most {high:g}" if high is not None else ""]
            raise argparse.ArgumentTypeError(f"{value:g} is outside {low:g}–{high:g}" if low is not None and
                                             high is not None else f"{value:g} must be {' and '.join(b for b in bounds if b)}")
        return value
    parse.__name__ = "number"
    return parse


def device_name(text: str) -> str:
    """An argparse type: a device name; an empty one (``--device ""``, a script's unset variable) is refused,
    not taken as auto."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("the device name is empty: give auto (the default), cpu, cuda, or one "
                                         "`medseg devices` lists")
    return text


def thread_count(text: str) -> int:
    """An argparse type: a thread count from 1 to :func:`medseg.threads.most_threads` (``--threads 100000``
    crashed the process and starved every other one of the machine's threads)."""
    import argparse

    from medseg import threads

    value = whole_number(1)(text)
    problem = threads.too_many(value)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return value


# The arguments that name a file or folder. An empty one (``""``, a script's unset variable) became
# Path(""), the working folder: reported as ".", read as a dataset, or written into as a mesh folder.
INPUT_PATHS = {"inputs", "path", "image", "labels", "segmentation", "dataset", "folder", "model", "base", "data_root",
               "check_image", "key_file", "reid_mapping", "inflate_from", "interactive_model"}
OUTPUT_PATHS = {"output", "out", "csv", "save_json", "work_dir", "profile", "pacs_cache", "screenshot"}


def refuse_empty_paths(parser, args) -> None:
    """Refuse an empty file or folder argument by its name, before any work (a MedsegError)."""
    from medseg.errors import MedsegError

    command = parser._subparsers._group_actions[0].choices.get(getattr(args, "command", None)) \
        if parser._subparsers is not None else None
    for action in command._actions if command is not None else ():
        if action.dest not in INPUT_PATHS | OUTPUT_PATHS:
            continue
        given = getattr(args, action.dest, None)
        values = given if isinstance(given, list) else [given]
        if not any(isinstance(value, str) and not value.strip() for value in values):
            continue
        name = "/".join(action.option_strings) or (action.metavar if isinstance(action.metavar, str) else
                                                   action.dest.upper())
        if action.dest in OUTPUT_PATHS:
            raise MedsegError(f"no output given ({name} is an empty path)", hint="name the file or folder to write")
        raise MedsegError(f"{name} is an empty path: no file or folder was named",
                          hint="give the file or folder to read")


def add_spacing_option(parser) -> None:
    """``--spacing X Y Z``: the true voxel spacing when the file's is missing or implausible."""
    parser.add_argument("--spacing", nargs=3, type=number(above=0), metavar=("X", "Y", "Z"),
                        help="voxel spacing in mm to use instead of the file's (a spacing outside 0.05-50 mm is "
                             "refused unless given here)")


def findings_json(volume) -> list[dict]:
    """The load findings (assumed spacing, replaced voxels, regularised grid, ...) for --json."""
    return [{"kind": f.kind, "message": f.message} for f in volume.meta.findings]


def print_findings(volume, file=None) -> None:
    """Every load finding, one line each: the numbers that follow depend on them."""
    for finding in volume.meta.findings:
        print(f"finding [{finding.kind}]: {finding.message}", file=file or sys.stderr)


def add_threads_option(parser) -> None:
    """``--threads N`` for a command that computes; without it every core this process may use (medseg.threads)."""
    parser.add_argument("--threads", type=thread_count, metavar="N",
                        help="CPU threads to compute with (default: every core this process may use; "
                             "`medseg devices` shows how many)")
    parser.set_defaults(computes=True)
