"""The interactive session's small first patch against its exact mode (and nnInteractive), on real prompts.

The prompts are the written-down sequence of the parity test (tests/model/test_interactive_parity.py): on the
lung1 tumour, a positive point, a box on its slice, a negative point, a scribble and a lasso, here placed on the
whole lung1 CT (48 x 512 x 512). One checkpoint for all: nnInteractive's exact folder layout with random weights
(tests/model/interactive_fixture.py), the published architecture (ResEnc L, 192^3 patch; ``--patch`` for a
smaller trial). Each mode runs the whole sequence in its own process with the same threads, each prompt timed
(wall and CPU seconds) with its peak memory (the process's VmHWM, reset at each prompt: benchmarks/rss_phases.py):

* ``exact``: medseg's exact mode (nnInteractive's result; PyTorch, the runtime the small patch also runs on);
* ``small-first``: ``InteractiveSession(small_first=True)``: half the patch first (96^3 at 192^3), the exact path
  when its answer changes anything on that cube's faces;
* ``nninteractive``: nnInteractive 2.6.0's own session on the CPU (``--no-peer`` leaves it out).

``--noise-floor`` adds two runs that say how to read the exact mode's agreement with nnInteractive after several
prompts (``--no-small-first`` leaves the small-first mode out when only that is wanted):

* ``nninteractive-other-threads``: nnInteractive again with another thread count (1, or 2 when ``--threads 1``):
  the same code, only the order of some float sums changes. What it departs from nnInteractive by is the noise
  floor: a random network has many voxels whose two logits nearly tie, a rounding difference flips some of them,
  the flipped voxels are the next prompt's previous-answer channel, and the network carries that into the
  voxels around them, prompt after prompt. Whether a rounding difference flips any voxel at all is chance: at
  192^3 one voxel of the first click's object (logits 1e-7 apart) flipped, and nnInteractive on 1 thread ended
  at Dice 0.82 against itself on 2 threads, as medseg's exact mode did; at 64^3 none flipped (0 voxels);
* ``exact-module``: medseg's exact mode with the network run by its plain PyTorch module forward (no oneDNN
  reroute, no lean forward): nnInteractive's own arithmetic, so any voxel that differs from nnInteractive here is
  medseg's session (crop, prompt channels, previous answer, paste), not rounding.

Per prompt it prints, for each of these and the exact mode, the voxels that differ from nnInteractive and Dice.

AutoZoom is off in all (as in bench_interactive.py: random weights reach the patch's faces and the exact path would
zoom out 4x and refine the whole slab, the same passes in every mode, only many more of them); ``--autozoom``
turns it on. After every prompt the small-first object is compared with the exact one: the voxels that differ,
the agreement within the box around both objects, and Dice.

What this can show with random weights: what each prompt costs in each mode and whether the half patch was kept
or fell back; *not* whether a trained model's answer on the half patch is its answer on the full one (a random
network's object is a texture set by its bias, not a structure; how a trained network's answer moves with the
patch is the question a measurement with the published weights must answer before the mode can be the default).

Run: .venv/bin/python benchmarks/bench_interactive_small_first.py [--threads 2] [--repeats 1] [--patch 192]
     [--output-bias 0] [--no-peer]
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

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "model"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
LUNG = SHARED / "ct" / "pyradiomics_lung1"
CROP_START = (16, 312, 170)  # the parity test's crop of lung1 (z, y, x): its prompts are written on it
MODES = ("exact", "small-first", "nninteractive")
FLOOR_MODES = ("exact-module", "nninteractive-other-threads")
SHORT = {"nninteractive": "nnI", "nninteractive-other-threads": "nnI other thr"}  # the memory columns' heads
NAMES = ("point +", "box +", "point -", "scribble +", "lasso +")


def _image_and_prompts():
    """lung1 and the parity test's prompt sequence, moved from its crop onto the whole image."""
    import numpy as np
    import SimpleITK as sitk
    from test_interactive_parity import CROP, _prompts

    image = sitk.GetArrayFromImage(sitk.ReadImage(str(LUNG / "lung1_image.nrrd")))
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(LUNG / "lung1_label.nrrd")))[CROP]
    centre = [int(round(c.mean())) for c in np.nonzero(tumour)]
    prompts = []
    for kind, argument, positive in _prompts(centre):
        if kind == "point":
            argument = [c + o for c, o in zip(argument, CROP_START)]
        elif kind == "box":
            argument = [[a + o, b + o] for (a, b), o in zip(argument, CROP_START)]
        else:
            mask, origin = argument
            argument = (mask, [c + o for c, o in zip(origin, CROP_START)])
        prompts.append((kind, argument, positive))
    return image, prompts


