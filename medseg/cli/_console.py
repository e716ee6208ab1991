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
