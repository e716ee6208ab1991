"""How soon Segment's Cancel takes while the image is being prepared (issue #42.17).

Side by side in one run, on the largest real CT in shared/data (lung1, 512 × 512 × 48) and the
starter model on the CPU: the preparation (crop, normalise, resample for the network) is started
in a worker thread and cancelled ``--after`` seconds in; printed is the time from the cancel to
the worker's end,

- **inside**: the cancel token handed to the preparation (looked at before every slab), as now;
- **after**: the token looked at only once the preparation returns, as before #42.17 (a
  user saw 9.6 s on a larger CT).

Median and min-max over ``--repeats`` runs each, alternating, and their ratio.

    .venv/bin/python benchmarks/bench_cancel.py [--repeats 3] [--after SECONDS]
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))


def _latency(volume, package, inside: bool, after_s: float) -> float:
    from medseg.errors import Cancelled
    from medseg.model.infer import prepare
    from medseg.progress import CancelToken

    token = CancelToken()
    ended: list[float] = []

    def work() -> None:
        try:
            prepare(volume, package, device="cpu", cancel=token if inside else None)
            token.raise_if_cancelled()  # where segment() looked before: after the preparation
        except Cancelled:
            pass
        ended.append(time.perf_counter())

    worker = threading.Thread(target=work)
    worker.start()
    time.sleep(after_s)
    cancelled_at = time.perf_counter()
    token.cancel()
    worker.join()
    return ended[0] - cancelled_at


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--after", type=float, default=None,
                        help="seconds into the preparation to cancel (default: a third of a warm preparation)")
    args = parser.parse_args()
    import torch

    from medseg.io import read_image
    from medseg.model.infer import prepare
    from medseg.model.package import load_package, starter_model_path

    volume = read_image(DATA / "ct" / "pyradiomics_lung1" / "lung1_image.nrrd")
    package = load_package(starter_model_path())
    prepare(volume, package, device="cpu")  # warm: the resampling operators cached, pages touched
    timed: list[float] = []

    def whole_run() -> None:  # in a worker thread, as the GUI's job runs it
        started = time.perf_counter()
        prepare(volume, package, device="cpu")
        timed.append(time.perf_counter() - started)

    worker = threading.Thread(target=whole_run)
    worker.start()
    worker.join()
    whole = timed[0]
    after = args.after if args.after is not None else whole / 3
    results: dict[str, list[float]] = {"inside": [], "after": []}
    for _ in range(args.repeats):
        for mode in results:
            results[mode].append(_latency(volume, package, mode == "inside", after))
    print(f"lung1 {volume.size_xyz}, starter model, CPU ({torch.get_num_threads()} threads); "
          f"the whole (warm) preparation takes {whole:.2f} s; cancelled {after:.2f} s in")
    for mode, values in results.items():
        print(f"  cancel looked at {mode:>6} the preparation: {statistics.median(values):.3f} s to stop "
              f"(min {min(values):.3f}, max {max(values):.3f}, {len(values)} runs)")
    ratio = statistics.median(results["after"]) / max(statistics.median(results["inside"]), 1e-6)
    print(f"  ratio after / inside: {ratio:.1f}x")


if __name__ == "__main__":
    main()
