"""The one atomic write: temp file in the same folder, fsync the file, rename, fsync the folder.

A crash, a kill or a full disk at any moment leaves either the old file or the new one,
never half of either. Every writer of user data (images, label maps, segmentations,
model packages, checkpoints, journals' snapshots, dataset cases) goes through here.

- :func:`atomic_path` yields a temporary path for writers that want a file name
  (SimpleITK, safetensors, highdicom's ``save_as``); the file is committed on a clean exit.
- :func:`atomic_open` yields an open binary handle.
- :func:`atomic_write_bytes` / :func:`atomic_write_text` for data already in memory.

A failure raises :class:`~medseg.errors.MedsegError` naming the destination, and the
destination is untouched.

Before the rename the temporary file is checked (:mod:`medseg.io.file_checks`: the bytes
its header declares are there, a gzip trailer matches, a zip's members pass their CRC,
...), because not every writer reports a short write: ITK's NIfTI writer prints
"wrote only 0 of N bytes" and returns as if it had succeeded, and the rename would then
replace the user's previous file with a broken one. A writer may add its own check
(``verify``); a handle from :func:`atomic_open` must hold every byte written to it.

A process killed while writing (SIGKILL, power loss) leaves its hidden temporary file
(up to the size of the file). Each writer holds an advisory lock on its temporary file while
it writes; the first write into a folder in a process removes the temporaries there whose
lock nobody holds any more and that are older than a few seconds (files of older versions,
which took no lock, once they are an hour old).

``sync=False`` keeps the all-or-nothing rename but skips the two fsyncs: for files that
can be fetched again and whose completeness is checked, not trusted (the PACS cache
records each instance's size in its completion marker), where an fsync per file cost
three times the network time of a CT slice.
"""

from __future__ import annotations

import errno
import os
import re
import tempfile
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, Callable, Iterator

from medseg.errors import SaveError
from medseg.io.file_checks import IncompleteFile
from medseg.io.file_types import check_complete

try:
    import fcntl
except ImportError:  # Windows: stale temporaries are recognised by age alone
    fcntl = None  # type: ignore[assignment]

# ".<target name>.<8 random characters from mkstemp><suffix>"
_TEMPORARY = re.compile(r"^\.(?P<target>.+)\.[a-z0-9_]{8}(?P<suffix>(?:\.[A-Za-z0-9]+)*)$")
STALE_AFTER_S = 10.0  # a temporary's lock is taken right after it is created
UNLOCKED_STALE_AFTER_S = 3600.0  # no lock to ask (older versions, Windows): an hour without a change
_cleaned: set[str] = set()
_cleaned_lock = threading.Lock()


def _errno_of(error: BaseException) -> int | None:
    """The OS error number, also when a writer (pydicom) re-raised it with its own message."""
    seen = error
    while seen is not None:
        if isinstance(seen, OSError) and seen.errno:
            return seen.errno
        match = re.search(r"\[Errno (\d+)\]", str(seen))
        if match:
            return int(match.group(1))
        seen = seen.__cause__ or seen.__context__
    return None


def _reason(error: OSError) -> str:
    number = _errno_of(error)
    return os.strerror(number) if number else (error.strerror or str(error).splitlines()[0][:200])


def _hint(error: OSError) -> str:
    number = _errno_of(error)
    if number in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return "the disk is full or the file is too large; free some space or choose another folder"
    if number in (errno.EACCES, errno.EPERM, errno.EROFS):
        return "the folder is not writable; choose another folder"
    if number == errno.ENOENT:
        return "the folder no longer exists; choose another folder"
    return "check free disk space and write permission"


def fsync_folder(folder: Path) -> None:
    """Make a rename inside ``folder`` durable (no-op where folders cannot be opened)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _file_mode(path: Path) -> int:
    """The replaced file's mode, else what open() would give a new file (0666 less the umask)."""
    try:
        return path.stat().st_mode & 0o7777
    except OSError:
        pass
    umask = 0o022
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                umask = int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o666 & ~umask


def _is_temporary(name: str) -> bool:
    match = _TEMPORARY.match(name)
    if match is None:
        return False
    target, suffix = match["target"], match["suffix"]
    return suffix in (".tmp", ".probe") or (bool(suffix) and target.lower().endswith(suffix.lower()))


def _lock(fd: int) -> bool:
    """Take the advisory lock that marks a temporary file as being written (False: someone holds it)."""
    if fcntl is None:
        return True
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return False
    return True


