"""Console helpers shared by the commands (not a command itself: the leading underscore
keeps it out of command discovery)."""

from __future__ import annotations

import sys

from medseg.progress import Progress, ProgressCallback


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


def add_spacing_option(parser) -> None:
    """``--spacing X Y Z``: the true voxel spacing when the file's is missing or implausible."""
    parser.add_argument("--spacing", nargs=3, type=float, metavar=("X", "Y", "Z"),
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
    """``--threads N`` for a command that computes; without it the free cores are used (medseg.threads)."""
    parser.add_argument("--threads", type=int, metavar="N",
                        help="CPU threads to compute with (default: the cores other processes leave free)")
    parser.set_defaults(computes=True)