def child(mode: str, folder: str, threads: int, autozoom: bool) -> dict:
    import numpy as np
    import torch
    from interactive_fixture import nninteractive_prompt
    from rss_phases import PhasePeaks

    if mode == "nninteractive-other-threads":
        threads = 2 if threads == 1 else 1
    torch.set_num_threads(threads)
    peaks = PhasePeaks()
    image, prompts = _image_and_prompts()
    if mode.startswith("nninteractive"):
        from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

        session = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=threads,
                                                do_autozoom=autozoom)
        session.initialize_from_trained_model_folder(folder)
        session.set_image(image[None])
        target = np.zeros(image.shape, np.uint8)
        session.set_target_buffer(target)
    else:
        from medseg.model.interactive.model_files import load_interactive_model
        from medseg.model.interactive.session import InteractiveSession

        model = load_interactive_model(folder)
        runner = None
        if mode == "exact-module":  # nnInteractive's own arithmetic: the module forward, PyTorch's default kernels
            from medseg.model.backends import TorchRunner

            runner = TorchRunner([model.build_network()], "cpu", onednn=False, lean=False)
        session = InteractiveSession(model, "cpu", runtime="torch", autozoom=autozoom, runner=runner,
                                     small_first=mode == "small-first")
        session.set_image(image)
    rows = []
    for index, (kind, argument, positive) in enumerate(prompts):
        peaks.push(f"prompt {index}")
        np.random.seed(0)  # nnInteractive's unseeded refinement fallback (medseg seeds its own with 0)
        started, cpu_started = time.perf_counter(), time.process_time()
        report = None
        if mode.startswith("nninteractive"):
            nninteractive_prompt(session, kind, argument, positive, image.shape)
        elif kind == "point":
            report = session.add_point(argument, positive)
        elif kind == "box":
            report = session.add_box(argument, positive)
        else:
            mask, origin = argument
            report = (session.add_scribble if kind == "scribble" else session.add_lasso)(mask, origin, positive)
        seconds, cpu = time.perf_counter() - started, time.process_time() - cpu_started
        peaks.pop()
        mask = target if mode.startswith("nninteractive") else session.mask
        out = Path(folder).parent / f"{mode}-{index}.npy"
        np.save(out, mask)
        rows.append({"seconds": seconds, "cpu": cpu, "mask": str(out),
                     "mode": report.mode if report else "", "passes": report.passes if report else 0,
                     "first_patch": list(report.first_patch) if report else []})
    peak = {row["phase"]: row["peak_mb"] for row in peaks.finish()}
    for index, row in enumerate(rows):
        row["peak_mb"] = peak[f"prompt {index}"]
    return {"mode": mode, "rows": rows}


def _run_child(args: list[str]) -> dict:
    process = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if process.returncode != 0:
        sys.stderr.write(process.stdout[-3000:] + process.stderr[-5000:])
        raise SystemExit(f"child {args[:2]} failed")
    return json.loads(process.stdout.strip().splitlines()[-1])


def _compare(a, b) -> tuple[int, float, float]:
    """Voxels that differ, agreement within the box around both objects, Dice."""
    import numpy as np

    a, b = a.astype(bool), b.astype(bool)
    both = a | b
    differ = int((a != b).sum())
    if not both.any():
        return differ, 1.0, 1.0
    box = tuple(slice(int(idx.min()), int(idx.max()) + 1) for idx in np.nonzero(both))
    agreement = float((a[box] == b[box]).mean())
    return differ, agreement, float(2 * (a & b).sum() / (a.sum() + b.sum()))


def _spread(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} ({min(values):.1f}-{max(values):.1f})" if len(values) > 1 \
        else f"{values[0]:.1f}"


def _small_first_table(runs: dict, modes: tuple) -> None:
    import numpy as np

    print(f"\n{'prompt':12s}{'small-first ran':>28s}{'passes':>8s}"
          + "".join(f"{m + ' CPU s':>22s}" for m in modes) + f"{'small/exact':>13s}"
          + (f"{'small/nnI':>11s}{'exact/nnI':>11s}" if "nninteractive" in modes else "")
          + "".join(f"{m[:5] + ' MB':>10s}" for m in modes)
          + f"{'differ':>9s}{'agreement':>11s}{'Dice':>8s}")
    totals = {mode: 0.0 for mode in modes}
    for index, name in enumerate(NAMES):
        cpu = {mode: [run["rows"][index]["cpu"] for run in runs[mode]] for mode in modes}
        median = {mode: statistics.median(values) for mode, values in cpu.items()}
        for mode in modes:
            totals[mode] += median[mode]
        last = runs["small-first"][-1]["rows"][index]
        small = np.load(last["mask"])
        exact = np.load(runs["exact"][-1]["rows"][index]["mask"])
        differ, agreement, dice = _compare(small, exact)
        ran = f"{last['mode']} {'x'.join(map(str, last['first_patch']))}"
        line = f"{name:12s}{ran:>28s}{last['passes']:>8d}" + "".join(f"{_spread(cpu[m]):>22s}" for m in modes)
        line += f"{median['small-first'] / median['exact']:>13.2f}"
        if "nninteractive" in modes:
            line += f"{median['small-first'] / median['nninteractive']:>11.2f}"
            line += f"{median['exact'] / median['nninteractive']:>11.2f}"
        line += "".join(f"{max(run['rows'][index]['peak_mb'] for run in runs[m]):>10.0f}" for m in modes)
        print(line + f"{differ:>9d}{agreement:>11.6f}{dice:>8.4f}")
    print("total CPU s  " + ", ".join(f"{mode} {totals[mode]:.1f}" for mode in modes)
          + f"; small-first / exact {totals['small-first'] / totals['exact']:.2f}"
          + (f"; small-first / nnInteractive {totals['small-first'] / totals['nninteractive']:.2f}"
             if "nninteractive" in modes else ""))


