"""``medseg batch INPUTS... -o OUTDIR``: segment and measure every case of an archive, resumably.

INPUTS are folders (scanned recursively for DICOM series and NIfTI/NRRD/MHA files), manifests
(.csv/.json: path, optional series_uid and case_id) and saved PACS queries (``medseg pacs query
--series --json``). One output per case plus one results table (OUTDIR/results.csv, and
results.parquet when pyarrow is installed). A rerun skips the cases already done with the same
model and settings. Under ``torchrun --nproc_per_node N -m medseg batch ...`` process r takes
cases r, r+N, ... (one GPU each on CUDA, a share of the cores each on the CPU); process 0 merges
the table. Ctrl+C or SIGTERM stops after the current case's write (twice: at once). One run per
OUTDIR: a second is refused naming the first (medseg.batch.run_lock); a killed run's lock is taken over.
"""

from __future__ import annotations

import argparse
import datetime
import os
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from medseg.cli._console import thread_count
from medseg.cli.segment import add_inference_options
from medseg.errors import MedsegError
from medseg.workflows.formats import segmentation_format_keys

if TYPE_CHECKING:
    from medseg.workflows.deidentify import Deidentifier

BARRIER_TIMEOUT = datetime.timedelta(days=7)  # processes meet only at the start and at the end


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "batch", help="segment and measure a whole archive (folders, manifests, PACS queries), resumably",
        description="Segment every case found in INPUTS with one model and write one output per case and one "
                    "results table (OUTDIR/results.csv: case, source, series UID, configuration, device, seconds, "
                    "each label's volume in ml and mean HU, status, error). Cases already done with the same model "
                    "and settings are skipped, so a rerun finishes exactly the missing ones. A failing case is "
                    "recorded and the batch goes on. Runs under torchrun for several processes or GPUs.")
    parser.add_argument("inputs", nargs="+", metavar="INPUT",
                        help="folder (scanned recursively), image file, manifest (.csv/.json with a 'path' column, "
                             "optional 'series_uid' and 'case_id'), or saved PACS query (.json)")
    parser.add_argument("-o", "--output", required=True, metavar="OUTDIR", help="folder for the outputs and the table")
    parser.add_argument("--model", "-m", help="an installed catalogue model (e.g. totalsegmentator/total), a medseg "
                                              "package or an nnU-Net v2 result folder (default: the starter)")
    parser.add_argument("--format", choices=segmentation_format_keys(), default="nii.gz",
                        help="dcm: a DICOM SEG referencing the source series; nii.gz / nrrd: a label map with a "
                             ".labels.json sidecar (default nii.gz)")
    parser.add_argument("--stats", action="store_true",
                        help="also write each case's full label statistics (CASE.stats.csv, as `medseg stats --csv`)")
    parser.add_argument("--deidentify", action="store_true",
                        help="research export: no patient name, ID, birth date, accession number or institution in "
                             "outputs and table; DICOM outputs follow the PS3.15 Basic Profile (with --format dcm the "
                             "de-identified source series is written too, CASE_ct/); needs --key-file")
    parser.add_argument("--key-file", metavar="KEY",
                        help="your secret for --deidentify (created if absent; keep it outside OUTDIR): it makes "
                             "pseudonyms and UIDs repeatable, so reruns resume and SEGs reference their sources")
    parser.add_argument("--reid-mapping", metavar="FILE",
                        help="with --deidentify: also write the re-identification mapping, encrypted with the key")
    parser.add_argument("--pacs-server", metavar="NAME",
                        help="saved PACS server for saved queries that do not name theirs")
    parser.add_argument("--pacs-cache", metavar="DIR", help="where retrieved series go (default: the PACS settings')")
    add_inference_options(parser)
    parser.add_argument("--allow-modality", action="store_true",
                        help="segment series whose modality (e.g. MR, PET) is not the one the model was trained on "
                             "(each such case says so); without it they are failed rows")
    parser.add_argument("--threads", type=thread_count,
                        help="CPU threads per process (default: this machine's usable cores split between its processes)")
    parser.add_argument("--json", action="store_true",
                        help="print the event stream, one JSON object per line: started, case (one per case), "
                             "progress, message, then done (with the counts and the table) or failed")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.cli._events import EventStream

    rank = int(os.environ.get("RANK", "0"))
    events = EventStream(bool(args.json) and rank == 0)
    with events.failures():
        return _batch(args, rank, events)


