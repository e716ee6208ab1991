"""Segment one process's share of a batch: resumable, a prefetch of one, a clean stop.

Each case is read, segmented and saved by the use case :class:`medseg.workflows.batch_case.BatchCase`,
so a batch refuses what ``medseg segment`` refuses (an MR series without ``allow_modality``, a label
map given as a CT): the refusal is the case's failed row, and the batch goes on. This module keeps
what only a batch has:

- **Resumable**: :func:`plan_batch` (process 0, before any case runs) skips every case whose
  row says *ok* with this model's id and these settings, and whose output is on disk with the
  size the row recorded. A case is done when its output is written (atomically, last of its
  files) and its row is in the process's part; a kill between the two only redoes that case.
- **Prefetch of one**: while the network runs on case *i*, a thread reads case *i + 1* (DICOM
  decoding, a PACS retrieval) and preprocesses it (:func:`medseg.model.infer.prepare`); the
  time the network waits for its input is measured and reported.
- **Failures are rows**: a case that cannot be read, segmented or written is recorded with its
  error and the batch goes on.
- **Ctrl+C / SIGTERM**: the first one stops the batch at the next safe point: a case whose
  network is running is abandoned between tiles (nothing of it is written); a case being
  written is finished and recorded. A second one interrupts at once (an atomic write then
  leaves nothing). A rerun finishes exactly the cases without a row.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import signal
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Mapping

from medseg.batch.table import RankPart, Row, read_rows, write_table
from medseg.core.labels import Label
from medseg.errors import Cancelled, MedsegError
from medseg.progress import CancelToken, Progress
from medseg.workflows.batch_cases import Case, Discovery
from medseg.workflows.formats import segmentation_suffixes

if TYPE_CHECKING:
    from medseg.batch.mapping import MappingJournal
    from medseg.core.volume import Volume
    from medseg.workflows.deidentify import Deidentifier

FORMATS = segmentation_suffixes()  # --format: the one table (medseg.io.formats)
EventCallback = Callable[[str, dict[str, Any]], None]


@dataclass
class BatchSettings:
    output_dir: Path
    output_format: str = "nii.gz"  # a key of FORMATS
    device: str = "auto"
    configuration: str | None = None
    step: float = 0.5
    mirror: bool = False
    postprocess: bool = True
    raw_stack: bool = False
    stats: bool = False
    allow_modality: bool = False  # segment series of another modality than the model's (each noted)
    deid: Deidentifier | None = None
    pacs_cache: Path | None = None
    precision: str = "f32"  # "f32" (exact) or a tier verified here (medseg.model.precision_tier): int8, bf16

    def digest(self) -> str:
        """Everything besides the model that shapes the outputs (a change means: segment again)."""
        shaping = {"format": self.output_format, "configuration": self.configuration, "step": self.step,
                   "mirror": self.mirror, "postprocess": self.postprocess, "raw_stack": self.raw_stack,
                   "stats": self.stats, "deidentified_with": self.deid.fingerprint if self.deid else None}
        if self.allow_modality:  # (absent when off: the digests of earlier runs stay valid)
            shaping["allow_modality"] = True
        if self.precision != "f32":  # a faster tier's labels are not the exact path's: a switch segments again
            shaping["precision"] = self.precision
        return hashlib.sha256(json.dumps(shaping, sort_keys=True).encode()).hexdigest()[:16]

    def output_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.case_id}{FORMATS[self.output_format]}"

    def stats_path(self, case: Case) -> Path:
        return self.output_dir / f"{case.case_id}.stats.csv"

    def segment_settings(self) -> Any:
        from medseg.workflows.segment import SegmentSettings

        return SegmentSettings(device=self.device, configuration=self.configuration, step=self.step,
                               mirror=self.mirror, postprocess=self.postprocess, allow_modality=self.allow_modality,
                               precision=self.precision)


def model_id(model: Any) -> str:
    """An opened model's name and a digest of what shapes its output (a package: its plans, labels,
    post-processing and every weight; a pipeline of several networks: its files), from its pipeline."""
    return model.pipeline.identity()


# --- planning (process 0, before any case runs) -----------------------------------------------------------------


@dataclass
class BatchPlan:
    cases: list[Case]  # every case found, sorted by case id
    to_do: list[str]  # the case ids to segment now, in order
    done_before: int  # cases a previous run finished with this model and these settings

    def share(self, rank: int, world_size: int) -> list[Case]:
        """Process ``rank``'s cases: to-do cases rank, rank + W, rank + 2W, ..."""
        by_id = {case.case_id: case for case in self.cases}
        return [by_id[case_id] for case_id in self.to_do[rank::world_size]]