def clean_stale_temporaries(folder: str | os.PathLike, now: float | None = None) -> list[Path]:
    """Remove what killed writers left in ``folder``: temporary files and folders whose lock nobody holds,
    and old folders a fallback swap set aside once their folder is back in place; returns what was removed."""
    import shutil

    removed: list[Path] = []
    now = time.time() if now is None else now
    try:
        entries = [e for e in os.scandir(folder) if e.name.startswith(".")]
    except OSError:
        return removed
    for entry in entries:
        try:
            is_folder = entry.is_dir(follow_symlinks=False)
            age = now - entry.stat(follow_symlinks=False).st_mtime
            if age < STALE_AFTER_S:
                continue
            if is_folder and entry.name.endswith(".old") and _is_temporary(entry.name[:-len(".old")] + ".tmp"):
                target = _TEMPORARY.match(entry.name[:-len(".old")] + ".tmp")["target"]  # type: ignore[index]
                if os.path.exists(os.path.join(folder, target)):  # else recover_folder puts it back
                    shutil.rmtree(entry.path, ignore_errors=True)
                    removed.append(Path(entry.path))
                continue
            if not _is_temporary(entry.name) or not (is_folder or entry.is_file(follow_symlinks=False)):
                continue
            fd = os.open(entry.path, os.O_RDONLY)
            try:
                unlocked = _lock(fd) if fcntl is not None else age > UNLOCKED_STALE_AFTER_S
                if unlocked:
                    if is_folder:
                        shutil.rmtree(entry.path, ignore_errors=True)
                    else:
                        os.unlink(entry.path)
                    removed.append(Path(entry.path))
            finally:
                os.close(fd)
        except OSError:
            continue
    return removed


def _clean_once(folder: Path) -> None:
    key = os.path.abspath(folder)
    with _cleaned_lock:
        if key in _cleaned:
            return
        _cleaned.add(key)
    clean_stale_temporaries(folder)


_RANDOM_CHARACTERS = 8  # what mkstemp/mkdtemp add between prefix and suffix


def name_max(folder: str | os.PathLike) -> int:
    """The longest file name (in bytes) the file system holding ``folder`` allows (255 almost everywhere)."""
    try:
        return int(os.pathconf(folder, "PC_NAME_MAX"))
    except (OSError, ValueError, AttributeError):
        return 255


def temporary_affixes(path: Path, suffix: str) -> tuple[str, str]:
    """(prefix, suffix) for mkstemp beside ``path``: ".<name>.XXXXXXXX<suffix>", the name shortened (its
    suffix kept, so the leftovers of a kill are still recognised) where the whole would pass the file
    system's limit: a legal 255-character output name was refused because its temporary name was longer."""
    name = path.name
    room = name_max(path.parent if str(path.parent) else ".") - 2 - _RANDOM_CHARACTERS - len(suffix.encode())
    if len(name.encode()) > room:
        keep = name[len(name) - len(suffix):] if suffix and name.lower().endswith(suffix.lower()) else ""
        head = name[: len(name) - len(keep)].encode()[: max(1, room - len(keep.encode()))]
        name = head.decode("utf-8", "ignore") + keep
    return f".{name}.", suffix


def check_writable(path: str | os.PathLike) -> Path:
    """Fail now, not after an hour of work, when ``path`` cannot be written (folder missing or read-only)."""
    path = Path(path)
    folder = path.parent if str(path.parent) else Path(".")
    if not folder.is_dir():
        raise SaveError("the folder does not exist", path=folder, hint="create it or choose another folder")
    try:
        prefix, suffix = temporary_affixes(path, ".probe")
        fd, probe = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=folder)
    except OSError as error:
        raise SaveError(f"cannot write here ({error.strerror})", path=folder, hint=_hint(error)) from error
    os.close(fd)
    os.unlink(probe)
    return path


def _verify(temp: Path, path: Path, verify: Callable[[Path], None] | None, by_format: bool) -> None:
    """The temporary file must be whole before it may replace ``path``."""
    try:
        if by_format:
            check_complete(temp, path.name)
        if verify is not None:
            verify(temp)
    except IncompleteFile as error:
        raise SaveError(f"the file was not written completely ({error}); the previous file is unchanged", path=path,
                        hint="the disk is probably full; free some space or choose another folder") from error


