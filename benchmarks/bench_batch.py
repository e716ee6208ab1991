"""``medseg batch`` throughput: cases per hour, one process against two (torchrun, gloo), and input waits.

The archive is every real CT in shared/data that medseg can segment (DICOM series of five
vendors, single slices, NIfTI and NRRD volumes; label maps and the SEG left out), listed in a
manifest. Each run starts from an empty output folder in a fresh process (start-up, model
loading, scanning and the table merge included). Three set-ups alternate, ``--repeats`` times
each: one process on every core (the batch's default), one process on half the cores, and two
processes (torchrun, gloo) on half the cores each. Printed per set-up: cases/hour (median, min-max over the runs), wall seconds, and
the share of the batch's time the network waited for its input with the prefetch of one,
beside the share reading took (what the network would wait without the prefetch).

    .venv/bin/python benchmarks/bench_batch.py [--repeats 2] [--small] [--model M] [--device cpu]

On a GPU machine, give ``--device cuda`` and a larger model (e.g. the 3d_fullres-sized network
benchmarks/gpu_check.py builds) to see whether the GPU ever waits for DICOM decoding.

``--totalsegmentator`` (issue #51) measures another row instead: 10 studies (real CT: ten 40-slice windows of
TotalSegmentator's example CT, 3 mm) with TotalSegmentator ``--fast``'s layout and random weights
(tests/model/ts_fixture.py: ``--network small`` its test size, ``--network real`` TotalSegmentator's own 3 mm
network size), run as ``medseg batch`` (one process: the network loaded once, kept for every study) and as
10 TotalSegmentator runs (2.18.0, installed as the test peer: one ``totalsegmentator(..., fast=True)`` process
per study, as its command line is used), at the same thread count. Printed: each peer's studies per hour
(median [min-max] over ``--repeats``), the ratio medseg / TotalSegmentator, and the labels' agreement.

    .venv/bin/python benchmarks/bench_batch.py --totalsegmentator [--repeats 2] [--threads 2] [--network small]
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))

# Every segmentable CT in shared/data (series folders, single slices, image files).
CASES = [
    "ct/totalsegmentator/example_ct_dicom",
    "ct/totalsegmentator/example_ct.nii.gz",
    "ct/totalsegmentator/example_ct_sm.nii.gz",
    "ct/dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing",
    "ct/dcm_qa_ct/Philips_Ingenuity_phantom_mixed_series",  # the 5 mm series (the largest)
    "ct/dcmqi_ct3slice_masks/image",
    "ct/pyradiomics_lung1/lung1_image.nrrd",
    "ct/dicom2nifti_testdata/gantry_tilt_siemens_iop_only",
    "ct/dicom2nifti_testdata/missing_slice_ge_lightspeed16",
    "ct/dicom2nifti_testdata/missing_slice_tilted_siemens",
    "ct/pydicom_data/693_UNCR.dcm",
    "ct/pydicom_data/explicit_VR-UN.dcm",
    "ct/pydicom_wheel_testfiles/J2K_pixelrep_mismatch.dcm",
    "ct/cornerstone_testimages/CT2_J2KR",
]


# The quick set: the cases of at most a few slices (about a tenth of the full set's voxels).
SMALL = [case for case in CASES if "dicom2nifti" in case or case.endswith((".dcm", "J2KR")) or "dcmqi" in case]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _manifest(folder: Path, cases: list[str]) -> Path:
    manifest = folder / "cases.csv"
    with open(manifest, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["path", "case_id"])
        for index, relative in enumerate(cases):
            writer.writerow([str(DATA / relative), f"{index:02d}_{Path(relative).name.split('.')[0]}"])
    return manifest


def _run(processes: int, threads: int, manifest: Path, out: Path, model: str | None, device: str) -> dict:
    launcher = [sys.executable, "-m", "medseg"] if processes == 1 else [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), "--master_addr",
        "127.0.0.1", "--master_port", str(_free_port()), "-m", "medseg"]
    command = [*launcher, "batch", str(manifest), "-o", str(out), "--json", "--threads", str(threads),
               "--device", device, *(["--model", model] if model else [])]
    env = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_PORT")}
    started = time.perf_counter()
    run = subprocess.run(command, capture_output=True, text=True, env=env, cwd=REPO)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"batch failed ({run.returncode}):\n{run.stderr[-3000:]}")
    done = [json.loads(line) for line in run.stdout.splitlines() if line.startswith('{"event": "done"')][-1]
    return {"wall_s": wall, "ok": done["counts"].get("ok", 0), "failed": done["counts"].get("failed", 0),
            "input_wait_share": done["input_wait_share"], "read_share": done["read_share"],
            "cases_per_hour": done["counts"].get("ok", 0) / wall * 3600}


def _ts_studies(work: Path, count: int = 10) -> list[Path]:
    """Ten 40-slice windows of TotalSegmentator's example CT (3 mm, 122 x 101 x 112), as NIfTI files."""
    import SimpleITK as sitk

    image = sitk.ReadImage(str(DATA / "ct" / "totalsegmentator" / "example_ct.nii.gz"))
    folder = work / "studies"
    folder.mkdir(parents=True, exist_ok=True)
    paths = []
    for index in range(count):
        start = index * (image.GetSize()[2] - 40) // max(1, count - 1)
        path = folder / f"study{index:02d}.nii.gz"
        sitk.WriteImage(image[:, :, start:start + 40], str(path))
        paths.append(path)
    return paths