def is_done(row: Row | None, settings: BatchSettings, case: Case, current_model: str) -> bool:
    if row is None or row.status != "ok" or row.model_id != current_model or row.settings != settings.digest():
        return False
    if not row.output:
        return True  # measured, nothing to write (no label found, and DICOM has no empty SEG)
    output = settings.output_dir / row.output
    return output == settings.output_path(case) and output.is_file() and output.stat().st_size == row.output_bytes


def plan_batch(discovery: Discovery, settings: BatchSettings, current_model: str) -> BatchPlan:
    rows = read_rows(settings.output_dir)
    runnable = discovery.runnable
    to_do = [c.case_id for c in runnable if not is_done(rows.get(c.case_id), settings, c, current_model)]
    return BatchPlan(discovery.cases, to_do, len(runnable) - len(to_do))


def merge_table(plan: BatchPlan, settings: BatchSettings, labels: Mapping[int, Label],
                current_model: str) -> tuple[list[Path], dict]:
    """The one results table from every part (process 0, at the end; a rerun also merges a killed run's parts)."""
    rows = read_rows(settings.output_dir)
    merged = []
    for case in plan.cases:
        if case.status:
            merged.append(_row(case, settings, case.status, error=case.reason))
            continue
        row = rows.get(case.case_id)
        if row is None or row.model_id != current_model or row.settings != settings.digest():
            row = _row(case, settings, "pending")
        merged.append(row)
    structures = [label.name for value, label in sorted(labels.items()) if value != 0]  # the model's structures
    counts: dict[str, int] = {}
    for row in merged:
        counts[row.status] = counts.get(row.status, 0) + 1
    return write_table(settings.output_dir, merged, structures), counts


# --- one process's share ----------------------------------------------------------------------------------------


@dataclass
class Summary:
    cases: int = 0  # in this process's share
    ok: int = 0
    failed: int = 0
    interrupted: bool = False
    stop_signal: int | None = None
    input_wait_s: float = 0.0  # the network waiting for its next input
    read_s: float = 0.0  # reading and preprocessing (on the prefetch thread): the wait there would be without it
    network_s: float = 0.0  # segmenting (network, resampling, post-processing)
    wall_s: float = 0.0
    seconds_per_case: list[float] = field(default_factory=list)


@dataclass
class _Input:
    volume: Volume
    prepared: Any  # medseg.workflows.segment.PreparedStudy
    seconds: float


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="microseconds")


def _row(case: Case, batch: BatchSettings, status: str, error: str = "", **fields: Any) -> Row:
    deid = batch.deid
    source = "" if deid is not None else case.source
    series_uid = deid.uid(case.series_uid) if deid is not None else case.series_uid
    if deid is not None and error:
        for text in {case.source, *case.files}:
            if text:
                error = error.replace(text, "<source>")
    return Row(case.case_id, status, error=error, source=source, series_uid=series_uid, **fields)