@contextmanager
def atomic_path(path: str | os.PathLike, suffix: str | None = None, *, sync: bool = True,
                verify: Callable[[Path], None] | None = None, _by_format: bool = True) -> Iterator[Path]:
    """Yield a temporary file path beside ``path``; on a clean exit it replaces ``path``.

    ``suffix`` (default: ``path``'s full suffix, e.g. ``.nii.gz``) lets writers that pick the
    format from the name see the right one. The temporary file is checked before the rename
    (by ``path``'s format, then ``verify(temp)``, which raises IncompleteFile when it is not whole).
    """
    path = Path(path)
    if suffix is None:
        suffix = "".join(path.suffixes) or ".tmp"
    _clean_once(path.parent)
    try:
        prefix, suffix = temporary_affixes(path, suffix)
        fd, temp_name = tempfile.mkstemp(prefix=prefix, suffix=suffix, dir=path.parent)
        _lock(fd)  # held until the rename: this temporary is being written, not left behind
        try:
            os.fchmod(fd, _file_mode(path))  # mkstemp makes 0600: a saved file must be as readable as any other
        except (OSError, AttributeError):
            pass
        if fcntl is None:  # Windows cannot rename a file that is open: no lock to hold there
            os.close(fd)
            fd = -1
    except OSError as error:
        raise SaveError(f"cannot write ({error.strerror})", path=path, hint=_hint(error)) from error
    temp = Path(temp_name)
    try:
        yield temp
        if sync:
            with open(temp, "rb+") as handle:
                os.fsync(handle.fileno())
        _verify(temp, path, verify, _by_format)
        os.replace(temp, path)
        if sync:
            fsync_folder(path.parent)
    except OSError as error:
        temp.unlink(missing_ok=True)
        raise SaveError(f"cannot write ({_reason(error)})", path=path, hint=_hint(error)) from error
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    finally:
        if fd >= 0:
            os.close(fd)  # releases the lock


@contextmanager
def atomic_open(path: str | os.PathLike, *, sync: bool = True) -> Iterator[IO[bytes]]:
    """Yield a binary handle whose contents replace ``path`` on a clean exit (all bytes on disk)."""
    written: list[int] = []

    def all_bytes_there(temp: Path) -> None:
        if temp.stat().st_size < written[0]:
            raise IncompleteFile(f"{temp.stat().st_size} of {written[0]} bytes are on disk")

    # Python raises on a short write, so the byte count is all this path needs checking (the
    # PACS cache writes thousands of files through here; reading each back would cost more).
    with atomic_path(path, sync=sync, verify=all_bytes_there, _by_format=False) as temp:
        with open(temp, "wb") as handle:
            yield handle
            handle.flush()
            written.append(handle.tell())


def atomic_write_bytes(path: str | os.PathLike, data: bytes, *, sync: bool = True) -> Path:
    with atomic_open(path, sync=sync) as handle:
        handle.write(data)
    return Path(path)


def atomic_write_text(path: str | os.PathLike, text: str, encoding: str = "utf-8") -> Path:
    return atomic_write_bytes(path, text.encode(encoding))


# --- folders -----------------------------------------------------------------------------------------
# A folder of files written together (a model package, a de-identified series, the demo study) is
# written into a hidden sibling, checked, and then swapped in. On Linux the swap is one
# renameat2(RENAME_EXCHANGE): a reader (or a kill at any instant) sees the old folder or the whole new
# one. Where the kernel or the file system cannot exchange, the old folder is first renamed aside
# (".<name>.<random>.old"), then the new one in; a kill between the two leaves the old folder aside,
# and the next write of that folder (or recover_folder) puts it back before anything else.

_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(first: Path, second: Path) -> bool:
    """Swap two paths in one step (Linux renameat2); False where the system cannot."""
    import ctypes
    import sys

    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        renameat2 = libc.renameat2
    except (OSError, AttributeError):
        return False
    renameat2.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) == 0:
        return True
    number = ctypes.get_errno()
    if number in (errno.EINVAL, errno.ENOSYS, errno.EOPNOTSUPP):
        return False  # an old kernel, or a file system without exchange (some FUSE, NFS)
    raise OSError(number, os.strerror(number), str(second))


def _aside(path: Path) -> list[Path]:
    """Where the fallback swap left ``path``'s old folder (".<name>.<random>.old")."""
    try:
        return sorted(p for p in path.parent.iterdir() if p.is_dir() and p.name.startswith(f".{path.name}.")
                      and p.name.endswith(".old") and _is_temporary(p.name[:-len(".old")] + ".tmp"))
    except OSError:
        return []


def recover_folder(path: str | os.PathLike) -> bool:
    """Put back a folder a killed fallback swap left aside (no new folder had replaced it); True if it did."""
    path = Path(path)
    if path.exists():
        return False
    for old in _aside(path):
        try:
            os.replace(old, path)
        except OSError:
            continue
        fsync_folder(path.parent)
        return True
    return False


def _sync_tree(folder: Path) -> None:
    for root, _dirs, files in os.walk(folder):
        for name in files:
            with open(os.path.join(root, name), "rb+") as handle:
                os.fsync(handle.fileno())
        fsync_folder(Path(root))


def _verify_folder(temp: Path, path: Path, verify: Callable[[Path], None] | None) -> None:
    """Every file of the new folder must be whole (by its format), then the writer's own check."""
    try:
        for root, _dirs, files in os.walk(temp):
            for name in files:
                check_complete(os.path.join(root, name))
        if verify is not None:
            verify(temp)
    except IncompleteFile as error:
        raise SaveError(f"the folder was not written completely ({error}); the previous folder is unchanged",
                        path=path, hint="the disk is probably full; free some space or choose another folder") from error