def _ts_weights(work: Path, network: str) -> tuple[Path, Path]:
    """TotalSegmentator's weights folder for --fast (dataset 297, random weights) and medseg's conversion of it."""
    sys.path.insert(0, str(REPO / "tests" / "model"))
    from ts_fixture import make_totalseg_weights

    from medseg.model.totalseg import import_totalsegmentator_task

    size = {} if network == "small" else {"patch_size": (112, 112, 128), "n_stages": 6, "base_features": 32}
    weights = make_totalseg_weights(work / "weights", [297], **size)
    return weights, import_totalsegmentator_task(weights, work / "model")


def _ts_peer(studies: list[Path], out: Path, weights: Path, home: Path, threads: int) -> float:
    """TotalSegmentator 2.18.0 on each study, one process each (its --fast, multi-label output); wall seconds."""
    sys.path.insert(0, str(REPO / "tests" / "model"))
    from ts_peer import run_totalsegmentator

    out.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    for study in studies:
        run_totalsegmentator(study, out / study.name, weights, home, fast=True, threads=threads)
    return time.perf_counter() - started


def _ts_medseg(studies: list[Path], out: Path, model: Path, threads: int) -> float:
    started = time.perf_counter()
    run = subprocess.run([sys.executable, "-m", "medseg", "batch", *map(str, studies), "-o", str(out), "--model",
                          str(model), "--configuration", "3mm", "--threads", str(threads), "--json"],
                         capture_output=True, text=True, cwd=REPO)
    wall = time.perf_counter() - started
    if run.returncode != 0:
        raise SystemExit(f"medseg batch failed ({run.returncode}):\n{run.stderr[-3000:]}")
    return wall


def _agreement(ours: Path, theirs: Path) -> float:
    import SimpleITK as sitk

    sys.path.insert(0, str(REPO / "tests" / "model"))
    from ts_peer import read_multilabel

    mine = sitk.GetArrayFromImage(sitk.ReadImage(str(ours)))
    peer, _names = read_multilabel(theirs)
    return float((mine == peer).mean()) if mine.shape == peer.shape else float("nan")


