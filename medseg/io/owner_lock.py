"""A lock one process holds on a file while it works, with who holds it written inside.

Two windows on one study, two batch runs on one output folder: the second must be told which process has it
(its id, its machine, since when), and a holder that died (kill -9, a power cut) must not block anyone for
ever. The lock is the operating system's (``fcntl.flock``; ``msvcrt.locking`` on Windows), which the kernel
releases when its process ends however it ends. The holder writes a record into the file (pid, host, start
time, what it does); a lock file whose record names a process while nobody holds its lock is *stale*: its
holder ended without closing. Whoever takes the lock next learns that (:attr:`OwnerLock.stale`) and can say so.

filelock (which torch brings along) is not used: it opens the file with ``O_TRUNC`` before it waits for the
lock, which erases the holder's record that the waiter wants to show.

A clean release removes the file. A waiter that opened the file before it was removed would otherwise lock a
file nobody else sees, so after locking, the file must still be the one at the path (same inode), else it
tries again.
"""

from __future__ import annotations

import datetime
import json
import os
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from medseg.errors import MedsegError
from medseg.io.atomic import sync_file

_WINDOWS_BYTE = 1 << 30  # msvcrt locks a byte range: one far past the record, so readers can still read it


@dataclass(frozen=True)
class Owner:
    pid: int
    host: str
    started: float  # seconds since the epoch
    what: str = ""  # what the holder does ("editing", "medseg batch"), for the message

    def describe(self) -> str:
        """"process 1234 on ws-7 (editing, since 15:20:07 on 2026-12-07)"."""
        since = datetime.datetime.fromtimestamp(self.started).strftime("%H:%M:%S on %Y-%m-%d")
        what = f"{self.what}, " if self.what else ""
        return f"process {self.pid} on {self.host} ({what}since {since})"

    @classmethod
    def from_text(cls, text: str) -> Owner | None:
        try:
            data = json.loads(text)
            return cls(int(data["pid"]), str(data["host"]), float(data["started"]), str(data.get("what", "")))
        except (ValueError, TypeError, KeyError, AttributeError):
            return None  # empty (the holder has not written it yet) or not ours


class LockHeld(MedsegError):
    """Another live process holds the lock; ``owner`` is its record (None when it has not written it yet)."""

    def __init__(self, message: str, owner: Owner | None, path: str | Path | None = None, hint: str | None = None):
        self.owner = owner
        super().__init__(message, path=path, hint=hint)


def _try_lock(fd: int) -> bool:
    if sys.platform == "win32":  # pragma: no cover - exercised on Windows CI only
        import msvcrt

        os.lseek(fd, _WINDOWS_BYTE, os.SEEK_SET)
        try:
            msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    except OSError as error:
        raise MedsegError(f"cannot lock {error.filename or 'the lock file'} ({error.strerror})") from error
    return True


def _locked_soon(fd: int) -> bool:
    """The lock within a few tries: :func:`state` takes it for an instant to look, which must not read as held."""
    for attempt in range(5):
        if _try_lock(fd):
            return True
        time.sleep(0.01 * (attempt + 1))
    return False


def _unlock(fd: int) -> None:
    if sys.platform == "win32":  # pragma: no cover
        import msvcrt

        os.lseek(fd, _WINDOWS_BYTE, os.SEEK_SET)
        msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        return
    import fcntl

    fcntl.flock(fd, fcntl.LOCK_UN)


def _read(fd: int) -> str:
    os.lseek(fd, 0, os.SEEK_SET)
    return os.read(fd, 4096).decode("utf-8", "replace")


def read_owner(path: str | Path) -> Owner | None:
    """The record in the lock file (whether or not its holder is alive), None when there is none."""
    try:
        return Owner.from_text(Path(path).read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None


class OwnerLock:
    """Held from :meth:`acquire` until :meth:`release` (or the process's end)."""

    def __init__(self, path: Path, fd: int, owner: Owner, stale: Owner | None) -> None:
        self.path = path
        self._fd: int | None = fd
        self.owner = owner
        self.stale = stale  # the record a holder that died left behind (None: the file was new or empty)

    @classmethod
    def acquire(cls, path: str | Path, what: str = "") -> OwnerLock:
        """Take the lock at ``path`` now or raise :class:`LockHeld` naming the process that holds it."""
        path = Path(path)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise MedsegError(f"cannot create the folder of the lock ({error.strerror})", path=path.parent) from error
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as error:
                raise MedsegError(f"cannot open the lock file ({error.strerror})", path=path) from error
            try:
                if not _locked_soon(fd):
                    raise LockHeld("is in use", Owner.from_text(_read(fd)), path=path)
                if sys.platform != "win32":
                    try:
                        same = os.fstat(fd).st_ino == os.stat(path).st_ino
                    except FileNotFoundError:
                        same = False
                    if not same:  # released (and removed) between our open and our lock: take the new file
                        os.close(fd)
                        continue
                stale = Owner.from_text(_read(fd))
                owner = Owner(os.getpid(), socket.gethostname(), time.time(), what)
                record = json.dumps(owner.__dict__).encode()
                os.ftruncate(fd, 0)
                os.lseek(fd, 0, os.SEEK_SET)
                os.write(fd, record)
                sync_file(fd)  # written in place: the lock is on this very file, a replaced one would not hold it
                return cls(path, fd, owner, stale)
            except BaseException:
                try:
                    os.close(fd)
                except OSError:
                    pass
                raise

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Let go; the file goes too (nothing stale is left by a clean end)."""
        fd, self._fd = self._fd, None
        if fd is None:
            return
        try:
            if sys.platform == "win32":  # pragma: no cover - an open file cannot be removed there: empty it
                os.ftruncate(fd, 0)
                _unlock(fd)
            else:
                Path(self.path).unlink(missing_ok=True)  # while still locked: a waiter then retries on a new file
        except OSError:
            pass  # a read-only folder, a removed one: the kernel releases the lock with the descriptor anyway
        finally:
            os.close(fd)

    def abandon(self) -> None:
        """Let go as a killed process does: the lock is free, its record stays (stale). For a crash
        simulated inside one process, as tests do."""
        fd, self._fd = self._fd, None
        if fd is not None:
            os.close(fd)

    def __enter__(self) -> OwnerLock:
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()

    def __del__(self) -> None:  # a holder dropped without release(): the lock must not outlive it
        try:
            self.release()
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


def state(path: str | Path) -> tuple[str, Owner | None]:
    """("free" | "held" | "stale", the record): without taking the lock for longer than the look."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDWR)
    except FileNotFoundError:
        return "free", None
    except OSError:
        return "free", read_owner(path)
    try:
        owner = Owner.from_text(_read(fd))
        if not _try_lock(fd):
            return "held", owner
        _unlock(fd)
        return ("stale" if owner is not None else "free"), owner
    finally:
        os.close(fd)
