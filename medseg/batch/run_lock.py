"""One batch run per output folder.

Two runs on one folder (the same command started twice, or a rerun to resume while the first still works)
would plan the same cases, segment each twice and race on its output and on the table. The run's first
process holds ``OUTDIR/.medseg-batch/run.lock`` (:class:`medseg.io.owner_lock.OwnerLock`: the OS's lock, with
its pid, host and start time written inside) from before planning to after the table is merged; a second run
is refused at once with a message naming the first. The OS releases the lock of a run that was killed
(even with SIGKILL), so the next run takes it over and resumes: the cases the killed run recorded are kept
(medseg.batch.table), the rest are done once.
"""

from __future__ import annotations

from pathlib import Path

from medseg.batch.table import state_folder
from medseg.errors import MedsegError
from medseg.workflows.outputs import LockHeld, OwnerLock

LOCK_NAME = "run.lock"


def run_lock_path(output_dir: Path) -> Path:
    return state_folder(output_dir) / LOCK_NAME


def claim_output(output_dir: Path) -> OwnerLock:
    """Hold the output folder for this run (:attr:`OwnerLock.stale`: a killed run's record, when one was
    left), or raise a MedsegError naming the run that holds it."""
    try:
        return OwnerLock.acquire(run_lock_path(output_dir), "medseg batch")
    except LockHeld as held:
        who = held.owner.describe() if held.owner is not None else "a process that is starting"
        raise MedsegError(f"another medseg batch is writing to this output folder: {who}", path=output_dir,
                          hint="wait until it has finished (or stop it: Ctrl+C, and run this command again to "
                               "resume), or choose another output folder") from None
