"""The autosave session's writer thread (:mod:`medseg.edit.journal`): session.json and large records off the GUI thread.

Label table changes and large journal records do not wait for the disk: this thread writes them
in the order given, so a burst of table changes costs the GUI no fsync and a Segment result's
record no freeze. The journal's module text says why the order keeps every edit recoverable.
"""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any, Callable

from medseg.errors import MedsegError
from medseg.io.atomic import atomic_write_text


class SessionWriter:
    """Writes ``session.json`` atomically, either now (:meth:`write_now`: the generation switch) or soon
    from its own thread (:meth:`request`: the latest record wins, earlier ones not yet written are skipped).
    The thread also encodes the JSON (117 labels with their codes: tens of milliseconds in Python's
    encoder), so a table change costs the GUI thread only the copy of the table.

    The same thread appends the journal's large records (:meth:`queue`), in the order given and never
    skipped, each after the table requested before it.

    A write never overtakes a later one: the thread takes the pending text only while it holds the
    write lock, and :meth:`write_now` drops whatever is pending under that lock. A failed background
    write is raised (a MedsegError naming the file) by the next call on the GUI's side.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._writing = threading.Lock()  # one write at a time, in the order the texts were given
        self._state = threading.Condition()
        self._pending: dict[str, Any] | None = None
        self._requested = 0  # texts given so far
        self._written = 0  # of those, the newest on disk (or skipped for a newer one)
        self._error: BaseException | None = None
        self._stopping = False
        self._thread: threading.Thread | None = None
        self._records: list[Callable[[], None]] = []  # journal appends queued, oldest first
        self._queued = 0  # appends given so far
        self._appended = 0  # of those, done (or dropped by a discarding stop)

    def request(self, record: dict[str, Any]) -> None:
        """Write ``record`` soon (the caller no longer changes it)."""
        self._raise_failure()
        with self._state:
            self._pending = record
            self._requested += 1
            self._wake()

    def queue(self, append: Callable[[], None]) -> None:
        """Run ``append`` (a journal record's write) on the thread, after everything given before it."""
        self._raise_failure()
        with self._state:
            self._records.append(append)
            self._queued += 1
            self._wake()

    @property
    def records_pending(self) -> bool:
        """Journal records queued and not yet on disk."""
        with self._state:
            return self._appended < self._queued

    def _wake(self) -> None:  # with self._state held
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, name="medseg-session-writer", daemon=True)
            self._thread.start()
        self._state.notify_all()

    def write_now(self, record: dict[str, Any]) -> None:
        with self._writing:
            with self._state:
                self._pending = None
                self._requested += 1
                number = self._requested
            atomic_write_text(self.path, json.dumps(record))
            with self._state:
                self._written = number
                self._state.notify_all()

    @property
    def pending(self) -> bool:
        with self._state:
            return (self._written < self._requested or self._appended < self._queued
                    or self._error is not None)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until every text and record given so far is on disk; False on timeout. Raises a failed write."""
        with self._state:
            target, records = self._requested, self._queued
            done = self._state.wait_for(lambda: (self._written >= target and self._appended >= records)
                                        or self._error is not None, timeout)
        self._raise_failure()
        return done

    def stop(self, flush: bool = True) -> None:
        """End the thread; ``flush`` False drops what is not written yet (a discarded session)."""
        if flush:
            self.flush()
        with self._state:
            self._stopping = True
            self._pending = None
            self._appended += len(self._records)
            self._records.clear()
            self._state.notify_all()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def _raise_failure(self) -> None:
        error, self._error = self._error, None
        if error is not None:
            if isinstance(error, MedsegError):
                raise error
            raise MedsegError(f"cannot write the autosaved label table ({error})", path=self.path) from error

    def _run(self) -> None:
        while True:
            with self._state:
                self._state.wait_for(lambda: self._pending is not None or self._records or self._stopping)
                if self._stopping:
                    return
            with self._writing:
                with self._state:
                    record, number, self._pending = self._pending, self._requested, None
                    appends, self._records = self._records, []
                try:
                    if record is not None:  # None: write_now took it over, or only records were queued
                        atomic_write_text(self.path, json.dumps(record))  # the table before the records after it
                    for append in appends:
                        append()
                except BaseException as error:  # noqa: BLE001 - handed to the GUI's side, never lost
                    with self._state:
                        self._error = error
                        self._appended += len(appends)  # not written: the error says so at the next call
                        self._state.notify_all()
                    continue
                with self._state:
                    if record is not None:
                        self._written = max(self._written, number)
                    self._appended += len(appends)
                    self._state.notify_all()
