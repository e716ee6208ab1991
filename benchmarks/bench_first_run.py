"""The first Segment against the second, on the command line (issue #51: no first-run penalty).

The first ``medseg segment`` with a model on a machine used to measure the CPU engines (PyTorch, ONNX
Runtime, OpenVINO) on the image's middle tile before it segmented: the nnU-Net-sized model's first run
took 2.2x its second. The measurement now happens at install (medseg.model.engine_measurement, on a small
tile) and a run with no measurement runs the default engine at once. Here, per model and ``--repeats``
rounds, each round in a fresh cache folder (nothing measured, no ONNX export kept):

* ``installed``: the install's measurement (a process of its own, timed and printed), then ``medseg
  segment`` twice: first and second (each a fresh process: wall time, and the segmentation's own seconds);
* ``not measured``: ``medseg segment`` twice with nothing measured (the model installed by hand, or a
  machine that changed): the default engine at once, both times;
* ``before`` (with ``--before CHECKOUT``, e.g. the main checkout without this change): that checkout's
  ``medseg segment`` twice in a fresh cache, whose first run measured inline.

Printed: each run, then per model and scenario the ratio first / second (median and min-max over the
rounds) and each run's engine. The goal: first / second <= 1.1.

Models: the built-in starter (its 2D network, on lung1: 512 x 512 x 48 at 5 mm) and a TotalSegmentator-
sized network (nnU-Net's planner: 6 stages, 32 -> 320 features, patch 128^3, random weights; benchmarks/
bench_infer.py's "fast" at 3 mm, or "fullres" at 1.5 mm with ``--size full``) on the same CT.

Run: .venv/bin/python benchmarks/bench_first_run.py [--repeats 3] [--threads 2] [--size small|full]
        [--models starter ts] [--before /path/to/old/checkout]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_infer

REPO = Path(__file__).resolve().parents[1]
GOAL = 1.10


def _segment(checkout: Path, model: str, image: Path, out: Path, cache: Path, threads: int) -> dict:
    """One ``medseg segment`` process of ``checkout``: its wall time and its done event."""
    env = {**os.environ, "MEDSEG_CACHE_DIR": str(cache), "PYTHONPATH": str(checkout)}
    env.pop("MEDSEG_CPU_ENGINE", None)
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "medseg", "segment", str(image), "-o", str(out), "--json", "--force",
                           "--threads", str(threads), *(["--model", model] if model != "starter" else [])],
                          capture_output=True, text=True, cwd=checkout, env=env)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"medseg segment failed:\n{done.stderr[-3000:]}")
    event = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")][-1]
    engine = event.get("cpu_engine") or {}
    return {"wall_s": round(wall, 2), "seconds": event.get("seconds"), "engine": engine.get("engine", "?"),
            "measured": engine.get("measured")}


def _install_measurement(model: str, cache: Path, threads: int) -> dict:
    """What an install does after the files are in place: the engine measurement, in a process of its own."""
    code = ("import json, sys, time\n"
            "from medseg import threads; threads.configure(int(sys.argv[2]))\n"
            "from medseg.model.engine_measurement import measure_opened\n"
            "from medseg.workflows.models import open_model\n"
            "started = time.perf_counter()\n"
            "done = measure_opened(open_model(None if sys.argv[1] == 'starter' else sys.argv[1]))\n"
            "print(json.dumps({'seconds': time.perf_counter() - started,\n"
            "                  'choices': {c: [x.engine, x.seconds] for c, x in done}}))\n")
    env = {**os.environ, "MEDSEG_CACHE_DIR": str(cache), "PYTHONPATH": str(REPO)}
    env.pop("MEDSEG_CPU_ENGINE", None)
    done = subprocess.run([sys.executable, "-c", code, model, str(threads)], capture_output=True, text=True,
                          cwd=REPO, env=env)
    if done.returncode != 0:
        raise SystemExit(f"the measurement failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.2f}x ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--size", choices=("small", "full"), default="small",
                        help="small: the TotalSegmentator-sized network at 3 mm (its --fast); full: at 1.5 mm")
    parser.add_argument("--models", nargs="+", default=["starter", "ts"], choices=("starter", "ts"))
    parser.add_argument("--scenarios", nargs="+", default=["installed", "not measured"],
                        choices=("installed", "not measured"))
    parser.add_argument("--before", type=Path, help="an older checkout whose first run measured inline")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="medseg-first-run-"))
    image = bench_infer.CT
    models = {}
    if "starter" in args.models:
        models["starter"] = "starter"
    if "ts" in args.models:
        network = "fast" if args.size == "small" else "fullres"
        models[f"TotalSegmentator-sized ({network})"] = str(bench_infer.build_model(work / "ts", 14, network))
    scenarios = list(args.scenarios) + (["before"] if args.before else [])
    print(f"CT {image.name}; {args.threads} thread(s); {args.repeats} round(s); load average "
          f"{os.getloadavg()[0]:.1f} at start", flush=True)
    ratios: dict[tuple[str, str], list[float]] = {}
    for round_ in range(args.repeats):
        for name, model in models.items():
            for scenario in scenarios:  # interleaved: each round runs every model and scenario once
                cache = work / f"cache-{round_}-{len(ratios)}-{scenario.replace(' ', '-')}"
                checkout = args.before if scenario == "before" else REPO
                note = ""
                if scenario == "installed":
                    measured = _install_measurement(model, cache, args.threads)
                    note = f"install's measurement {measured['seconds']:.1f} s: {measured['choices']}"
                first = _segment(checkout, model, image, work / "out.nii.gz", cache, args.threads)
                second = _segment(checkout, model, image, work / "out.nii.gz", cache, args.threads)
                ratio = first["wall_s"] / second["wall_s"]
                ratios.setdefault((name, scenario), []).append(ratio)
                print(f"round {round_ + 1} {name} [{scenario}]: first {first['wall_s']} s ({first['engine']}, "
                      f"segmentation {first['seconds']} s), second {second['wall_s']} s ({second['engine']}, "
                      f"segmentation {second['seconds']} s): {ratio:.2f}x {note}", flush=True)
    print("\nfirst / second Segment (CLI, wall time of each process; median (min-max) over the rounds):")
    for (name, scenario), values in ratios.items():
        mark = "meets" if statistics.median(values) <= GOAL else "misses"
        print(f"  {name:<36} {scenario:<13} {_spread(values)}  ({mark} <= {GOAL:.2f}x)")


if __name__ == "__main__":
    main()
