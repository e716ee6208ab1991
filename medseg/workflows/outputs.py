"""Check an output before the work: one file, or one folder of files, named by the user.

Every command that writes something other than a segmentation (those go through
:mod:`medseg.workflows.save`) asks here, so the rules — a writable folder, not one of the inputs,
not someone else's file unless forced — are the I/O layer's (:mod:`medseg.io.output_paths`,
:mod:`medseg.io.atomic`), said once.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable, Iterable

from medseg.core.volume import Volume
from medseg.errors import SaveError
from medseg.io.atomic import append_synced, atomic_path, atomic_write_text  # the one atomic write and append
from medseg.io.owner_lock import LockHeld, OwnerLock  # the one lock (a batch's run lock)


def check_output_file(output: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), *,
                      force: bool = False, ours: Callable[[Path], bool] | None = None,
                      option: str = "the output", suffix: str | None = None, writable: bool = False) -> Path:
    """``output`` may be written: the suffix asked for (``suffix``, e.g. ".csv"), none of ``inputs``, not a
    file this command did not write (unless ``force``; ``ours`` says which it did), its folder writable
    (``writable``)."""
    from medseg.io.atomic import check_writable
    from medseg.io.output_paths import check_output

    if suffix is not None and not str(output).lower().endswith(suffix):
        raise SaveError(f"{option} must name a {suffix} file", path=output, hint=f"e.g. {option} statistics{suffix}")
    path = check_output(output, inputs, force=force, ours=ours, option=option)
    if writable:
        check_writable(path)
    return path


def check_not_a_source(output: str | os.PathLike, image: Volume, option: str = "the output") -> None:
    """``output`` is none of the files ``image`` was read from (known only once it is loaded)."""
    from medseg.io.output_paths import check_output, source_paths

    check_output(output, source_paths(image), force=True, option=option)


def check_writable(path: str | os.PathLike) -> Path:
    """Fail now, not after the work, when ``path``'s folder is missing or read-only."""
    from medseg.io.atomic import check_writable as writable

    return writable(path)


def output_folder(folder: str | os.PathLike, probe: str = "probe") -> Path:
    """A folder for many files: created when its parent exists, checked writable (``probe``: a file name
    of the kind that will be written, e.g. "probe.stl")."""
    folder = Path(folder)
    if not folder.exists() and folder.parent.is_dir():
        try:
            folder.mkdir()
        except OSError as error:
            raise SaveError(f"cannot create the folder ({error.strerror})", path=folder) from error
    check_writable(folder / probe)
    return folder


__all__ = ["check_output_file", "check_not_a_source", "check_writable", "output_folder", "atomic_path",
           "atomic_write_text", "append_synced", "LockHeld", "OwnerLock"]