class BatchRunner:
    """Runs one process's cases; ``on_event(name, fields)`` hears about each case and the progress.

    ``model`` is the opened model (:func:`medseg.workflows.models.open_model`); each case goes through
    one :class:`~medseg.workflows.batch_case.BatchCase` with the settings' device, checks and writers."""

    def __init__(self, model: Any, settings: BatchSettings, current_model: str, rank: int = 0,
                 device_label: str | None = None, on_event: EventCallback | None = None,
                 reid_journal: MappingJournal | None = None) -> None:
        from medseg.workflows.batch_case import BatchCase
        from medseg.workflows.segment import Segmenter

        self.model = model
        self.settings = settings
        self.model_id = current_model
        self.rank = rank
        self.device_label = device_label
        self.on_event = on_event or (lambda name, fields: None)
        self.stop = CancelToken()
        self.labels = model.card.labels
        self._signal: int | None = None
        self.reid_journal = reid_journal
        # one model load for every case: the networks' weights and engines stay built between cases (issue 51)
        self.case_work = BatchCase(Segmenter(model, settings.segment_settings(), keep_loaded=True),
                                   deidentifier=settings.deid, regularize=not settings.raw_stack)

    # --- reading (on the prefetch thread) ---

    def _read(self, case: Case) -> _Input:
        from medseg import threads

        # a job of its own on the thread budget: the read-ahead and the running case split the cores
        with threads.job("batch read-ahead"):
            return self._read_case(case)

    def _read_case(self, case: Case) -> _Input:
        started = time.perf_counter()
        if case.kind == "pacs":
            source: Any = self._retrieve(case)
        elif case.kind == "image":
            source = case.files[0]
        else:
            source = list(case.files)
        output = self.settings.output_path(case)
        # On the run's device, as an interactive Segment does (torch resampling there: a thin-slice
        # 300-slice CT took 6.7 s on one CPU thread, 0.4 s in torch); the batch's own step is what
        # the run check counts tiles with. Every refusal (modality, a label map as CT) comes here.
        prepared = self.case_work.read(source, output, cancel=self.stop)
        return _Input(prepared.image, prepared, time.perf_counter() - started)

    def _retrieve(self, case: Case) -> Path:
        from medseg.workflows.pacs import retrieve_saved_series

        assert case.pacs is not None
        server_name, study_uid, series_uid = case.pacs
        return retrieve_saved_series(server_name, study_uid, series_uid, self.settings.pacs_cache, cancel=self.stop)

    # --- the loop ---

    def run(self, cases: list[Case]) -> Summary:
        summary = Summary(cases=len(cases))
        started = time.perf_counter()
        part = RankPart(self.settings.output_dir, self.rank)
        restore = self._catch_signals()
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="medseg-batch-read")
        try:
            pending: Future | None = pool.submit(self._read, cases[0]) if cases else None
            for index, case in enumerate(cases):
                if self.stop.cancelled:
                    summary.interrupted = True
                    break
                assert pending is not None
                waited = time.perf_counter()
                error: BaseException | None = None
                try:
                    item = pending.result()
                except BaseException as caught:  # noqa: BLE001 - recorded as the case's error below
                    item, error = None, caught
                summary.input_wait_s += time.perf_counter() - waited
                summary.read_s += item.seconds if item is not None else 0.0
                # the next case is read while this one is on the network: a prefetch of one
                pending = pool.submit(self._read, cases[index + 1]) if index + 1 < len(cases) else None
                if isinstance(error, Cancelled) or (error is not None and self.stop.cancelled):
                    summary.interrupted = True
                    break
                if isinstance(error, KeyboardInterrupt):
                    raise error
                row = self._one(case, item, error, index, len(cases), summary)
                if row is None:  # cancelled while on the network: nothing of it was written
                    summary.interrupted = True
                    break
                part.append(row)
                summary.ok += row.status == "ok"
                summary.failed += row.status == "failed"
                if row.seconds is not None:
                    summary.seconds_per_case.append(row.seconds)
                self.on_event("case", {"case_id": case.case_id, "status": row.status, "error": row.error or None,
                                       "output": row.output or None, "seconds": row.seconds, "index": index + 1,
                                       "total": len(cases), "rank": self.rank})
        finally:
            self.stop.cancel()  # a read still running on the prefetch thread stops at its next check
            pool.shutdown(wait=True, cancel_futures=True)
            part.close()
            restore()
            self.case_work.segmenter.close()
        summary.stop_signal = self._signal  # a signal after the last case's write interrupted nothing
        summary.wall_s = time.perf_counter() - started
        return summary

    def _one(self, case: Case, item: _Input | None, error: BaseException | None, index: int, total: int,
             summary: Summary) -> Row | None:
        started = time.perf_counter()
        if error is not None:
            return self._failed(case, error, time.perf_counter() - started)
        assert item is not None

        def progress(p: Progress) -> None:
            self.on_event("progress", {"case_id": case.case_id, "index": index, "total": total,
                                       "case_fraction": p.fraction, "text": p.text})

        settings = self.settings
        output = settings.output_path(case)
        _remove_stale_temps(output)
        if settings.deid is not None and settings.output_format == "dcm":
            from medseg.workflows.deidentify import deidentified_series_folder

            _remove_stale_temps(deidentified_series_folder(output))
        try:
            done = self.case_work.finish(item.prepared, output, settings.stats_path(case) if settings.stats else None,
                                         progress=progress, cancel=self.stop)
        except Cancelled:
            return None
        except Exception as caught:  # noqa: BLE001 - a failing case is recorded and the batch goes on
            return self._failed(case, caught, item.seconds + time.perf_counter() - started)
        summary.network_s += done.segmented.seconds - item.prepared.seconds
        for note in done.segmented.notes:
            self.on_event("message", {"text": f"{case.case_id}: {note}"})
        return self._written(case, item, done, item.seconds + time.perf_counter() - started)

    def _failed(self, case: Case, error: BaseException, seconds: float) -> Row:
        text = error.message if isinstance(error, MedsegError) else f"{type(error).__name__}: {error}"
        if isinstance(error, MedsegError) and error.path is not None and self.settings.deid is None:
            text = f"{error.path}: {text}"
        if isinstance(error, MedsegError) and error.hint:
            text += f" ({error.hint})"
        return _row(case, self.settings, "failed", error=text[:1000], model=self.model.name, model_id=self.model_id,
                    settings=self.settings.digest(), seconds=round(seconds, 3), finished_at=_now(), rank=self.rank)

    def _written(self, case: Case, item: _Input, done: Any, seconds: float) -> Row:
        settings, deid, output = self.settings, self.settings.deid, done.output
        if self.reid_journal is not None and deid is not None and output is not None:
            from medseg.batch.mapping import record

            self.reid_journal.append(record(case.case_id, case.source, item.volume.meta, deid))
        volumes = {label.name: 0.0 for value, label in sorted(self.labels.items()) if value != 0}
        volumes.update({s.name: s.volume_ml for s in done.statistics})
        result = done.segmented
        precision = result.details.get("precision", "f32")  # never silent: the table says a tier ran
        device = (self.device_label or result.device) + (f" ({precision})" if precision != "f32" else "")
        return _row(case, settings, "ok", error=done.not_written, configuration=result.configuration,
                    device=device, seconds=round(seconds, 3),
                    output=output.name if output else "", model=self.model.name, model_id=self.model_id,
                    settings=settings.digest(), output_bytes=output.stat().st_size if output else None,
                    finished_at=_now(), rank=self.rank, volumes_ml=volumes,
                    mean_hu={s.name: s.hu_mean for s in done.statistics})

    # --- signals ---

    def _catch_signals(self) -> Callable[[], None]:
        """First SIGINT/SIGTERM: stop at the next safe point; second: interrupt now."""
        if threading.current_thread() is not threading.main_thread():
            return lambda: None

        def handler(signum: int, frame: Any) -> None:
            if self.stop.cancelled:
                raise KeyboardInterrupt
            self._signal = signum
            self.stop.cancel()
            self.on_event("message", {"text": f"{signal.Signals(signum).name}: stopping after the current case's "
                                              "write (again to stop at once)"})

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}

        def restore() -> None:
            for sig, old in previous.items():
                signal.signal(sig, old)

        return restore


def _remove_stale_temps(path: Path) -> None:
    """Temporary files an earlier, killed write of this output left (``.<name>.<random>...``)."""
    import shutil

    folder = path.parent
    if not folder.is_dir():
        return
    for leftover in folder.glob(f".{path.name}.*"):
        if leftover.is_dir():
            shutil.rmtree(leftover, ignore_errors=True)
        else:
            leftover.unlink(missing_ok=True)
