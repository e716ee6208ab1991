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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--model", help="model package (default: the starter)")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--small", action="store_true", help=f"only the {len(SMALL)} cases of a few slices each")
    args = parser.parse_args()
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
