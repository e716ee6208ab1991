"""Where a training run runs: in this process (a worker thread) or under ``torchrun``.

Both runners emit the same thing: every event as a ``--json`` record (a dict with an
``"event"`` key), the last being ``done`` or ``failed``. The in-process runner drains the
engine's generator in a :class:`~medseg.gui.common.jobs.Job` (pause and cancel between
iterations); the torchrun runner starts ``python -m torch.distributed.run ... -m medseg
train --json`` as a QProcess in its own process group and reads its stdout line by line
(pause = SIGSTOP/SIGCONT to the group, stop = SIGTERM). Stop leaves the last completed
epoch's checkpoint; starting again with resume continues from it.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import socket
import sys
from typing import Any, Callable

from PySide6.QtCore import QObject, QProcess, QProcessEnvironment, Signal, Slot

from medseg.errors import Cancelled, MedsegError
from medseg.gui.common.jobs import Job
from medseg.job_registry import RUNNING_JOBS, RunningJob

log = logging.getLogger(__name__)

SETSID_EXEC = "import os, sys; os.setsid(); os.execv(sys.argv[1], sys.argv[1:])"
DISTRIBUTED_VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                         "GROUP_RANK", "ROLE_RANK", "TORCHELASTIC_RUN_ID")


def failure_record(error: BaseException) -> dict[str, Any]:
    if isinstance(error, Cancelled):
        return {"event": "failed", "error": "stopped", "cancelled": True, "path": None, "hint": None}
    if isinstance(error, MedsegError):
        return {"event": "failed", "error": error.message, "cancelled": False,
                "path": str(error.path) if error.path else None, "hint": error.hint}
    return {"event": "failed", "error": f"{type(error).__name__}: {error}", "cancelled": False, "path": None,
            "hint": "see the log file (Help ▸ Log folder)"}


class InProcessRunner(QObject):
    """Runs ``make_generator(cancel)`` (the engine's train()) in a worker thread."""

    record = Signal(object)  # dict
    ended = Signal(object)  # the last record: done or failed

    def __init__(self, make_generator: Callable[..., Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        from medseg.model.training import event_to_json

        self._to_json = event_to_json

        def work(progress=None, cancel=None):
            return make_generator(cancel=cancel)

        self.job = Job("training", work, self, background=True)
        self.job.yielded.connect(self._on_event)
        self.job.finished_ok.connect(self._on_done)
        self.job.finished_error.connect(self._on_failed)

    def start(self) -> None:
        self.job.start()

    def pause(self) -> None:
        self.job.pause()

    def resume(self) -> None:
        self.job.resume()

    def stop(self) -> None:
        self.job.cancel()

    @property
    def running(self) -> bool:
        return self.job.running

    def wait_stopped(self) -> None:
        self.job.wait_stopped()

    @Slot(object)
    def _on_event(self, event: Any) -> None:
        record = self._to_json(event)
        if record["event"] == "iteration" and self.job.entry is not None:
            self.job.entry.update((record["step"] + 1) / max(record["total_steps"], 1),
                                  f"training: iteration {record['step'] + 1}/{record['total_steps']}")
        self.record.emit(record)

    @Slot(object)
    def _on_done(self, result: Any) -> None:
        record = {"event": "done", "package": str(result.package_path) if result.package_path else None,
                  "best_epoch": result.best_epoch, "best_mean_dice": result.best_mean_dice,
                  "seconds": result.seconds, "device": result.device}
        self.record.emit(record)
        self.ended.emit(record)

    @Slot(object)
    def _on_failed(self, error: BaseException) -> None:
        if not isinstance(error, (MedsegError, Cancelled)):
            log.error("training failed", exc_info=error)
        record = failure_record(error)
        self.record.emit(record)
        self.ended.emit(record)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def torchrun_command(processes: int, train_arguments: list[str]) -> list[str]:
    """The command line: this Python's torch.distributed.run launching ``medseg train --json``."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes),
            "--master_addr", "127.0.0.1", "--master_port", str(free_port()),
            "-m", "medseg", "train", *train_arguments, "--json"]


class TorchrunRunner(QObject):
    """A ``torchrun`` subprocess followed through its ``--json`` event stream."""

    record = Signal(object)
    ended = Signal(object)

    def __init__(self, command: list[str], parent: QObject | None = None, threads_per_process: int = 1) -> None:
        super().__init__(parent)
        self.command = command
        self.stderr_tail: list[str] = []
        self._buffer = b""
        self._last: dict[str, Any] | None = None
        self._stopping = False
        self.entry: RunningJob | None = None
        self.process = QProcess(self)
        environment = QProcessEnvironment.systemEnvironment()
        for name in DISTRIBUTED_VARIABLES:
            environment.remove(name)
        environment.insert("OMP_NUM_THREADS", str(threads_per_process))
        environment.insert("PYTHONUNBUFFERED", "1")
        self.process.setProcessEnvironment(environment)
        self.process.readyReadStandardOutput.connect(self._on_stdout)
        self.process.readyReadStandardError.connect(self._on_stderr)
        self.process.finished.connect(self._on_finished)
        self.process.errorOccurred.connect(self._on_error)

    @property
    def running(self) -> bool:
        return self.process.state() != QProcess.ProcessState.NotRunning

    def start(self) -> None:
        log.info("starting torchrun: %s", " ".join(self.command[1:4]))
        self.entry = RUNNING_JOBS.add("training (torchrun)", self.stop)
        command = self.command
        if hasattr(os, "setsid"):
            # Its own session and process group (setsid, then exec keeps the pid): pause and stop
            # reach torchrun and every worker it started, and nothing else.
            command = [sys.executable, "-c", SETSID_EXEC, *command]
        self.process.start(command[0], command[1:])

    def _signal_group(self, number: int) -> None:
        pid = int(self.process.processId())
        if pid <= 0:
            return
        try:
            if hasattr(os, "killpg"):
                os.killpg(pid, number)
            else:
                os.kill(pid, number)
        except ProcessLookupError:
            pass

    def pause(self) -> None:
        if hasattr(signal, "SIGSTOP"):
            self._signal_group(signal.SIGSTOP)
            if self.entry is not None:
                self.entry.update(paused=True, text="paused")

    def resume(self) -> None:
        if hasattr(signal, "SIGCONT"):
            self._signal_group(signal.SIGCONT)
            if self.entry is not None:
                self.entry.update(paused=False)

    def stop(self) -> None:
        self._stopping = True
        if hasattr(signal, "SIGCONT"):
            self._signal_group(signal.SIGCONT)  # a stopped process cannot handle SIGTERM
        self._signal_group(signal.SIGTERM)

    def wait_stopped(self) -> None:
        if self.running:
            self.stop()
            if not self.process.waitForFinished(30_000):
                self._signal_group(signal.SIGKILL)
                self.process.waitForFinished(5_000)

    @Slot()
    def _on_stdout(self) -> None:
        self._buffer += bytes(self.process.readAllStandardOutput().data())
        *lines, self._buffer = self._buffer.split(b"\n")
        for raw in lines:
            line = raw.decode("utf-8", "replace").strip()
            if not line:
                continue
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                record = {"event": "message", "text": line}
            if not isinstance(record, dict) or "event" not in record:
                record = {"event": "message", "text": line}
            if record["event"] == "iteration" and self.entry is not None:
                self.entry.update((record["step"] + 1) / max(record["total_steps"], 1),
                                  f"training (torchrun): iteration {record['step'] + 1}/{record['total_steps']}")
            if record["event"] in ("done", "failed"):
                self._last = record
            self.record.emit(record)

    @Slot()
    def _on_stderr(self) -> None:
        text = bytes(self.process.readAllStandardError().data()).decode("utf-8", "replace")
        self.stderr_tail = (self.stderr_tail + text.splitlines())[-40:]

    @Slot(int, QProcess.ExitStatus)
    def _on_finished(self, code: int, status: QProcess.ExitStatus) -> None:
        self._on_stdout()
        if self.entry is not None:
            self.entry.finish()
            self.entry = None
        last = self._last
        if last is None or (last["event"] == "done" and code != 0):
            if self._stopping:
                last = {"event": "failed", "error": "stopped", "cancelled": True, "path": None, "hint": None}
            else:
                detail = "\n".join(self.stderr_tail[-12:])
                last = {"event": "failed", "error": f"torchrun exited with code {code}", "cancelled": False,
                        "path": None, "hint": detail or None}
            self.record.emit(last)
        self.ended.emit(last)

    @Slot(QProcess.ProcessError)
    def _on_error(self, error: QProcess.ProcessError) -> None:
        if error == QProcess.ProcessError.FailedToStart:
            if self.entry is not None:
                self.entry.finish()
                self.entry = None
            last = {"event": "failed", "error": f"torchrun could not be started: {self.process.errorString()}",
                    "cancelled": False, "path": None, "hint": None}
            self.record.emit(last)
            self.ended.emit(last)
