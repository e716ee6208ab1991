"""The CPU, side by side: medseg vs nnU-Net v2's predictor at the same thread count, on an idle
machine and beside one busy program (issue #40).

The job: a real CT (shared/data pyradiomics_lung1, interpolated to 0.8 mm slices: 512 x 512 x 300)
segmented at 1.5 mm by a TotalSegmentator-sized 3d_fullres network (nnU-Net's own planner and
PlainConvUNet: 6 stages, 32 -> 320 features, patch 128^3, 14 labels, random weights from a seed),
written as an nnU-Net result folder that both peers load. Each run is its own process, from
reading the CT file to writing the label map (interpreter start and imports excluded from the
job time, included in the process time):

* nnU-Net v2: ``nnUNetPredictor.predict_from_files_sequential`` (TTA off, fold 0, CPU);
* medseg: ``medseg.io.load`` -> ``medseg.model.infer.segment(device="auto")`` -> ``write_image``,
  as ``medseg segment`` runs it: on the CPU engine measured for this model (medseg.model.cpu_runtime).
  That measurement happens once per model and machine, when the model is installed (issue #51:
  medseg.model.engine_measurement, on one tile); the benchmark makes it before the timed runs, as
  an install does (its cost is printed).

Conditions: ``idle`` (nothing added; the load average the machine had is printed) and ``busy``
(one ``while True`` process started before the run and killed after it, as a PACS viewer or a
browser on a workstation). Both peers get ``--threads`` (torch.set_num_threads; medseg's budget).

Printed per run: job time, process time, peak RSS of the process tree (VmHWM of the process, and a
100 ms poll of the tree's summed RSS: the larger), then per peer the median and spread of
``--repeats`` runs, the ratio medseg / nnU-Net (median, and in brackets the worst and best pairing
of runs), the voxel agreement of the labels, and the time of each phase at each thread count.
The 3D view's meshing of medseg's result is timed on its own (a process of its own, at each thread count).

Run (hours on a 2-core machine; run it when the machine is otherwise quiet):
  .venv/bin/python benchmarks/bench_cpu.py [--threads 2] [--phase-threads 1] [--repeats 3]
        [--conditions idle busy]
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

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_infer
from rss_phases import PhasePeaks

REPO = Path(__file__).resolve().parents[1]
PEERS = ("nnunet", "medseg")
GOAL_TIME, GOAL_RSS, GOAL_AGREEMENT = 0.5, 0.5, 0.9999


# --- the child: one peer's job ------------------------------------------------------------------------


def _instrument_medseg(phases: PhasePeaks) -> None:
    import medseg.model.infer as infer
    from medseg.model import backends

    bench_infer.instrument_medseg(phases)
    phases.wrap(infer, "_choose_cpu_engine", "CPU engine (stored choice)")
    phases.wrap(backends.OnnxRunner, "__call__", "  network forward")


def _instrument_nnunet(phases: PhasePeaks) -> None:
    import nnunetv2.inference.predict_from_raw_data as predict

    bench_infer.instrument_nnunet(phases)
    phases.wrap(predict.nnUNetPredictor, "_internal_maybe_mirror_and_predict", "  network forward")


def _mesh(label_path: Path, image_path: Path) -> float:
    """The 3D view's meshing of the result (SurfaceBricks.rebuild, in the job's thread budget)."""
    from medseg import threads
    from medseg.io import load
    from medseg.io.surface_bricks import SurfaceBricks

    image, labels = load(image_path), load(label_path).array
    started = time.perf_counter()
    with threads.job("3D surfaces"):
        SurfaceBricks(image).rebuild(labels)
    return time.perf_counter() - started


def child(peer: str, model: Path, image: Path, out: Path, threads: int) -> None:
    import resource

    from medseg import threads as medseg_threads

    medseg_threads.configure(threads)  # before torch starts its pools: both peers get the same count
    import torch

    torch.set_num_threads(threads)
    phases = PhasePeaks()
    (_instrument_nnunet if peer == "nnunet" else _instrument_medseg)(phases)
    phases.push("job (not in a phase above)")
    started = time.perf_counter()
    engine = None
    if peer == "nnunet":
        bench_infer.run_nnunet(model, image, out)
    else:
        engine = _run_medseg(model, image, out)
    seconds = time.perf_counter() - started
    phases.pop()
    rows = phases.finish()
    peak_mb = max(row["peak_mb"] for row in rows) if phases.resettable else \
        resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"peer": peer, "seconds": seconds, "peak_rss_mb": peak_mb, "phases": rows,
                      "cpu_engine": engine, "threads": threads}))


def mesh_child(labels: Path, image: Path, threads: int) -> None:
    from medseg import threads as medseg_threads

    medseg_threads.configure(threads)
    print(json.dumps({"mesh_seconds": _mesh(labels, image)}))


def time_meshing(labels: Path, image: Path, threads: int) -> float:
    done = subprocess.run([sys.executable, __file__, "--mesh-child", str(labels), str(image), "--threads",
                           str(threads)], capture_output=True, text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"meshing failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])["mesh_seconds"]


def _run_medseg(model: Path, image: Path, out: Path) -> dict | None:
    from medseg.io import load, write_image
    from medseg.model.infer import segment
    from medseg.workflows.models import open_model

    result = segment(load(image), open_model(model).package, device="auto", postprocess=False)
    out.mkdir(parents=True, exist_ok=True)
    write_image(result.label_map, out / "case.nii.gz")
    if result.fallbacks:
        print("fallbacks:", result.fallbacks, file=sys.stderr)
    return result.cpu_engine


def calibrate(model: Path, image: Path, threads: int) -> dict:
    """medseg's once-per-model CPU engine measurement, as an install makes it (not timed with the runs)."""
    code = ("import json, sys, time\n"
            "from medseg import threads; threads.configure(int(sys.argv[3]))\n"
            "from medseg.model import infer\n"
            "from medseg.model.engine_measurement import measure_model\n"
            "from medseg.io import load\n"
            "from medseg.workflows.models import open_model\n"
            "package = open_model(sys.argv[1]).package\n"
            "configuration, _plan = infer.choose_configuration(package, None, load(sys.argv[2]))  # the runs' one\n"
            "started = time.perf_counter()\n"
            "choice = measure_model(package, configuration)\n"
            "print(json.dumps({**choice.to_dict(), 'measuring_seconds': time.perf_counter() - started}))\n")
    done = subprocess.run([sys.executable, "-c", code, str(model), str(image), str(threads)], capture_output=True,
                          text=True, cwd=REPO)
    if done.returncode != 0:
        raise SystemExit(f"calibration failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# --- the parent --------------------------------------------------------------------------------------------


class TreePeak:
    """The largest summed RSS of a process and its descendants, polled every 100 ms."""

    def __init__(self, pid: int) -> None:
        import psutil

        self.process = psutil.Process(pid)
        self.peak_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        import psutil

        while not self._stop.wait(0.1):
            try:
                tree = [self.process, *self.process.children(recursive=True)]
                total = sum(p.memory_info().rss for p in tree if p.is_running())
            except psutil.Error:
                continue
            self.peak_mb = max(self.peak_mb, total / 2**20)

    def stop(self) -> float:
        self._stop.set()
        self._thread.join()
        return self.peak_mb


def run_one(peer: str, model: Path, ct: Path, out: Path, threads: int, busy: bool) -> dict:
    spinner = subprocess.Popen([sys.executable, "-c", "while True: pass"]) if busy else None
    try:
        load_before = os.getloadavg()[0]
        started = time.perf_counter()
        process = subprocess.Popen([sys.executable, __file__, "--child", peer, str(model), str(ct), str(out),
                                    "--threads", str(threads)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                   text=True, cwd=REPO)
        tree = TreePeak(process.pid)
        stdout, stderr = process.communicate()
        wall = time.perf_counter() - started
        tree_mb = tree.stop()
    finally:
        if spinner is not None:
            spinner.kill()
            spinner.wait()
    if process.returncode != 0:
        raise SystemExit(f"{peer} failed:\n{stderr[-3000:]}")
    record = json.loads(stdout.strip().splitlines()[-1])
    record.update(process_seconds=wall, tree_peak_mb=max(tree_mb, record["peak_rss_mb"]), load_before=load_before,
                  load_after=os.getloadavg()[0])
    return record


def _median(values: list[float]) -> float:
    return statistics.median(values)


def _spread(values: list[float], digits: int = 0) -> str:
    if len(values) == 1:
        return f"{values[0]:.{digits}f}"
    return f"{_median(values):.{digits}f} [{min(values):.{digits}f}-{max(values):.{digits}f}]"


def _ratio(mine: list[float], theirs: list[float]) -> str:
    return (f"{_median(mine) / _median(theirs):.2f} [{min(mine) / max(theirs):.2f}-"
            f"{max(mine) / min(theirs):.2f}]")


def phase_times(runs_by_threads: dict[int, list[dict]], meshing: bool = True) -> str:
    """Per phase: exclusive seconds (median of runs) at each thread count, and the speed-up between them."""
    counts = sorted(runs_by_threads)
    names: list[str] = []
    for runs in runs_by_threads.values():
        for row in runs[0]["phases"]:
            if row["phase"] not in names:
                names.append(row["phase"])
    header = "".join(f"{f'{n} thr s':>12}" for n in counts)
    lines = [f"    {'phase':<44}{header}" + (f"{'speed-up':>10}" if len(counts) > 1 else "")]
    for name in names + (["meshing the result (after the job)"] if meshing else []):
        cells, medians = [], []
        for n in counts:
            if name.startswith("meshing"):
                values = [r["mesh_seconds"] for r in runs_by_threads[n] if r.get("mesh_seconds") is not None]
            else:
                values = [row["seconds"] for r in runs_by_threads[n] for row in r["phases"] if row["phase"] == name]
            medians.append(_median(values) if values else None)
            cells.append(f"{medians[-1]:12.2f}" if values else f"{'-':>12}")
        if all(m is None for m in medians):
            continue
        speedup = ""
        if len(counts) > 1 and medians[0] and medians[-1]:
            speedup = f"{medians[0] / medians[-1]:10.2f}x"
        lines.append(f"    {name:<44}{''.join(cells)}{speedup}")
    return "\n".join(lines)


def summary(results: dict[str, dict[str, list[dict]]], conditions: list[str]) -> str:
    """Per condition and peer: job and process time, peak RSS, and the ratios to nnU-Net (median [spread])."""
    lines = [f"{'condition':<10}{'peer':<8}{'job s':>22}{'process s':>22}{'peak RSS MB':>22}{'time ratio':>20}"
             f"{'RSS ratio':>20}"]
    for condition in conditions:
        theirs = results[condition]["nnunet"]
        for peer in PEERS:
            runs = results[condition][peer]
            seconds = [r["seconds"] for r in runs]
            rss = [r["tree_peak_mb"] for r in runs]
            lines.append(f"{condition:<10}{peer:<8}{_spread(seconds, 1):>22}"
                         f"{_spread([r['process_seconds'] for r in runs], 1):>22}{_spread(rss):>22}"
                         f"{_ratio(seconds, [r['seconds'] for r in theirs]):>20}"
                         f"{_ratio(rss, [r['tree_peak_mb'] for r in theirs]):>20}")
    lines.append(f"ratios: medseg / nnU-Net, median of runs [worst-best pairing]; goals: time <= {GOAL_TIME}, "
                 f"RSS <= {GOAL_RSS} in both conditions")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=None, help="threads for both peers (default: the usable cores)")
    parser.add_argument("--phase-threads", type=int, nargs="*", default=[1],
                        help="more thread counts for the per-phase table: one idle run per peer each (default 1)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--conditions", nargs="+", choices=("idle", "busy"), default=["idle", "busy"])
    parser.add_argument("--network", choices=tuple(bench_infer.NETWORKS), default="fullres")
    parser.add_argument("--slices", type=int, default=None,
                        help="the middle N slices of the 512 x 512 x 300 series only (a smaller job on a busy machine)")
    parser.add_argument("--work", help="folder for the model, the CT and the outputs (default: a new temporary one)")
    parser.add_argument("--child", nargs=4, metavar=("PEER", "MODEL", "IMAGE", "OUT"), help=argparse.SUPPRESS)
    parser.add_argument("--mesh-child", nargs=2, metavar=("LABELS", "IMAGE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.mesh_child:
        mesh_child(Path(args.mesh_child[0]), Path(args.mesh_child[1]), args.threads)
        return 0
    if args.child:
        peer, model, image, out = args.child
        child(peer, Path(model), Path(image), Path(out), args.threads)
        return 0

    from medseg import threads as medseg_threads

    usable = medseg_threads.usable_cores()
    threads = args.threads or usable.threads
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_cpu_"))
    work.mkdir(parents=True, exist_ok=True)
    os.environ.setdefault("MEDSEG_CACHE_DIR", str(work / "cache"))  # the engine measurement, kept with the run
    ct = bench_infer.thin_ct(work)
    if args.slices:
        import SimpleITK as sitk

        whole = sitk.ReadImage(str(ct))
        start = max(0, whole.GetSize()[2] // 2 - args.slices // 2)
        ct = work / f"{ct.stem}_middle_{args.slices}.nrrd"
        sitk.WriteImage(whole[:, :, start:start + args.slices], str(ct))
    model = bench_infer.build_model(work / "results", 14, args.network)
    import SimpleITK as sitk

    size = sitk.ReadImage(str(ct)).GetSize()
    spec = bench_infer.NETWORKS[args.network]
    print(f"== bench_cpu: {args.network} network ({spec['n_stages']} stages, {spec['base_features']} -> "
          f"{min(spec['base_features'] * 2 ** (spec['n_stages'] - 1), 320)} features, patch {spec['patch_size']} at "
          f"{spec['spacing_zyx']} mm, 14 labels, random weights); CT {ct.name}: {size[0]}x{size[1]}x{size[2]}; "
          f"{threads} threads ({usable.explain()}); {args.repeats} run(s) per peer and condition, peers and conditions interleaved; "
          f"load average now {os.getloadavg()[0]:.2f}", flush=True)
    for count in sorted({threads, *args.phase_threads}):
        choice = calibrate(model, ct, count)
        print(f"medseg's CPU engine at {count} thread(s), measured once for this model (first run only): "
              f"{choice['engine']} ({choice['reason']}); measuring took {choice['measuring_seconds']:.1f} s (tile: {choice['seconds']} s, setup: {choice['setup_seconds']} s, peak MB: {choice['peak_mb']}, labels equal: {choice['agreement']})", flush=True)

    results: dict[str, dict[str, list[dict]]] = {c: {p: [] for p in PEERS} for c in args.conditions}
    labels: dict[str, object] = {}
    for repeat in range(args.repeats):  # the conditions interleaved: a run cut short still has both
        for condition in args.conditions:
            for peer in PEERS:
                out = work / f"{condition}_{peer}_{repeat}"
                record = run_one(peer, model, ct, out, threads, condition == "busy")
                results[condition][peer].append(record)
                if peer not in labels:
                    labels[peer] = sitk.GetArrayFromImage(sitk.ReadImage(str(out / "case.nii.gz")))
                    if len(labels) == len(PEERS):
                        print(f"  labels equal to nnU-Net's: {float((labels['medseg'] == labels['nnunet']).mean()):.5%}",
                              flush=True)
                print(f"  {condition} {peer} run {repeat + 1}: job {record['seconds']:.1f} s, process "
                      f"{record['process_seconds']:.1f} s, peak RSS {record['tree_peak_mb']:.0f} MB (tree); load "
                      f"average {record['load_before']:.2f} -> {record['load_after']:.2f}", flush=True)
        print(summary(results, args.conditions), flush=True)
    for condition in args.conditions:
        for peer in PEERS:
            print(f"per phase, {peer} ({condition}, {threads} threads, exclusive seconds, median of runs):\n"
                  f"{phase_times({threads: results[condition][peer]}, meshing=False)}", flush=True)
    phase_runs: dict[str, dict[int, list[dict]]] = {p: {threads: results[args.conditions[0]][p]} for p in PEERS}
    for count in args.phase_threads:
        if count == threads:
            continue
        for peer in PEERS:
            record = run_one(peer, model, ct, work / f"phases_{count}_{peer}", count, False)
            phase_runs[peer][count] = [record]
            print(f"  idle {peer} at {count} thread(s): job {record['seconds']:.1f} s", flush=True)
    first_medseg = work / f"{args.conditions[0]}_medseg_0" / "case.nii.gz"
    for count, runs in phase_runs["medseg"].items():  # the 3D view's meshing of medseg's result, idle
        runs[0]["mesh_seconds"] = time_meshing(first_medseg, ct, count)

    agreement = float((labels["medseg"] == labels["nnunet"]).mean())
    print(f"\nlabels equal to nnU-Net's: {agreement:.5%} of {labels['nnunet'].size} voxels (goal >= {GOAL_AGREEMENT:.2%})")
    print(summary(results, args.conditions))
    for peer in PEERS:
        print(f"\nper phase, {peer} (idle, exclusive seconds, median of runs):")
        print(phase_times(phase_runs[peer]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