def _cpu_table(runs: dict, modes: tuple) -> None:
    print(f"\n{'prompt':12s}" + "".join(f"{m + ' CPU s':>34s}" for m in modes)
          + "".join(f"{SHORT.get(m, m) + ' MB':>18s}" for m in modes))
    for index, name in enumerate(NAMES):
        line = f"{name:12s}" + "".join(f"{_spread([run['rows'][index]['cpu'] for run in runs[m]]):>34s}" for m in modes)
        line += "".join(f"{max(run['rows'][index]['peak_mb'] for run in runs[m]):>18.0f}" for m in modes)
        print(line)


def _agreement_table(runs: dict, modes: tuple) -> None:
    """Per prompt, each mode's object against nnInteractive's (the last run of each): the voxels that differ, Dice.
    nnInteractive at other threads beside it is the noise floor (see the module's text)."""
    import numpy as np

    others = [mode for mode in modes if mode not in ("nninteractive", "small-first")]
    print(f"\nagainst nnInteractive ({', '.join(others)}): voxels that differ / Dice, after each prompt")
    print(f"{'prompt':12s}" + "".join(f"{m:>34s}" for m in others))
    for index, name in enumerate(NAMES):
        peer = np.load(runs["nninteractive"][-1]["rows"][index]["mask"])
        line = f"{name:12s}"
        for mode in others:
            differ, _, dice = _compare(np.load(runs[mode][-1]["rows"][index]["mask"]), peer)
            line += f"{f'{differ} / {dice:.4f}':>34s}"
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--patch", type=int, default=192)
    parser.add_argument("--output-bias", type=float, default=0.0, help="the random network's object/background balance")
    parser.add_argument("--autozoom", action="store_true")
    parser.add_argument("--no-peer", action="store_true", help="leave nnInteractive out")
    parser.add_argument("--noise-floor", action="store_true",
                        help="add nnInteractive at another thread count and medseg's exact mode on the module forward")
    parser.add_argument("--no-small-first", action="store_true", help="leave the small-first mode out")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "FOLDER"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.threads, args.autozoom)))
        return


    from interactive_fixture import REAL, make_nninteractive_folder

    modes = MODES[:2] if args.no_peer else MODES
    if args.noise_floor:
        if args.no_peer:
            parser.error("--noise-floor compares with nnInteractive: it needs the peer")
        modes += FLOOR_MODES
    if args.no_small_first:
        modes = tuple(mode for mode in modes if mode != "small-first")
    with tempfile.TemporaryDirectory(prefix="bench_small_first_") as temp:
        folder = make_nninteractive_folder(Path(temp), **dict(REAL, patch_size=(args.patch,) * 3), max_features=320,
                                           seed=0, output_bias=args.output_bias)
        load = os.getloadavg()
        print(f"nnInteractive-layout checkpoint, random weights (output bias {args.output_bias}), patch {args.patch}^3; "
              f"lung1 48 x 512 x 512, the parity test's 5 prompts; {args.threads} threads of {os.cpu_count()} cores; "
              f"AutoZoom {'on' if args.autozoom else 'off'}; load average at start {load[0]:.1f}, {load[1]:.1f}, "
              f"{load[2]:.1f}", flush=True)
        runs: dict[str, list[dict]] = {mode: [] for mode in modes}
        common = ["--threads", str(args.threads)] + (["--autozoom"] if args.autozoom else [])
        for repeat in range(args.repeats):
            for mode in (modes if repeat % 2 == 0 else modes[::-1]):  # interleaved, alternating order
                result = _run_child(["--child", mode, str(folder), *common])
                runs[mode].append(result)
                print(f"  run {repeat + 1} {mode:13s} CPU s per prompt "
                      + ", ".join(f"{r['cpu']:.1f}" for r in result["rows"]), flush=True)
        if "small-first" in modes:
            _small_first_table(runs, modes)
        else:
            _cpu_table(runs, modes)
        if "nninteractive" in modes:
            _agreement_table(runs, modes)
        load = os.getloadavg()
        print(f"load average at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} (other processes share the cores)")


if __name__ == "__main__":
    main()
