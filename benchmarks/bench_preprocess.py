"""Preprocessing and export on the CPU: main's path (numpy + scipy.ndimage.zoom) vs this one (torch).

Issue #27 moved the image resampling (nnU-Net's default: skimage resize = scipy.ndimage.zoom,
cubic B-spline, one CPU thread) and the normalisation to torch operations on the run's
device; on the CPU they use every intra-op thread. This measures the two side by side in one
process, interleaved, on real CT (shared/data pyradiomics_lung1):

* "thick": lung1 as acquired, 512 x 512 x 48 at 0.57 x 0.57 x 5 mm, to 1.5 mm (anisotropic:
  each slice resized in-plane, nearest neighbour across);
* "thin": lung1 interpolated to 0.8 mm slices (512 x 512 x 300, as bench_infer.py), to 1.5 mm
  isotropic (a 3D cubic zoom of every axis: the 9.5 s of the issue's GPU profile).

Peers, per case:
* preprocess, scipy: ``preprocess.normalize`` + ``preprocess.resample_image`` on a float32 copy
  of the crop (what ``preprocess`` did before issue #27; the reference the tests compare against);
* preprocess, torch: ``preprocess.preprocess_to(volume, plan, "cpu")``;
* export, main: main's ``logits_to_label_map`` (its module taken from ``git show main:...``)
  on 14-class float16 logits of the network's shape;
* export, torch: this tree's ``logits_to_label_map`` on the same logits and the same grid.

Printed: the median seconds of each peer, the spread (min-max) over the repeats, the ratio
torch/scipy with its spread (ratio of each interleaved pair), and whether the outputs agree.

Run: nice -n 10 .venv/bin/python benchmarks/bench_preprocess.py [--cases thick thin] [--repeats 3] [--threads 2]
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(REPO / "tests" / "model"))

from bench_infer import CT, thin_ct  # noqa: E402
from infer_fixtures import scipy_preprocessed  # noqa: E402

PLAN_SPACING = (1.5, 1.5, 1.5)
LABELS = 14


# The export before issue #27 (numpy + scipy), the parent of the commit that moved it to torch: "main" in
# this benchmark's names, as it was when the benchmark was written.
BEFORE_TORCH = "ea09392^"


def main_preprocess_module(work: Path):
    """The pre-torch medseg/model/preprocess.py as a module of its own (the peer the torch path replaced)."""
    source = subprocess.run(["git", "-C", str(REPO), "show", f"{BEFORE_TORCH}:medseg/model/preprocess.py"],
                            check=True, capture_output=True, text=True).stdout
    path = work / "preprocess_main.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("preprocess_main", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["preprocess_main"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def timed(function):
    started = time.perf_counter()
    result = function()
    return time.perf_counter() - started, result


def spread(values: list[float]) -> str:
    return f"{statistics.median(values):7.2f} s  ({min(values):.2f}-{max(values):.2f})"


def ratio(numerators: list[float], denominators: list[float]) -> str:
    pairs = [n / d for n, d in zip(numerators, denominators)]
    return f"{statistics.median(pairs):.2f}x  ({min(pairs):.2f}-{max(pairs):.2f})"


def bench_case(name: str, ct: Path, plan, main_pp, repeats: int) -> list[str]:
    import numpy as np
    import torch

    from medseg.io import load
    from medseg.model import logits_grid as lg
    from medseg.model import preprocess as pp

    volume = load(ct)
    times: dict[str, list[float]] = {"scipy": [], "torch": [], "export-main": [], "export-torch": []}
    prep_main = logits = None
    for _ in range(repeats):
        seconds, reference = timed(lambda: scipy_preprocessed(volume, plan))
        times["scipy"].append(seconds)
        seconds, prep = timed(lambda: pp.preprocess_to(volume, plan, "cpu"))
        times["torch"].append(seconds)
        difference = float(np.abs(prep.data.numpy() - reference).max())
        if logits is None:
            prep_main = main_pp.preprocess(volume, plan)
            generator = torch.Generator().manual_seed(0)
            # smooth random logits: labels in regions, as a network's, not salt and pepper
            coarse = torch.randn((1, LABELS, *[max(2, n // 16) for n in prep.data.shape[1:]]), generator=generator)
            logits = torch.nn.functional.interpolate(coarse, size=tuple(prep.data.shape[1:]), mode="trilinear")[0].half()
        del reference
        seconds, labels_main = timed(lambda: main_pp.logits_to_label_map(logits, prep_main))
        times["export-main"].append(seconds)
        seconds, labels = timed(lambda: lg.logits_to_label_map(logits, prep))
        times["export-torch"].append(seconds)
        same_labels = float((labels == labels_main).mean())
    lines = [f"{name}: {tuple(volume.shape_zyx)} at {tuple(round(s, 3) for s in volume.spacing_zyx)} mm -> "
             f"{tuple(prep.data.shape[1:])} at {PLAN_SPACING} mm; {LABELS} classes; {repeats} repeats, median (min-max)",
             f"  preprocess  scipy (main) {spread(times['scipy'])}",
             f"  preprocess  torch        {spread(times['torch'])}   torch/scipy {ratio(times['torch'], times['scipy'])}"
             f"   max |torch - scipy| {difference:.3g}",
             f"  export      main         {spread(times['export-main'])}",
             f"  export      torch        {spread(times['export-torch'])}   torch/main "
             f"{ratio(times['export-torch'], times['export-main'])}   labels equal on {100 * same_labels:.4f} %"]
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cases", nargs="+", default=["thick", "thin"], choices=["thick", "thin"])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()

    import torch
    from nnunet_fixture import make_nnunet_result_folder

    from medseg.model.nnunet_import import import_nnunet

    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} intra-op threads")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        main_pp = main_preprocess_module(work)
        folder = make_nnunet_result_folder(work / "model", spacing_zyx=PLAN_SPACING, base_features=4, n_stages=3,
                                           labels=["background"] + [f"organ_{i}" for i in range(1, LABELS)])
        plan = import_nnunet(folder).configurations["3d_fullres"]
        for name in args.cases:
            ct = CT if name == "thick" else thin_ct(work)
            for line in bench_case(name, ct, plan, main_pp, args.repeats):
                print(line, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