@contextmanager
def atomic_folder(path: str | os.PathLike, *, verify: Callable[[Path], None] | None = None) -> Iterator[Path]:
    """Yield an empty temporary folder beside ``path``; on a clean exit it replaces ``path`` whole.

    The one way to replace a folder of files written together (a model package, a de-identified
    series, the demo study): a reader, a crash or a kill at any moment sees the old folder or the
    complete new one. Before the swap every file is fsynced and checked by its format
    (:func:`medseg.io.file_types.check_complete`), then ``verify(temp)`` runs (it raises
    IncompleteFile when the folder is not what the writer meant); after it the parent folder is
    fsynced. The files inside need no atomic write of their own. A failure raises SaveError (or the
    writer's own error) and leaves ``path`` as it was.
    """
    import shutil

    path = Path(path)
    recover_folder(path)
    _clean_once(path.parent)
    try:
        prefix, suffix = temporary_affixes(path, ".tmp")
        temp = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=path.parent))
        lock = os.open(temp, os.O_RDONLY)
    except OSError as error:
        raise SaveError(f"cannot write ({error.strerror})", path=path, hint=_hint(error)) from error
    _lock(lock)  # held until the swap: this temporary is being written, not left behind
    old: Path | None = None
    try:
        yield temp
        _sync_tree(temp)
        _verify_folder(temp, path, verify)
        if path.exists() and _exchange(temp, path):
            old = temp  # now holds the previous folder
        else:
            if path.exists():
                prefix, suffix = temporary_affixes(path, ".old")
                old = Path(tempfile.mkdtemp(prefix=prefix, suffix=suffix, dir=path.parent))
                os.rmdir(old)
                os.replace(path, old)
            os.replace(temp, path)
        fsync_folder(path.parent)
    except BaseException as error:
        if old is not None and old != temp and not path.exists():
            os.replace(old, path)  # the rename in failed: the old folder goes back
            old = None
        if temp.exists() and old != temp:
            shutil.rmtree(temp, ignore_errors=True)
        if isinstance(error, OSError):
            raise SaveError(f"cannot write ({_reason(error)})", path=path, hint=_hint(error)) from error
        raise
    finally:
        os.close(lock)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)


# --- what a whole-file replace cannot be ------------------------------------------------------------
# An append-only journal (the autosave journal, a batch's per-process table and re-identification records)
# must have each record on disk before the work goes on; replacing the whole file per record would cost its
# size per record. Its records carry their own framing (a length and CRC, or a line each) so that a reader
# skips a torn last one. A download's part file keeps every byte received for a resume (its checksum, not a
# rename, says it is whole); a lock's record is written into the very file its holder keeps locked.


def sync_file(file: IO[Any] | int) -> None:
    """Put what was written to ``file`` (a handle, flushed first, or a descriptor) on the disk."""
    if isinstance(file, int):
        os.fsync(file)
        return
    file.flush()
    os.fsync(file.fileno())


def append_synced(handle: IO[bytes], *pieces: bytes | memoryview, cut_torn: bool = False) -> None:
    """Append ``pieces`` to an open journal (opened "ab"), each written whole, and fsync: on the disk when this
    returns. ``cut_torn``: after an OSError the file is cut back to where this record began (an unbuffered
    handle), so that the next record does not follow a torn one. The OSError propagates: the journal says
    in its own words what could not be recorded."""
    start = handle.seek(0, os.SEEK_END) if cut_torn else 0
    try:
        for piece in pieces:
            data = memoryview(piece).cast("B")
            while data:  # an unbuffered handle may take part of a piece
                data = data[handle.write(data) or 0:]
        sync_file(handle)
    except OSError:
        if cut_torn:
            try:
                os.ftruncate(handle.fileno(), start)
            except OSError:
                pass  # the reader skips the torn record
        raise


def rename_durably(source: str | os.PathLike, target: str | os.PathLike) -> Path:
    """Rename a finished file or folder to ``target`` (a name nobody reads yet, or one that goes at once) and
    make the rename survive a power cut. For a whole that is checked before it is named (a model version
    staged and hashed; the record naming it is then written by :func:`atomic_path`)."""
    target = Path(target)
    os.replace(source, target)
    fsync_folder(target.parent)
    return target


__all__ = ["SaveError", "atomic_path", "atomic_open", "atomic_write_bytes", "atomic_write_text",
           "atomic_folder", "recover_folder", "check_writable", "clean_stale_temporaries", "fsync_folder",
           "sync_file", "append_synced", "rename_durably"]
