"""Where a command may write: never over one of its inputs, never over a file it did not make.

``segment ct.nii.gz -o ct.nii.gz`` used to replace the CT with its label map, ``segment
FOLDER -o FOLDER/01.dcm`` a source slice with the SEG, and ``stats --csv ct.nii.gz`` the CT
with a table, each with exit code 0. Every command that writes calls :func:`check_output`
with everything it reads (the image argument, ``--labels``, and once loaded every file of
the source series: :func:`source_paths`):

- an output that is an input (the same file, also through another name or a link), or
  whose sidecar is one, is refused, even with ``--force``;
- an existing file is replaced only when it is what this output option writes and medseg
  made it (``ours``: a label map with its medseg sidecar, a DICOM SEG, a statistics table);
  anything else needs ``--force`` (the GUI's save dialog asks instead).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from medseg.errors import SaveError
from medseg.io.dicom_sources import split_ref


def source_paths(volume) -> list[Path]:
    """The files a loaded Volume was read from (a zip member counts as its archive)."""
    return list(dict.fromkeys(Path(split_ref(str(ref))[0]) for ref in volume.meta.source_files))


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def check_not_an_input(output: str | os.PathLike, inputs: Iterable[str | os.PathLike | None],
                       option: str = "the output") -> None:
    """Refuse an output that is one of ``inputs`` (a zip member's archive counts as the input)."""
    output = Path(output)
    for item in inputs:
        if item is None:
            continue
        source = Path(split_ref(str(item))[0])
        if _same_file(output, source) or (not source.is_dir() and output.resolve() == source.resolve()):
            raise SaveError(f"{option} is also an input of this command; writing it would destroy the input",
                            path=output, hint="choose another file name")


def check_output(output: str | os.PathLike, inputs: Iterable[str | os.PathLike | None] = (), *,
                 force: bool = False, ours: Callable[[Path], bool] | None = None,
                 option: str = "the output", extra_outputs: Iterable[str | os.PathLike] = ()) -> Path:
    """Check ``output`` (and files written with it, e.g. its sidecar) before any work is done."""
    if not str(output).strip():
        raise SaveError(f"no output file given ({option} is empty)", hint="name the file to write")
    output = Path(output)
    inputs = list(inputs)
    check_name_length(output, "the output")
    for path in (Path(p) for p in extra_outputs):
        check_companion_length(output, path)
    if output.is_dir():
        raise SaveError(f"{option} is a folder, not a file name", path=output, hint="name a file inside it")
    for path in (output, *(Path(p) for p in extra_outputs)):
        check_not_an_input(path, inputs, option)
    if output.exists() and not force and not (ours is not None and ours(output)):
        raise SaveError(f"{option} exists and is not a file this command wrote and nobody changed since (it may hold "
                        "someone's edits); it would be replaced", path=output,
                        hint="choose another name, or add --force to replace it")
    return output


PATH_MAX = 4096  # Linux; what open() accepts in one path


def check_name_length(path: Path, what: str = "the output") -> None:
    """A file name or path longer than the file system allows is refused now, in words (ENAMETOOLONG
    came as a traceback, or as a message blaming the folder and disk space)."""
    from medseg.io.atomic import name_max

    whole = len(os.fsencode(os.path.abspath(path)))
    if whole >= PATH_MAX:
        raise SaveError(f"the path of {what} is {whole} bytes long; at most {PATH_MAX - 1} are allowed",
                        hint="choose a shorter path")
    folder = path.parent if str(path.parent) else Path(".")
    try:
        limit = name_max(folder) if folder.is_dir() else 255
    except OSError:
        limit = 255
    length = len(path.name.encode())
    if length > limit:
        raise SaveError(f"the name of {what} is {length} bytes long; this file system allows {limit}",
                        path=path if len(str(path)) < 300 else None, hint="choose a shorter name")


def check_companion_length(output: Path, companion: Path) -> None:
    """A file written beside the output (a label map's sidecar) whose name the file system would refuse:
    said with both names and the longest output name that works (a 255-byte label map's 260-byte sidecar)."""
    try:
        check_name_length(companion, "a file written with it")
    except SaveError as error:
        limit = _name_limit(companion)
        length, own = len(companion.name.encode()), len(output.name.encode())
        if length <= limit or companion.parent != output.parent:
            raise
        what = "its sidecar (the label names and colours, written beside it)" \
            if companion.name.endswith(".labels.json") else "a file written beside it"
        raise SaveError(f"the output's name is {own} bytes long, and {what}, {companion.name}, would be {length} "
                        f"bytes long; this file system allows {limit}", path=output if len(str(output)) < 300 else None,
                        hint=f"choose an output name of at most {own - (length - limit)} bytes") from error


def _name_limit(path: Path) -> int:
    from medseg.io.atomic import name_max

    folder = path.parent if str(path.parent) else Path(".")
    try:
        return name_max(folder) if folder.is_dir() else 255
    except OSError:
        return 255


__all__ = ["check_companion_length", "check_name_length", "check_not_an_input", "check_output", "source_paths"]
