"""A run folder that keeps what a training run said, so it can be reopened and its curves seen again.

``events.jsonl`` (every event, one JSON object per line: the ``--json`` stream),
``command.txt`` (the exact command, or the engine call the GUI made), ``metrics.csv``
(one row per epoch: train loss, validation loss, mean and per-label Dice, learning rate,
seconds) and ``summary.json`` (written when the run ends). The GUI adds the plots as PNG.
"""

from __future__ import annotations

import csv
import io
import json
import math
from pathlib import Path
from typing import Any, Iterable

from medseg.io.atomic import atomic_write_text

EVENTS_FILE = "events.jsonl"
METRICS_FILE = "metrics.csv"
COMMAND_FILE = "command.txt"
SUMMARY_FILE = "summary.json"


class RunRecorder:
    def __init__(self, folder: str | Path) -> None:
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.epochs: list[dict[str, Any]] = []
        self.labels: list[str] = []
        self.learning_rate = math.nan
        self._events = open(self.folder / EVENTS_FILE, "a", encoding="utf-8")  # an append-only log

    def write_command(self, command: str) -> None:
        atomic_write_text(self.folder / COMMAND_FILE, command.rstrip() + "\n")

    def record(self, event: dict[str, Any]) -> None:
        """One event (a ``--json`` record); epochs also rewrite ``metrics.csv``."""
        self._events.write(json.dumps(event) + "\n")
        kind = event.get("event")
        if kind == "iteration":
            self.learning_rate = float(event["learning_rate"])
        elif kind == "epoch":
            self._events.flush()
            for name in event.get("validation_dice") or {}:
                if name not in self.labels:
                    self.labels.append(name)
            self.epochs.append({**event, "learning_rate": self.learning_rate})
            self.write_metrics()
        elif kind in ("done", "failed"):
            self._events.flush()
            atomic_write_text(self.folder / SUMMARY_FILE, json.dumps(event, indent=1))

    def write_metrics(self) -> None:
        buffer = io.StringIO()
        writer = csv.writer(buffer)
        writer.writerow(["epoch", "train_loss", "validation_loss", "mean_dice", *[f"dice_{n}" for n in self.labels],
                         "learning_rate", "seconds"])
        for epoch in self.epochs:
            dice = epoch.get("validation_dice") or {}
            writer.writerow([epoch["epoch"] + 1, _cell(epoch.get("train_loss")), _cell(epoch.get("validation_loss")),
                             _cell(epoch.get("mean_dice")), *[_cell(dice.get(n)) for n in self.labels],
                             _cell(epoch.get("learning_rate")), _cell(epoch.get("seconds"))])
        atomic_write_text(self.folder / METRICS_FILE, buffer.getvalue())

    def close(self) -> None:
        if not self._events.closed:
            self._events.close()


def _cell(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:.6g}" if isinstance(value, float) else str(value)


def read_events(folder: str | Path) -> list[dict[str, Any]]:
    """The events of a run folder, in order (a torn last line from a crash is skipped)."""
    path = Path(folder) / EVENTS_FILE
    events = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return events


def iteration_losses(events: Iterable[dict[str, Any]]) -> list[tuple[int, float]]:
    return [(int(e["step"]), float(e["loss"])) for e in events if e.get("event") == "iteration"]
