"""Close the window cleanly on SIGTERM / SIGINT (a session ending, ``kill``, Ctrl+C).

Python runs its signal handlers only between bytecodes, and Qt's event loop sits in C++,
so a plain handler would wait for the next Python callback. The wake-up fd of the
``signal`` module makes the loop notice at once: the byte it writes wakes a
QSocketNotifier, whose Python slot lets the handler run, and the handler closes the window
through the same path as the user's close button (so unsaved edits are asked about).
"""

from __future__ import annotations

import signal
import socket

from PySide6.QtCore import QObject, QSocketNotifier, QTimer
from PySide6.QtWidgets import QWidget


class SignalCloser(QObject):
    def __init__(self, window: QWidget, signals=(signal.SIGTERM, signal.SIGINT)) -> None:
        super().__init__(window)
        self._reader, self._writer = socket.socketpair()
        self._reader.setblocking(False)
        self._writer.setblocking(False)
        self._previous_fd = signal.set_wakeup_fd(self._writer.fileno())
        self._notifier = QSocketNotifier(self._reader.fileno(), QSocketNotifier.Type.Read, self)
        self._notifier.activated.connect(self._drain)
        self._window = window
        self._previous = {sig: signal.signal(sig, self._handle) for sig in signals}
        self.received: list[int] = []

    def _drain(self, *_args) -> None:
        try:
            while self._reader.recv(64):
                pass
        except BlockingIOError:
            pass

    def _handle(self, signum, _frame) -> None:
        self.received.append(signum)
        QTimer.singleShot(0, self._window.close)

    def restore(self) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)
        signal.set_wakeup_fd(self._previous_fd)
        self._notifier.setEnabled(False)
        self._reader.close()
        self._writer.close()