def _check_options(args: argparse.Namespace) -> tuple[Path, Path | None, list[str]]:
    """Everything that can be refused before a case runs: the output folder, the key, the mapping."""
    from medseg.workflows.outputs import check_writable

    notes: list[str] = []
    if not str(args.output).strip():
        raise MedsegError("the output folder is empty (-o '')", hint="name the folder to write the results to")
    for number, given in enumerate(args.inputs, 1):
        if not given.strip():  # Path("") is ".", the working folder
            raise MedsegError(f"input {number} of {len(args.inputs)} is an empty path: no file or folder was named",
                              hint="give the folders, files or manifests to segment")
    output = Path(args.output).expanduser()
    if output.exists() and not output.is_dir():
        raise MedsegError("the output must be a folder", path=output)
    for given in args.inputs:
        source = Path(given).expanduser().resolve()
        target = output.resolve()
        if source.is_dir() and (target == source or source in target.parents):
            raise MedsegError("the output folder is inside an input folder: its outputs would be read as cases",
                              path=output, hint="choose an output folder outside the inputs")
        if target in source.parents:
            raise MedsegError("an input is inside the output folder", path=given, hint="choose another output folder")
    if args.reid_mapping and not args.deidentify:
        raise MedsegError("--reid-mapping needs --deidentify")
    if args.key_file and not args.deidentify:
        raise MedsegError("--key-file is for --deidentify")
    if int(os.environ.get("RANK", "0")) == 0:
        try:
            output.mkdir(parents=True, exist_ok=True)
        except OSError as error:
            raise MedsegError(f"cannot create the output folder ({error.strerror})", path=output) from error
        check_writable(output / "results.csv")
    mapping = Path(args.reid_mapping).expanduser() if args.reid_mapping else None
    if args.deidentify:
        if not args.key_file:
            raise MedsegError("--deidentify needs --key-file KEY (a secret kept outside the output folder; medseg "
                              "creates it if the file does not exist)")
        if mapping is not None:
            if output.resolve() in mapping.resolve().parents:
                raise MedsegError("the re-identification mapping must not be inside the output folder", path=mapping)
            check_writable(mapping)
    return output, mapping, notes


def _deidentifier(args: argparse.Namespace, output: Path, notes: list[str]) -> Deidentifier | None:
    """The de-identifier of the user's key (process 0 creates the key file when it does not exist yet)."""
    if not args.deidentify:
        return None
    from medseg.workflows.deidentify import open_deidentifier

    deid, created = open_deidentifier(args.key_file, forbidden_under=[output])
    if created:
        notes.append(f"created a new de-identification key in {args.key_file}: keep it to resume this batch "
                     "or re-identify its cases")
    return deid


def _batch(args: argparse.Namespace, rank: int, events: Any) -> int:
    output, mapping, notes = _check_options(args)
    run_lock = _claim_output(output, notes) if rank == 0 else None  # the run's other processes share rank 0's
    try:
        return _locked_batch(args, rank, events, output, mapping, notes)
    finally:
        if run_lock is not None:
            run_lock.release()


def _claim_output(output: Path, notes: list[str]) -> Any:
    """One batch run per output folder (medseg.batch.run_lock): a second is refused naming the first."""
    from medseg.batch.run_lock import claim_output

    lock = claim_output(output)
    if lock.stale is not None:
        notes.append(f"an earlier run on this output folder ({lock.stale.describe()}) ended without finishing; "
                     "its finished cases are kept, the others are done now")
    return lock


