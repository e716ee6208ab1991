"""medseg's TotalSegmentator pipeline against TotalSegmentator 2.18.0 itself, side by side in one run.

Same weights (random, TotalSegmentator's layout and a network of nnU-Net's default CT size: patch
128^3, 6 stages, 32..320 features, PlainConvUNet), same NIfTI input, same thread count, each side a
process of its own (``medseg segment`` and TotalSegmentator's python API in tests/model/ts_peer.py),
alternating, >= 3 runs each. Peak memory is the whole process tree's resident set (psutil, sampled
every 20 ms: TotalSegmentator's nnU-Net starts worker processes). Prints the median wall time,
the spread (min..max), the ratios medseg / TotalSegmentator and the voxel agreement.

Cases: ``fast`` = --fast (3 mm) on pyradiomics' lung1 chest CT (512 x 512 x 48, 5 mm, stored LPS);
``total`` = the five 1.5 mm parts on a small CT (TotalSegmentator's example_ct_sm, 64 x 64 x 30 at 3 mm).

    .venv/bin/python benchmarks/bench_totalsegmentator.py [--runs 3] [--cases fast,total] [--threads 2]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import psutil
import SimpleITK as sitk

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "model"))
DATA = ROOT.parent / "shared" / "data" / "ct"
CASES = {
    "fast": ("3mm", DATA / "pyradiomics_lung1" / "lung1_image.nrrd", None),
    "total": ("1.5mm", DATA / "totalsegmentator" / "example_ct_sm.nii.gz", (slice(0, 30), slice(20, 84), slice(30, 94))),
}
NETWORK = {"patch_size": (128, 128, 128), "n_stages": 6, "base_features": 32}


def peak_tree_rss(command: list[str], env: dict[str, str]) -> tuple[float, int, subprocess.CompletedProcess]:
    """Run ``command``; wall seconds, peak resident bytes of it and all its children, the result."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak
        try:
            root = psutil.Process(process.pid)
        except psutil.Error:
            return
        while not done.is_set():
            total = 0
            try:
                for proc in [root, *root.children(recursive=True)]:
                    try:
                        total += proc.memory_info().rss
                    except psutil.Error:
                        pass
            except psutil.Error:
                pass
            peak = max(peak, total)
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done.set()
    sampler.join()
    return time.perf_counter() - started, peak, subprocess.CompletedProcess(command, process.returncode, stdout, stderr)


def prepare(work: Path) -> tuple[Path, Path]:
    from ts_fixture import make_totalseg_weights

    from medseg.model.totalseg import import_totalsegmentator_task

    weights = work / "weights"
    if not weights.is_dir():
        print("making TotalSegmentator-sized random weights (291-295, 297) ...", flush=True)
        make_totalseg_weights(weights, [291, 292, 293, 294, 295, 297], **NETWORK)
    model = work / "model"
    if not model.is_dir():
        import_totalsegmentator_task(weights, model)
    return weights, model


def case_input(work: Path, name: str) -> Path:
    _, source, crop = CASES[name]
    image = sitk.ReadImage(str(source))
    if crop is not None:
        z, y, x = crop
        image = image[x, y, z]
    path = work / f"{name}.nii.gz"
    sitk.WriteImage(image, str(path))
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="fast,total")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bench_totalsegmentator")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    weights, model = prepare(args.work)
    from ts_peer import peer_environment

    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; threads {args.threads}")
    results = {}
    for name in args.cases.split(","):
        configuration, _, _ = CASES[name]
        image = case_input(args.work, name)
        times: dict[str, list[float]] = {"medseg": [], "TotalSegmentator": []}
        peaks: dict[str, list[int]] = {"medseg": [], "TotalSegmentator": []}
        outputs = {}
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            scratch = Path(scratch)
            env_ts = peer_environment(weights, scratch / "home", args.threads)
            env_ms = dict(os.environ, OMP_NUM_THREADS=str(args.threads), MKL_NUM_THREADS=str(args.threads))
            request = scratch / "ts.request.json"
            request.write_text(json.dumps({"image": str(image), "output": str(scratch / "ts.nii.gz"),
                                           "fast": configuration == "3mm", "fastest": False, "roi_subset": None,
                                           "crop_mask": None, "force_split": False, "defaults": True}))
            commands = {
                "TotalSegmentator": [sys.executable, str(ROOT / "tests" / "model" / "ts_peer.py"), str(request)],
                "medseg": [sys.executable, "-m", "medseg", "segment", str(image), "--model", str(model),
                           "--configuration", configuration, "-o", str(scratch / "medseg.nii.gz"), "--device", "cpu",
                           "--threads", str(args.threads), "--force"],
            }
            for run in range(args.runs):
                for side in ("TotalSegmentator", "medseg"):
                    seconds, peak, completed = peak_tree_rss(commands[side], env_ts if side != "medseg" else env_ms)
                    if completed.returncode != 0:
                        print(completed.stdout[-2000:], completed.stderr[-2000:])
                        raise SystemExit(f"{side} failed on {name}")
                    times[side].append(seconds)
                    peaks[side].append(peak)
                    print(f"  {name} run {run + 1} {side:>16}: {seconds:7.1f} s, peak {peak / 2**30:5.2f} GiB "
                          f"(load {os.getloadavg()[0]:.1f})", flush=True)
            for side, file in (("TotalSegmentator", "ts.nii.gz"), ("medseg", "medseg.nii.gz")):
                outputs[side] = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / file)))
        agreement = float((outputs["medseg"] == outputs["TotalSegmentator"]).mean())
        median = {side: statistics.median(values) for side, values in times.items()}
        peak = {side: max(values) for side, values in peaks.items()}
        results[name] = {"seconds": times, "peak_bytes": peaks, "agreement": agreement}
        print(f"{name} ({configuration}, {image.name}, {outputs['medseg'].shape[::-1]}):")
        for side in times:
            print(f"  {side:>16}: median {median[side]:7.1f} s (spread {min(times[side]):.1f}..{max(times[side]):.1f}), "
                  f"peak {peak[side] / 2**30:.2f} GiB")
        print(f"  ratio medseg/TotalSegmentator: time {median['medseg'] / median['TotalSegmentator']:.2f}x, "
              f"peak memory {peak['medseg'] / peak['TotalSegmentator']:.2f}x; labels equal on {agreement:.5%} of voxels, "
              f"{len(np.unique(outputs['TotalSegmentator']))} labels")
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    (args.work / "results.json").write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