def totalsegmentator_row(args: argparse.Namespace) -> int:
    with tempfile.TemporaryDirectory(prefix="bench_batch_ts_") as tmp:
        work = Path(tmp)
        studies = _ts_studies(work)
        weights, model = _ts_weights(work, args.network)
        rates: dict[str, list[float]] = {"medseg batch": [], "TotalSegmentator": []}
        agreements = []
        for repeat in range(args.repeats):  # interleaved
            ours = work / f"medseg_{repeat}"
            seconds = _ts_medseg(studies, ours, model, args.threads)
            rates["medseg batch"].append(len(studies) / seconds * 3600)
            theirs = work / f"totalseg_{repeat}"
            peer_seconds = _ts_peer(studies, theirs, weights, work / "home", args.threads)
            rates["TotalSegmentator"].append(len(studies) / peer_seconds * 3600)
            agreements += [_agreement(next(ours.glob(f"*{s.name.split('.')[0]}.nii.gz")), theirs / s.name)
                           for s in studies]
            print(f"  run {repeat + 1}: medseg batch {seconds:.1f} s, TotalSegmentator {peer_seconds:.1f} s "
                  f"({len(studies)} studies each)", flush=True)
    print(f"\n{len(studies)} studies (40-slice windows of example_ct, 3 mm), TotalSegmentator --fast layout, "
          f"{args.network} network, random weights; {args.threads} thread(s) each; median [min-max] over "
          f"{args.repeats} run(s); load average {os.getloadavg()[0]:.1f} at the end")
    for name, values in rates.items():
        print(f"  {name}: {statistics.median(values):.0f} studies/h [{min(values):.0f}-{max(values):.0f}]")
    pairs = [a / b for a, b in zip(rates["medseg batch"], rates["TotalSegmentator"])]
    ratio = statistics.median(rates["medseg batch"]) / statistics.median(rates["TotalSegmentator"])
    print(f"  medseg / TotalSegmentator studies per hour: {ratio:.2f}x (per pair {min(pairs):.2f}-{max(pairs):.2f}x; "
          f"goal >= 2x)")
    print(f"  labels equal to TotalSegmentator's: {min(agreements):.4%} of voxels at worst over "
          f"{len(agreements)} outputs")
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", help="model package (default: the starter)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--small", action="store_true", help=f"only the {len(SMALL)} cases of a few slices each")
    parser.add_argument("--totalsegmentator", action="store_true",
                        help="10 studies with TotalSegmentator --fast's layout: medseg batch vs 10 TotalSegmentator runs")
    parser.add_argument("--network", choices=("small", "real"), default="small",
                        help="with --totalsegmentator: the tests' small network or TotalSegmentator's own size")
    parser.add_argument("--threads", type=int, default=2, help="with --totalsegmentator: threads of each peer")
    args = parser.parse_args()
    if args.totalsegmentator:
        return totalsegmentator_row(args)
    cases = SMALL if args.small else CASES
    cores = os.cpu_count() or 2
    # (processes, threads each): the batch's default for one process (every core), one process on one thread
    # (what each of the two gets), and two processes
    setups = [(1, cores), (1, max(1, cores // 2)), (2, max(1, cores // 2))]
    results: dict[tuple[int, int], list[dict]] = {setup: [] for setup in setups}
    with tempfile.TemporaryDirectory(prefix="bench_batch_") as tmp:
        work = Path(tmp)
        manifest = _manifest(work, cases)
        for repeat in range(args.repeats):
            for processes, threads in setups:
                result = _run(processes, threads, manifest, work / f"out_{processes}x{threads}_{repeat}", args.model,
                              args.device)
                results[(processes, threads)].append(result)
                print(f"  run {repeat + 1}, {processes} process(es) x {threads} thread(s): {result['ok']} ok, "
                      f"{result['failed']} failed, "
                      f"{result['wall_s']:.1f} s, {result['cases_per_hour']:.0f} cases/h, network waited "
                      f"{result['input_wait_share']:.1%} (reading {result['read_share']:.1%})", flush=True)
    print(f"\n{len(cases)} real CT cases from shared/data{' (--small)' if args.small else ''}, starter model unless --model; {os.cpu_count()} CPU cores, "
          f"device {args.device}; median [min-max] over {args.repeats} run(s)")
    medians = {}
    for (processes, threads), runs in results.items():
        rates = [r["cases_per_hour"] for r in runs]
        medians[(processes, threads)] = statistics.median(rates)
        waits = [r["input_wait_share"] for r in runs]
        reads = [r["read_share"] for r in runs]
        print(f"  {processes} process(es) x {threads} thread(s): {medians[(processes, threads)]:.0f} cases/h "
              f"[{min(rates):.0f}-{max(rates):.0f}], "
              f"wall {statistics.median(r['wall_s'] for r in runs):.1f} s; network waiting for input "
              f"{statistics.median(waits):.1%} [{min(waits):.1%}-{max(waits):.1%}] with the prefetch, reading "
              f"{statistics.median(reads):.1%} of the time (the wait without it)")
    two = setups[2]
    for one in setups[:2]:
        pairs = [b["cases_per_hour"] / a["cases_per_hour"] for a, b in zip(results[one], results[two])]
        print(f"  2 processes / 1 process x {one[1]} thread(s): {medians[two] / medians[one]:.2f}x "
              f"(per pair {min(pairs):.2f}-{max(pairs):.2f}x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