def _locked_batch(args: argparse.Namespace, rank: int, events: Any, output: Path, mapping: Path | None,
                  notes: list[str]) -> int:
    deid = _deidentifier(args, output, notes) if rank == 0 else None

    import torch

    from medseg import threads as medseg_threads
    from medseg.batch.run import BatchPlan, BatchRunner, BatchSettings, merge_table, model_id, plan_batch
    from medseg.settings import SETTINGS, apply_threads
    from medseg.workflows.devices import check_device, join_processes
    from medseg.workflows.models import open_model

    world = int(os.environ.get("WORLD_SIZE", "1"))
    local_world = int(os.environ.get("LOCAL_WORLD_SIZE", str(world)))
    device = check_device(args.device)  # the one device decision (an absent device fails here, not per case)
    ctx = join_processes(device, timeout=BARRIER_TIMEOUT)  # over NCCL when the device is a CUDA GPU, else gloo
    # the processes on this machine split its usable cores (medseg.threads); --threads is per process
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    SETTINGS.from_command_line(threads=args.threads)
    threads = apply_threads(SETTINGS, count=medseg_threads.process_share(local_rank, local_world))
    model = open_model(args.model)  # any kind that segments (a package, a TotalSegmentator task ...)
    current_model = model_id(model)
    settings = BatchSettings(
        output_dir=output, output_format=args.format, device=args.device, configuration=args.configuration,
        step=args.step, mirror=args.mirror, postprocess=not args.no_postprocess, raw_stack=args.raw_stack,
        stats=args.stats, allow_modality=args.allow_modality, deid=deid, precision=args.precision,
        pacs_cache=Path(args.pacs_cache) if args.pacs_cache else None)
    plan_or_error: list[Any] = [None]
    if ctx.is_main:
        try:
            plan_or_error[0] = plan_batch(_discover(args, deid), settings, current_model)
        except MedsegError as error:
            plan_or_error[0] = error
    if ctx.distributed:
        import torch.distributed as dist

        dist.broadcast_object_list(plan_or_error, src=0)
    if isinstance(plan_or_error[0], MedsegError):
        raise plan_or_error[0]
    if not ctx.is_main:
        deid = _deidentifier(args, output, [])  # the key exists now: process 0 made it before planning
    plan: BatchPlan = plan_or_error[0]
    settings.deid = deid
    share = plan.share(ctx.rank, ctx.world_size)
    device_label = f"cuda:{torch.cuda.current_device()}" if ctx.device.type == "cuda" and ctx.distributed else None
    say = _Console(args, ctx.rank, ctx.world_size, len(share), events)
    for note in notes:
        say.message(note)
    skipped = sum(c.status == "skipped" for c in plan.cases)
    unreadable = sum(c.status == "failed" for c in plan.cases)
    events.emit("started", cases=len(plan.cases), to_do=len(plan.to_do), done_before=plan.done_before,
                skipped=skipped, unreadable=unreadable, processes=ctx.world_size, threads_per_process=threads,
                model=model.card.name, model_id=current_model, output=str(output))
    say.line(f"{len(plan.cases)} cases: {len(plan.to_do)} to segment, {plan.done_before} done before, "
             f"{skipped} not segmentable, {unreadable} unreadable; {ctx.world_size} process(es), {threads} thread(s) "
             f"each; model {model.card.name}"
             + (f", {args.precision}: the tier verified on this computer, not the exact float32 path"
                if args.precision != "f32" else ""))
    journal = None
    if mapping is not None:
        from medseg.batch.mapping import MappingJournal

        assert deid is not None, "--reid-mapping needs --deidentify (run refuses it without)"
        journal = MappingJournal(mapping, ctx.rank, deid)
    runner = BatchRunner(model, settings, current_model, ctx.rank, device_label, say.event, journal)
    try:
        summary = runner.run(share)
    finally:
        say.close()
        if journal is not None:
            journal.close()
    if ctx.distributed and not summary.interrupted:
        import torch.distributed as dist

        try:
            dist.barrier()  # every part is complete before process 0 merges
        except RuntimeError:
            pass  # a process stopped early: merge what is there; a rerun completes it
    code = 0
    if summary.interrupted:
        code = 128 + (summary.stop_signal or signal.SIGINT)
    if ctx.is_main:
        tables, counts = merge_table(plan, settings, model.card.labels, current_model)
        if mapping is not None:
            from medseg.batch.mapping import merge_mapping

            assert deid is not None, "--reid-mapping needs --deidentify (run refuses it without)"
            merge_mapping(mapping, deid, {c.case_id for c in plan.cases})
        wait_share = summary.input_wait_s / summary.wall_s if summary.wall_s else 0.0
        fields = {"cases": len(plan.cases), "counts": counts, "ran": summary.ok + summary.failed,
                  "ok": summary.ok, "failed": summary.failed, "interrupted": summary.interrupted,
                  "table": [str(t) for t in tables], "seconds": round(summary.wall_s, 3),
                  "input_wait_s": round(summary.input_wait_s, 3), "network_s": round(summary.network_s, 3),
                  "input_wait_share": round(wait_share, 4), "read_s": round(summary.read_s, 3),
                  "read_share": round(summary.read_s / summary.wall_s, 4) if summary.wall_s else 0.0,
                  "processes": ctx.world_size, "threads": threads}
        if summary.interrupted:
            events.emit("failed", error="interrupted", cancelled=True, **fields)
        else:
            events.emit("done", **fields)
        state = "interrupted; run the same command again to finish" if summary.interrupted else "done"
        say.line(f"{state}: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) +
                 f"; table {tables[0]}; the network waited for input {wait_share:.1%} of the time")
    if ctx.distributed and ctx.initialized_here:
        import torch.distributed as dist

        dist.destroy_process_group()
    return code


