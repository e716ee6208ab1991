"""The faster tier against the exact path (issue #51 item 3): int8 (NNCF) and bf16 vs float32, time and agreement.

For each network, ``medseg.workflows.precision.verify_tier`` builds the int8 tier on this machine and runs
the reference series through the exact path (PyTorch float32, what ``--device cpu`` runs), OpenVINO
float32 (the exact path's other engine) and the int8 tier, each one sliding-window pass at step 1 on the
network's grid; the gate compares the labels. Then the same for bf16 (OpenVINO's bf16 inference precision,
only where the CPU computes it natively: refused without a run elsewhere). Printed per network and tier: each
engine's time, the tier's ratio to each and to the faster exact engine, the voxel agreement, the lowest Dice
of a structure of >= 1000 voxels, whether the tier is offered, and how the int8 model was made (which
convolutions stayed float32, the calibration tiles' agreement of each candidate).

* ``starter``: the shipped 2D starter (trained here: confident outputs) on TotalSegmentator's example CT
  (3 mm, 122 x 101 x 112, abdomen with the lung bases);
* ``fast``: a TotalSegmentator ``--fast``-sized 3D network (nnU-Net's planner: 6 stages, 32 -> 320
  features, patch 128^3, 3 mm, 14 labels) with RANDOM weights from a seed (the published weights are
  unreachable here), on pyradiomics' lung1 CT; its gate is expected to refuse (random weights have no
  confident outputs): the row shows int8's speed on a network of that size and by how much it misses;
* ``medium``: a smaller 3D network of the same planner (5 stages, 32 -> 256 features, patch 64^3, 3 mm,
  14 labels, random weights) on the middle 24 slices of lung1: the larger network that finishes in minutes
  on a busy 2-core machine.

Run: .venv/bin/python benchmarks/bench_precision.py [--threads 2] [--networks starter medium fast] [--tiers int8 bf16]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_infer

REFERENCES = {"starter": bench_infer.SHARED / "ct" / "totalsegmentator" / "example_ct.nii.gz",
              "fast": bench_infer.CT, "medium": None}
MEDIUM = {"spacing_zyx": (3.0, 3.0, 3.0), "patch_size": (64, 64, 64), "n_stages": 5, "base_features": 32, "seed": 3}


def model_for(network: str, work: Path) -> str | Path:
    if network == "starter":
        return "starter"
    if network == "medium":
        sys.path.insert(0, str(bench_infer.REPO / "tests" / "model"))
        from nnunet_fixture import make_nnunet_result_folder

        names = ["background"] + [f"organ_{i}" for i in range(1, 14)]
        return make_nnunet_result_folder(work / "results-medium", labels=names, **MEDIUM)
    return bench_infer.build_model(work / "results", 14, network)


def row(network: str, record, seconds: float) -> str:
    times = record.seconds
    tier = times.get(record.precision)
    lowest = min(record.dice.values()) if record.dice else float("nan")
    exact = min(times.get("f32", float("inf")), times.get("openvino-f32", float("inf")))
    ratios = (f"{tier / times['f32']:.2f}x PyTorch, {tier / times['openvino-f32']:.2f}x OpenVINO f32, "
              f"{tier / exact:.2f}x the faster exact engine" if tier else "not run")
    return (f"{network:8s} PyTorch f32 {times.get('f32', float('nan')):7.1f} s | OpenVINO f32 "
            f"{times.get('openvino-f32', float('nan')):7.1f} s | {record.precision} {tier or float('nan'):7.1f} s "
            f"({ratios}) | "
            f"agreement {record.agreement:.4%} | lowest Dice {lowest:.4f} | "
            f"{'OFFERED' if record.offered else 'refused: ' + '; '.join(record.shortfalls)} | "
            f"build+gate {seconds:.0f} s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--networks", nargs="+", choices=("starter", "fast", "medium"), default=["starter", "fast"])
    parser.add_argument("--tiers", nargs="+", choices=("int8", "bf16"), default=["int8", "bf16"],
                        help="the tiers to build and gate (bf16 is refused, nothing run, on a CPU without it)")
    parser.add_argument("--accuracy-control", action="store_true",
                        help="let NNCF keep more layers in float32 where the quick quantization falls short (slow)")
    parser.add_argument("--work", help="folder for the models and the cache (default: a new temporary one)")
    args = parser.parse_args()
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_precision_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEDSEG_CACHE_DIR", str(work / "cache"))

    from medseg import threads as medseg_threads
    from medseg.model.precision_tier import bf16_support, tier_machine
    from medseg.workflows.precision import verify_tier

    medseg_threads.configure(args.threads)
    print(f"== bench_precision: {tier_machine()}, {args.threads} threads, load average {os.getloadavg()[0]:.1f}")
    print(f"   bf16: {bf16_support()[1]}")
    for network in args.networks:
        model = model_for(network, work)
        reference = REFERENCES[network] or bench_infer.cropped_ct(work, 24)
        for tier in args.tiers:
            started = time.perf_counter()
            records = verify_tier(model, tier, reference, threads=args.threads, accuracy_control=args.accuracy_control)
            seconds = time.perf_counter() - started
            for record in records:
                print(row(f"{network}", record, seconds), flush=True)
                print(f"         {record.method}   (load average now {os.getloadavg()[0]:.1f})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
