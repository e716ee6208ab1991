"""A click's cost on the CPU: medseg's interactive session vs nnInteractive 2.6.0's, side by side.

Both run the same nnInteractive checkpoint: the published architecture (ResEnc L, 6 stages,
32 -> 320 features, 8 inputs, 192^3 patch, about 103 M parameters) with random weights in
nnInteractive's exact folder layout (tests/model/interactive_fixture.py), written once per run.
The image is the real lung1 CT (shared/data pyradiomics_lung1: 48 x 512 x 512, int16). Each peer
runs in its own process, with the same number of PyTorch threads, and does what a user's first
two clicks do:

* first prompt: set the image, then a positive point on the tumour;
* refining prompt: a negative point beside it.

AutoZoom is off in both by default, so each prompt is exactly one 192^3 forward pass (what a
click costs when the object stays inside the patch, as a small tumour does with the real
weights; random weights reach the patch's faces and would zoom out to 4x and refine the whole
slab, which is the same passes in both, only many more of them). ``--autozoom`` turns it on.

Printed per peer: seconds per prompt (wall clock, and the process's CPU seconds, which a load
from other processes on shared cores disturbs less) and the peak resident memory of each prompt (the process's
whole RSS, model weights included: Linux's peak counter is reset at each phase,
benchmarks/rss_phases.py), the model's load time, medseg's breakdown of a prompt (crop and
normalise, network, border test), the median and spread over ``--repeats`` interleaved runs,
and the ratios medseg / nnInteractive. The two objects must agree (Dice printed).

medseg runs the network on the CPU runtime its calibration chose for this checkpoint (what installing
the model does: :func:`medseg.model.interactive.calibration.calibrate`, run once here in its own
process before the timed runs, its choice and measurements printed): PyTorch, or OpenVINO f32 where
the optional ``openvino`` package is installed and its object agrees with PyTorch's within the
issue's bounds (>= 99.9 % of the voxels, Dice >= 0.99). ``--no-calibrate`` keeps PyTorch.

``--runtimes`` adds one 192^3 forward pass of the same weights with each CPU runtime: PyTorch's
module forward (what nnInteractive runs), PyTorch with oneDNN convolutions and medseg's lean
forward (what medseg runs), and ONNX Runtime's CPU provider (an export of the same network).

Run: .venv/bin/python benchmarks/bench_interactive.py [--threads N] [--repeats 3] [--runtimes]
     [--patch 192] (a smaller patch is for trying the script out, not for figures)
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
PEERS = ("nninteractive", "medseg")


def _image_and_prompts():
    import numpy as np
    import SimpleITK as sitk

    image = sitk.GetArrayFromImage(sitk.ReadImage(str(LUNG / "lung1_image.nrrd")))
    tumour = sitk.GetArrayFromImage(sitk.ReadImage(str(LUNG / "lung1_label.nrrd")))
    z, y, x = (int(round(c.mean())) for c in np.nonzero(tumour))
    return image, [[z, y, x], True], [[z, y + 6, x + 5], False]


def child(peer: str, folder: str, threads: int, autozoom: bool) -> dict:
    import numpy as np
    import torch
    from rss_phases import PhasePeaks

    torch.set_num_threads(threads)
    peaks = PhasePeaks()
    image, first, refining = _image_and_prompts()
    times: dict[str, float] = {}
    breakdown: list[dict] = []
    peaks.push("model")
    started = time.perf_counter()
    if peer == "nninteractive":
        from nnInteractive.inference.inference_session import nnInteractiveInferenceSession

        session = nnInteractiveInferenceSession(device=torch.device("cpu"), torch_n_threads=threads,
                                                do_autozoom=autozoom, enable_undo=True)
        session.initialize_from_trained_model_folder(folder)
    else:
        from medseg.model.interactive.model_files import load_interactive_model
        from medseg.model.interactive.session import InteractiveSession

        session = InteractiveSession(load_interactive_model(folder), "cpu", autozoom=autozoom)
    times["model"] = time.perf_counter() - started
    peaks.pop()
    target = np.zeros(image.shape, np.uint8)
    cpu: dict[str, float] = {}
    for name, (point, positive) in (("first", first), ("refining", refining)):
        peaks.push(name)
        started, cpu_started = time.perf_counter(), time.process_time()
        if peer == "nninteractive":
            if name == "first":
                session.set_image(image[None])
                session.set_target_buffer(target)
            session.add_point_interaction(point, positive)
        else:
            if name == "first":
                session.set_image(image)
            breakdown.append(session.add_point(point, positive).seconds)
        times[name] = time.perf_counter() - started
        cpu[name] = time.process_time() - cpu_started
        peaks.pop()
    mask = target if peer == "nninteractive" else session.mask
    rows = {row["phase"]: row for row in peaks.finish()}
    out = Path(folder).parent / f"{peer}-mask.npy"
    np.save(out, mask)
    return {"peer": peer, "runtime": getattr(session, "runtime", "torch"), "times": times, "cpu": cpu, "breakdown": breakdown, "mask": str(out),
            "peak_mb": {k: rows[k]["peak_mb"] for k in ("model", "first", "refining")},
            "object_voxels": int(mask.sum())}


def runtimes(folder: str, threads: int) -> dict:
    """One 192^3 pass per CPU runtime, the same input; seconds, and agreement of the argmax with PyTorch's module."""
    import onnxruntime
    import torch

    from medseg.model.backends import OnnxRunner, use_onednn_convolutions
    from medseg.model.interactive.model_files import load_interactive_model
    from medseg.model.interactive.session import SLAB_BYTES
    from medseg.model.lean_forward import lean_forward, slab_budget
    from medseg.model.onnx_graph import export_onnx

    torch.set_num_threads(threads)
    model = load_interactive_model(folder)
    x = torch.randn(1, 8, *model.plan.patch_size, generator=torch.Generator().manual_seed(0))
    x[:, 1:] = (x[:, 1:] > 2).float()  # prompt channels are sparse
    results = {}
    network = model.build_network()
    def timed(function):
        started, cpu = time.perf_counter(), time.process_time()
        value = function()
        return value, time.perf_counter() - started, time.process_time() - cpu

    with torch.inference_mode():
        reference, wall, cpu = timed(lambda: network(x).argmax(1))
        results["torch (module forward)"] = {"seconds": wall, "cpu_seconds": cpu, "agreement": 1.0}
        use_onednn_convolutions(network)
        with slab_budget(SLAB_BYTES):
            answer, wall, cpu = timed(lambda: lean_forward(network, x).argmax(1))
        results["torch (oneDNN + lean, medseg)"] = {"seconds": wall, "cpu_seconds": cpu,
                                                   "agreement": float((answer == reference).float().mean())}
    path = Path(folder).parent / "interactive.onnx"
    started = time.perf_counter()
    export_onnx(model.build_network(), model.plan, path)
    export_seconds = time.perf_counter() - started
    network = None  # the module's memory freed before ONNX Runtime runs (the lambdas above are done with it)
    runner = OnnxRunner(path, "onnx-cpu", threads=threads)
    answer, wall, cpu = timed(lambda: runner(x).argmax(1))
    results[f"ONNX Runtime {onnxruntime.__version__} (CPU)"] = {
        "seconds": wall, "cpu_seconds": cpu, "agreement": float((answer == reference).float().mean()),
        "export_seconds": export_seconds}
    return results