def _discover(args: argparse.Namespace, deid: Any) -> Any:
    from medseg.workflows.batch_cases import discover

    def list_series(server_name: str, study_uid: str) -> list[Any]:
        from medseg.workflows.pacs import study_series

        return study_series(server_name, study_uid)

    return discover(args.inputs, deid=deid, pacs_server=args.pacs_server, list_series=list_series)


class _Console:
    """Progress for people (a bar with ETA on a terminal, a line per case otherwise) or JSON events."""

    def __init__(self, args: argparse.Namespace, rank: int, world: int, total: int, events: Any) -> None:
        self.json = bool(args.json)
        self.events = events
        self.rank = rank
        self.world = world
        self.total = total
        self.started = time.monotonic()
        self.done = 0
        self.last_fraction = -1.0
        self.bar = None
        if not self.json and rank == 0 and sys.stderr.isatty() and total:
            from tqdm import tqdm

            self.bar = tqdm(total=total, unit="case", file=sys.stderr, dynamic_ncols=True,
                            desc=f"rank 0 of {world}" if world > 1 else "segmenting")

    def line(self, text: str) -> None:
        if not self.json and self.rank == 0:
            (self.bar.write if self.bar is not None else lambda t: print(t, file=sys.stderr, flush=True))(text)

    def message(self, text: str) -> None:
        self.events.emit("message", text=text)
        self.line(f"note: {text}")

    def _eta(self, fraction_done: float) -> float | None:
        elapsed = time.monotonic() - self.started
        return elapsed / fraction_done * (1 - fraction_done) if fraction_done > 0 else None

    def event(self, name: str, fields: dict[str, Any]) -> None:
        if name == "progress":
            fraction = (fields["index"] + fields["case_fraction"]) / max(1, fields["total"])
            if fraction - self.last_fraction >= 0.01 or fraction >= 1.0:
                self.last_fraction = fraction
                eta = self._eta(fraction)
                self.events.emit("progress", fraction=round(fraction, 4), stage="batch",
                                 text=f"case {fields['index'] + 1} of {fields['total']}: {fields['text']}",
                                 eta_s=None if eta is None else round(eta, 1))
            return
        if name == "message":
            self.message(fields["text"])
            return
        if name != "case":
            return
        self.done += 1
        self.events.emit("case", **fields)
        if self.json:
            return
        status = fields["status"]
        text = f"{fields['case_id']}: {status}"
        if fields.get("seconds") is not None:
            text += f" ({fields['seconds']:.1f} s)"
        if fields.get("error"):
            text += f": {fields['error']}"
        if self.bar is not None:
            self.bar.set_postfix_str(fields["case_id"][-40:], refresh=False)
            self.bar.update(1)
            if status != "ok":
                self.bar.write(text)
            return
        if self.rank != 0 and status == "ok":
            return
        eta = self._eta(self.done / max(1, self.total))
        prefix = f"[{self.done}/{self.total}{f' rank {self.rank}' if self.world > 1 else ''}]"
        suffix = f"  ETA {datetime.timedelta(seconds=int(eta))}" if eta is not None and self.done < self.total else ""
        print(f"{prefix} {text}{suffix}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
