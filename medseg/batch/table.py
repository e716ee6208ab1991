"""The results of a batch: a journal part per process, merged into one table.

Each process appends one JSON line per finished case to its own part
(``OUTDIR/.medseg-batch/part-rank<R>.jsonl``), flushed and fsynced before the next case
starts, so a kill loses at most the case in progress; a line cut short by a kill is ignored
on reading. No process writes another's part. Process 0 merges every part present (also
those a killed run left) into ``results.csv`` (and ``results.parquet`` when pyarrow is
installed), atomically, the latest row of each case winning: one row per case, sorted by
case id, a column pair (volume in ml, mean HU) per label of the model.
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from medseg.workflows.outputs import append_synced, atomic_path, atomic_write_text

STATE_FOLDER = ".medseg-batch"
TABLE_NAME = "results.csv"
PARQUET_NAME = "results.parquet"
BASE_COLUMNS = ("case_id", "status", "error", "source", "series_uid", "configuration", "device", "seconds",
                "output", "model", "model_id")
TAIL_COLUMNS = ("settings", "output_bytes", "finished_at", "rank")


@dataclass
class Row:
    case_id: str
    status: str  # "ok", "failed", "skipped", or "pending" (not done yet)
    error: str = ""
    source: str = ""
    series_uid: str = ""
    configuration: str = ""
    device: str = ""
    seconds: float | None = None
    output: str = ""  # relative to the output folder
    model: str = ""
    model_id: str = ""
    settings: str = ""  # digest of everything that shapes the output besides the model
    output_bytes: int | None = None
    finished_at: str = ""  # UTC, ISO 8601
    rank: int | None = None
    volumes_ml: dict[str, float] = field(default_factory=dict)
    mean_hu: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(self.__dict__, sort_keys=True, allow_nan=False)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Row:
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        return cls(**known)


def state_folder(output_dir: str | os.PathLike) -> Path:
    return Path(output_dir) / STATE_FOLDER


def part_path(output_dir: str | os.PathLike, rank: int) -> Path:
    return state_folder(output_dir) / f"part-rank{rank}.jsonl"


class RankPart:
    """One process's journal of finished cases (append-only, fsynced per row)."""

    def __init__(self, output_dir: str | os.PathLike, rank: int) -> None:
        self.path = part_path(output_dir, rank)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._handle = open(self.path, "a+b", buffering=0)  # unbuffered: a failed row can be cut off again
        self._lock()
        self._handle.seek(0, os.SEEK_END)
        if self._handle.tell():
            self._handle.seek(-1, os.SEEK_END)
            if self._handle.read(1) != b"\n":  # a line cut by a kill: the next row starts on a line of its own
                self._handle.write(b"\n")

    def _lock(self) -> None:
        try:
            import fcntl
        except ImportError:  # Windows: one batch per output folder is then the user's to keep
            return
        try:
            fcntl.flock(self._handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            from medseg.errors import MedsegError

            self._handle.close()
            raise MedsegError("another batch is running on this output folder (as the same rank)",
                              path=self.path.parent.parent, hint="wait for it, or choose another output folder")

    def append(self, row: Row) -> None:
        try:  # appended, not replaced (medseg.io.atomic says why)
            append_synced(self._handle, (row.to_json() + "\n").encode("utf-8"), cut_torn=True)
        except OSError as error:  # a full disk: the torn row is cut off; say which case and where, and how to go on
            from medseg.errors import SaveError

            raise SaveError(f"cannot record the result of case {row.case_id!r} ({os.strerror(error.errno or 0)}); "
                            "the batch stops here", path=self.path,
                            hint="free some space and run the same command again: the cases recorded before are "
                                 "kept and not run again") from error

    def close(self) -> None:
        self._handle.close()


def read_rows(output_dir: str | os.PathLike) -> dict[str, Row]:
    """The latest row of every case over all parts (a torn last line is skipped)."""
    latest: dict[str, Row] = {}
    folder = state_folder(output_dir)
    parts = sorted(folder.glob("part-rank*.jsonl")) if folder.is_dir() else []
    rows: list[Row] = []
    for part in parts:
        try:
            lines = part.read_bytes().splitlines()
        except OSError:
            continue
        for line in lines:
            try:
                rows.append(Row.from_dict(json.loads(line)))
            except (ValueError, TypeError):
                continue  # cut short by a kill
    for row in sorted(rows, key=lambda r: r.finished_at):
        latest[row.case_id] = row
    return latest


def columns(labels: Iterable[str]) -> list[str]:
    per_label = [name for label in labels for name in (f"{label}_ml", f"{label}_mean_hu")]
    return [*BASE_COLUMNS, *per_label, *TAIL_COLUMNS]


def flat(row: Row, labels: Iterable[str]) -> dict[str, Any]:
    record: dict[str, Any] = {name: getattr(row, name) for name in (*BASE_COLUMNS, *TAIL_COLUMNS)}
    for label in labels:
        ml = row.volumes_ml.get(label)
        hu = row.mean_hu.get(label)
        record[f"{label}_ml"] = None if ml is None else round(float(ml), 4)
        record[f"{label}_mean_hu"] = None if hu is None else round(float(hu), 3)
    return record


def write_table(output_dir: str | os.PathLike, rows: list[Row], labels: list[str]) -> list[Path]:
    """results.csv (and results.parquet with pyarrow), atomically; returns the files written."""
    output_dir = Path(output_dir)
    names = columns(labels)
    records = [flat(row, labels) for row in sorted(rows, key=lambda r: r.case_id)]
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=names, lineterminator="\n")
    writer.writeheader()
    for record in records:
        writer.writerow({k: "" if v is None else v for k, v in record.items()})
    written = [atomic_write_text(output_dir / TABLE_NAME, buffer.getvalue())]
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        return written
    table = pa.Table.from_pylist(records, schema=_schema(pa, names, labels))
    with atomic_path(output_dir / PARQUET_NAME, suffix=".parquet") as temp:
        pq.write_table(table, temp)
    written.append(output_dir / PARQUET_NAME)
    return written


def _schema(pa: Any, names: list[str], labels: list[str]) -> Any:
    numeric = {"seconds", *(f"{label}_ml" for label in labels), *(f"{label}_mean_hu" for label in labels)}
    integer = {"output_bytes", "rank"}
    return pa.schema([(name, pa.float64() if name in numeric else pa.int64() if name in integer else pa.string())
                      for name in names])


def read_table(path: str | os.PathLike) -> list[dict[str, str]]:
    """The rows of a results.csv (strings, as written)."""
    with open(path, newline="", encoding="utf-8") as handle:
        return list(csv.DictReader(handle))
