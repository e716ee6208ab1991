"""Unpack a downloaded or packed zip without trusting it.

Refused, before anything is written: a member whose path leaves the target (``../``, an absolute
path, a drive letter, a backslash path), a link or any other non-regular file, more members or
more bytes than the caps allow, a compression ratio only a zip bomb has. While writing, a member
may not grow past the size it declares. Nothing inside is run: checkpoints are converted later
by the safe loader (medseg.model.safe_checkpoint).
"""

from __future__ import annotations

import os
import stat
import zipfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from medseg.errors import ModelError, ResourceLimitError, UnsafeModelError
from medseg.progress import CancelToken

BLOCK = 1 << 20


@dataclass(frozen=True)
class UnpackLimits:
    max_members: int = 10_000
    max_total_bytes: int = 64 << 30  # the largest nnU-Net ensembles are a few GB
    max_ratio: float = 200.0  # weights barely compress; JSON ~10x; a bomb 1000x and more


DEFAULT_LIMITS = UnpackLimits()


def member_path(info: zipfile.ZipInfo, archive: Path) -> PurePosixPath:
    """The member's relative path, or UnsafeModelError when it could land outside the target."""
    name = info.filename
    if "\\" in name or name.startswith("/") or (len(name) > 1 and name[1] == ":") or "\x00" in name:
        raise UnsafeModelError(f"the zip holds {name!r}, a path outside the folder it unpacks into; refused",
                               path=archive)
    path = PurePosixPath(name)
    if ".." in path.parts:
        raise UnsafeModelError(f"the zip holds {name!r}, a path outside the folder it unpacks into; refused",
                               path=archive)
    mode = info.external_attr >> 16  # the high word: Unix file type and permissions
    kind = stat.S_IFMT(mode)
    if kind == stat.S_IFLNK:
        raise UnsafeModelError(f"the zip holds a link ({name!r}); model files are never links; refused", path=archive)
    if kind not in (0, stat.S_IFREG, stat.S_IFDIR):
        raise UnsafeModelError(f"the zip holds {name!r}, which is not a plain file; refused", path=archive)
    return path


def check_archive(archive: Path, limits: UnpackLimits = DEFAULT_LIMITS) -> list[tuple[zipfile.ZipInfo, PurePosixPath]]:
    """Every member checked (paths, kinds, caps) before a byte is written."""
    try:
        with zipfile.ZipFile(archive) as opened:
            infos = opened.infolist()
    except (zipfile.BadZipFile, OSError) as error:
        raise ModelError(f"not a readable zip: {error}", path=archive) from error
    if len(infos) > limits.max_members:
        raise ResourceLimitError(f"the zip holds {len(infos)} members, more than a model has ({limits.max_members})",
                                 path=archive)
    total = sum(info.file_size for info in infos)
    if total > limits.max_total_bytes:
        raise ResourceLimitError(f"the zip would unpack to {total / 2**30:.1f} GiB, more than the "
                                 f"{limits.max_total_bytes / 2**30:.0f} GiB a model may take", path=archive)
    checked = []
    for info in infos:
        path = member_path(info, archive)
        if info.file_size > (1 << 20) and info.file_size > limits.max_ratio * max(info.compress_size, 1):
            raise ResourceLimitError(f"{info.filename} would expand {info.file_size / max(info.compress_size, 1):.0f}"
                                     " times: a zip bomb, not a model; refused", path=archive)
        checked.append((info, path))
    return checked


def safe_extract(archive: Path, target: Path, limits: UnpackLimits = DEFAULT_LIMITS,
                 cancel: CancelToken | None = None) -> list[Path]:
    """Extract ``archive`` into ``target`` (which must exist); returns the files written."""
    checked = check_archive(archive, limits)
    root = target.resolve()
    written = []
    with zipfile.ZipFile(archive) as opened:
        for info, relative in checked:
            destination = root.joinpath(*relative.parts)
            if os.path.commonpath([root, destination.resolve()]) != str(root):
                raise UnsafeModelError(f"{info.filename} would land outside the target; refused", path=archive)
            if info.is_dir():
                destination.mkdir(parents=True, exist_ok=True)
                continue
            if cancel is not None:
                cancel.raise_if_cancelled()
            destination.parent.mkdir(parents=True, exist_ok=True)
            copied = 0
            try:
                with opened.open(info) as source, open(destination, "xb") as out:
                    for block in iter(lambda: source.read(BLOCK), b""):
                        copied += len(block)
                        if copied > info.file_size:
                            raise ResourceLimitError(f"{info.filename} holds more than the size it declares; refused",
                                                     path=archive)
                        out.write(block)
            except zipfile.BadZipFile as error:
                raise ModelError(f"damaged zip member {info.filename}: {error}", path=archive) from error
            except FileExistsError as error:
                raise UnsafeModelError(f"the zip holds {info.filename} twice; refused", path=archive) from error
            except OSError as error:
                if error.errno in (28, 122):  # ENOSPC, EDQUOT
                    raise ResourceLimitError("the disk is full", path=target,
                                             hint="free some space or set MEDSEG_MODELS to a larger disk") from error
                raise
            written.append(destination)
    return written