def calibrate_child(folder: str, threads: int) -> dict:
    import torch

    from medseg.model.interactive.calibration import calibrate
    from medseg.model.interactive.model_files import load_interactive_model

    torch.set_num_threads(threads)
    started = time.perf_counter()
    choice = calibrate(load_interactive_model(folder), Path(folder), threads=threads)
    return {"runtime": choice.runtime, "reason": choice.reason, "measured": choice.measured,
            "seconds": time.perf_counter() - started}


def _run_child(args: list[str]) -> dict:
    process = subprocess.run([sys.executable, __file__, *args], capture_output=True, text=True)
    if process.returncode != 0:
        sys.stderr.write(process.stdout[-3000:] + process.stderr[-5000:])
        raise SystemExit(f"child {args[:2]} failed")
    return json.loads(process.stdout.strip().splitlines()[-1])


def _spread(values: list[float]) -> str:
    median = statistics.median(values)
    return f"{median:7.1f} ({min(values):.1f}-{max(values):.1f})"


def _print_runtimes(folder: Path, args: argparse.Namespace) -> None:
    results = _run_child(["--runtime-child", str(folder), "--threads", str(args.threads)])
    print(f"\none {args.patch}^3 forward pass per CPU runtime ({args.threads} threads):")
    for name, row in results.items():
        extra = f", export {row['export_seconds']:.1f} s" if "export_seconds" in row else ""
        print(f"  {name:34s}{row['seconds']:8.1f} s ({row['cpu_seconds']:.1f} CPU s)   argmax agreement with the "
              f"module {row['agreement']:.6f}{extra}")
    load = os.getloadavg()
    print(f"load average {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--patch", type=int, default=192)
    parser.add_argument("--autozoom", action="store_true")
    parser.add_argument("--runtimes", action="store_true")
    parser.add_argument("--no-calibrate", action="store_true", help="medseg on PyTorch, nothing measured first")
    parser.add_argument("--calibrate-child", metavar="FOLDER", help=argparse.SUPPRESS)
    parser.add_argument("--runtimes-only", action="store_true", help="only the per-runtime forward passes")
    parser.add_argument("--child", nargs=2, metavar=("PEER", "FOLDER"), help=argparse.SUPPRESS)
    parser.add_argument("--runtime-child", metavar="FOLDER", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], args.child[1], args.threads, args.autozoom)))
        return
    if args.calibrate_child:
        print(json.dumps(calibrate_child(args.calibrate_child, args.threads)))
        return
    if args.runtime_child:
        print(json.dumps(runtimes(args.runtime_child, args.threads)))
        return

    import numpy as np
    from interactive_fixture import REAL, make_nninteractive_folder

    with tempfile.TemporaryDirectory(prefix="bench_interactive_") as temp:
        spec = dict(REAL, patch_size=(args.patch,) * 3)
        folder = make_nninteractive_folder(Path(temp), **spec, max_features=320, seed=0)
        load = os.getloadavg()
        print(f"nnInteractive-layout checkpoint, random weights, patch {args.patch}^3; lung1 48 x 512 x 512; "
              f"{args.threads} threads of {os.cpu_count()} cores; AutoZoom {'on' if args.autozoom else 'off'}; "
              f"load average at start {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f}")
        if args.runtimes_only:
            _print_runtimes(folder, args)
            return
        if not args.no_calibrate:
            chosen = _run_child(["--calibrate-child", str(folder), "--threads", str(args.threads)])
            print(f"calibration (once, as on install; {chosen['seconds']:.0f} s): medseg runs {chosen['runtime']}: "
                  f"{chosen['reason']}\n  measured: {json.dumps(chosen['measured'])}", flush=True)
        runs: dict[str, list[dict]] = {peer: [] for peer in PEERS}
        common = ["--threads", str(args.threads)] + (["--autozoom"] if args.autozoom else [])
        for repeat in range(args.repeats):
            for peer in (PEERS if repeat % 2 == 0 else PEERS[::-1]):  # interleaved, alternating order
                result = _run_child(["--child", peer, str(folder), *common])
                runs[peer].append(result)
                print(f"  run {repeat + 1} {peer:13s} [{result['runtime']}] first {result['times']['first']:6.1f} s "
                      f"({result['cpu']['first']:.1f} CPU s), refining {result['times']['refining']:6.1f} s "
                      f"({result['cpu']['refining']:.1f} CPU s), peak {result['peak_mb']['first']:7.0f} / "
                      f"{result['peak_mb']['refining']:7.0f} MB", flush=True)
        masks = {peer: np.load(runs[peer][-1]["mask"]) for peer in PEERS}
        a, b = masks["nninteractive"].astype(bool), masks["medseg"].astype(bool)
        dice = 2 * (a & b).sum() / max(1, a.sum() + b.sum())
        print(f"\nobjects after both prompts: {a.sum()} / {b.sum()} voxels, Dice {dice:.5f}, "
              f"voxel agreement {(a == b).mean():.6f}")
        print(f"\n{'':15s}{'model load s':>16s}{'first prompt s':>22s}{'refining prompt s':>22s}"
              f"{'peak MB first':>22s}{'peak MB refining':>22s}")
        medians = {}
        for peer in PEERS:
            values = {key: [r["times"][key] for r in runs[peer]] for key in ("model", "first", "refining")}
            memory = {key: [r["peak_mb"][key] for r in runs[peer]] for key in ("first", "refining")}
            medians[peer] = {k: statistics.median(v) for k, v in {**values, **{f"mb_{k}": v for k, v in memory.items()}}.items()}
            print(f"{peer:15s}{_spread(values['model']):>16s}{_spread(values['first']):>22s}"
                  f"{_spread(values['refining']):>22s}{_spread(memory['first']):>22s}{_spread(memory['refining']):>22s}")
        for peer in PEERS:
            cpu = {key: [r["cpu"][key] for r in runs[peer]] for key in ("first", "refining")}
            medians[peer].update({f"cpu_{k}": statistics.median(v) for k, v in cpu.items()})
            print(f"{peer + ' CPU s':15s}{'':>16s}{_spread(cpu['first']):>22s}{_spread(cpu['refining']):>22s}")
        ours, theirs = medians["medseg"], medians["nninteractive"]
        print(f"{'ratio CPU s':15s}{'':>16s}{ours['cpu_first'] / theirs['cpu_first']:>22.2f}"
              f"{ours['cpu_refining'] / theirs['cpu_refining']:>22.2f}")
        print(f"{'medseg / nnI':15s}{'':>16s}{ours['first'] / theirs['first']:>22.2f}"
              f"{ours['refining'] / theirs['refining']:>22.2f}{ours['mb_first'] / theirs['mb_first']:>22.2f}"
              f"{ours['mb_refining'] / theirs['mb_refining']:>22.2f}")
        parts = runs["medseg"][-1]["breakdown"]
        print("\nmedseg, where a prompt's time goes (last run): " + "; ".join(
            f"{name}: " + ", ".join(f"{k} {v:.2f} s" for k, v in seconds.items())
            for name, seconds in zip(("first", "refining"), parts)))
        if args.runtimes:
            _print_runtimes(folder, args)
        load = os.getloadavg()
        print(f"\nload average at the end {load[0]:.1f}, {load[1]:.1f}, {load[2]:.1f} (other processes share the cores)")


if __name__ == "__main__":
    main()
