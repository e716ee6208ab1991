"""medseg's TotalSegmentator pipeline against TotalSegmentator 2.18.0 itself, side by side in one run.

Same weights (random, TotalSegmentator's layout and a network of nnU-Net's default CT size: patch
128^3, 6 stages, 32..320 features, PlainConvUNet), same NIfTI input, same thread count, each side a
process of its own (``medseg segment`` and TotalSegmentator's python API in tests/model/ts_peer.py),
alternating, >= 3 runs each. Peak memory is the whole process tree's resident set (psutil, sampled
every 20 ms: TotalSegmentator's nnU-Net starts worker processes), and, since forked workers share pages
that the summed RSS counts once per process, also the tree's summed PSS (Linux smaps_rollup, every 100 ms). Prints the median wall time,
the spread (min..max), the ratios medseg / TotalSegmentator and the voxel agreement.

Cases: ``fast`` = --fast (3 mm) on pyradiomics' lung1 chest CT (512 x 512 x 48, 5 mm, stored LPS);
``total`` = the five 1.5 mm parts on a small CT (TotalSegmentator's example_ct_sm, 64 x 64 x 30 at 3 mm).

Task mode (``--tasks``, issue 49): each task on the real CT where its crop model finds its crop structures
(tests/model/ts_fixture.py TASK_IMAGE / CROP_IMAGES; appendicular_bones, which has no crop, on the hips CT).
The weights are ts_fixture's oracle layout (make_oracle_weights' folders, trainers, plans, folds, class maps
from TotalSegmentator's own tables), with the task networks at nnU-Net's default CT size (NETWORK, random)
and the crop networks (297, 298) the trained compact crop weights of tests/model/data/ts_crop_weights.npz,
as the parity test uses them, so that the crop is a real crop and the task network runs on the cropped
region only, as it would with TotalSegmentator's real weights. medseg runs ``medseg segment IMAGE --model
FOLDER`` (FOLDER = import_totalsegmentator_task(weights, folder, task=TASK), the catalogue's default
configuration); TotalSegmentator runs ts_peer's single-task request (``totalsegmentator(image, out, ml=True,
task=TASK, device="cpu")`` with its defaults). With ``--device auto`` (the default) each network's CPU engine is
measured first, untimed, as ``medseg models install`` does (medseg.model.totalseg.part_engine), and medseg runs
with ``--device auto``; ``--device cpu`` keeps PyTorch, TotalSegmentator's engine. ``combined``: one ``medseg segment`` with three --model
(total at 1.5 mm, liver_segments, lung_vessels: workflows/segment_many.py) against three TotalSegmentator
runs (total, then each task), their times summed and their peaks the largest; agreement there is by
structure name (medseg's merged map against each of TotalSegmentator's outputs). ``--profile`` then runs
medseg once more per task with ``--profile`` and prints where its time went.

    .venv/bin/python benchmarks/bench_totalsegmentator.py [--runs 3] [--cases fast,total] [--threads 2]
    .venv/bin/python benchmarks/bench_totalsegmentator.py --tasks [lung_vessels,...] [--no-combined] [--runs 3]
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


def tree_pss(processes: list[psutil.Process]) -> int:
    """Summed proportional set size (shared pages split between the processes sharing them), in bytes."""
    total = 0
    for proc in processes:
        try:
            for line in Path(f"/proc/{proc.pid}/smaps_rollup").read_text().splitlines():
                if line.startswith("Pss:"):
                    total += int(line.split()[1]) * 1024
                    break
        except (OSError, ValueError):
            pass
    return total


def peak_tree_rss(command: list[str], env: dict[str, str]) -> tuple[float, int, int, subprocess.CompletedProcess]:
    """Run ``command``; wall seconds, peak resident bytes of it and all its children (RSS summed: forked
    workers' shared pages count once per process), the peak of their summed PSS (shared pages split; sampled
    every 100 ms, Linux), the result."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    peak = peak_pss = 0
    done = threading.Event()

    def sample() -> None:
        nonlocal peak, peak_pss
        try:
            root = psutil.Process(process.pid)
        except psutil.Error:
            return
        tick = 0
        while not done.is_set():
            total = 0
            processes = [root]
            try:
                processes += root.children(recursive=True)
            except psutil.Error:
                pass
            for proc in processes:
                try:
                    total += proc.memory_info().rss
                except psutil.Error:
                    pass
            peak = max(peak, total)
            if tick % 5 == 0:
                peak_pss = max(peak_pss, tree_pss(processes))
            tick += 1
            done.wait(0.02)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    stdout, stderr = process.communicate()
    done.set()
    sampler.join()
    return (time.perf_counter() - started, peak, peak_pss,
            subprocess.CompletedProcess(command, process.returncode, stdout, stderr))


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


Command = tuple[list[str], dict[str, str]]


def measure(name: str, sides: dict[str, list[Command]], runs: int) -> tuple[dict, dict]:
    """Each side's commands run one after the other (a side is one run of several processes: its time the sum,
    its peak the largest), the sides alternating, ``runs`` times: side -> [seconds], side -> [peak bytes]."""
    times: dict[str, list[float]] = {side: [] for side in sides}
    peaks: dict[str, list[int]] = {side: [] for side in sides}
    for run in range(runs):
        for side, commands in sides.items():
            seconds, peak, pss = 0.0, 0, 0
            for command, env in commands:
                spent, top, top_pss, completed = peak_tree_rss(command, env)
                if completed.returncode != 0:
                    print(completed.stdout[-2000:], completed.stderr[-3000:])
                    raise SystemExit(f"{side} failed on {name}: {' '.join(command)}")
                seconds, peak, pss = seconds + spent, max(peak, top), max(pss, top_pss)
            times[side].append(seconds)
            peaks[side].append(peak)
            peaks.setdefault(f"{side} PSS", []).append(pss)
            print(f"  {name} run {run + 1} {side:>16}: {seconds:7.1f} s, peak {peak / 2**30:5.2f} GiB "
                  f"(PSS {pss / 2**30:5.2f} GiB; load {os.getloadavg()[0]:.1f})", flush=True)
    return times, peaks


def summarise(name: str, title: str, times: dict, peaks: dict, agreement: str) -> dict:
    median = {side: statistics.median(values) for side, values in times.items()}
    peak = {side: max(values) for side, values in peaks.items()}
    ratio_time = median["medseg"] / median["TotalSegmentator"]
    ratio_memory = peak["medseg"] / peak["TotalSegmentator"]
    ratio_pss = peak["medseg PSS"] / peak["TotalSegmentator PSS"]
    print(f"{name} ({title}):")
    for side, values in times.items():
        print(f"  {side:>16}: median {median[side]:7.1f} s (spread {min(values):.1f}..{max(values):.1f}), "
              f"peak {peak[side] / 2**30:.2f} GiB (PSS {peak[side + ' PSS'] / 2**30:.2f} GiB)")
    print(f"  ratio medseg/TotalSegmentator: time {ratio_time:.2f}x, peak memory {ratio_memory:.2f}x "
          f"(PSS {ratio_pss:.2f}x); {agreement}", flush=True)
    return {"title": title, "seconds": times, "peak_bytes": peaks, "ratio_time": ratio_time,
            "ratio_memory": ratio_memory, "ratio_pss": ratio_pss, "agreement": agreement}


def medseg_env(threads: int) -> dict[str, str]:
    return dict(os.environ, OMP_NUM_THREADS=str(threads), MKL_NUM_THREADS=str(threads))


def ts_command(request: Path, arguments: dict) -> list[str]:
    request.write_text(json.dumps(arguments))
    return [sys.executable, str(ROOT / "tests" / "model" / "ts_peer.py"), str(request)]


def run_cases(args, results: dict) -> None:
    weights, model = prepare(args.work)
    from ts_peer import peer_environment

    for name in args.cases.split(","):
        configuration, _, _ = CASES[name]
        image = case_input(args.work, name)
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            scratch = Path(scratch)
            env_ts = peer_environment(weights, scratch / "home", args.threads)
            request = {"image": str(image), "output": str(scratch / "ts.nii.gz"), "fast": configuration == "3mm",
                       "fastest": False, "roi_subset": None, "crop_mask": None, "force_split": False, "defaults": True}
            sides = {
                "TotalSegmentator": [(ts_command(scratch / "ts.request.json", request), env_ts)],
                "medseg": [([sys.executable, "-m", "medseg", "segment", str(image), "--model", str(model),
                             "--configuration", configuration, "-o", str(scratch / "medseg.nii.gz"), "--device", "cpu",
                             "--threads", str(args.threads), "--force"], medseg_env(args.threads))],
            }
            times, peaks = measure(name, sides, args.runs)
            ours = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / "medseg.nii.gz")))
            theirs = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / "ts.nii.gz")))
        agreement = f"labels equal on {float((ours == theirs).mean()):.5%} of voxels, {len(np.unique(theirs))} labels"
        results[name] = summarise(name, f"{configuration}, {image.name}, {ours.shape[::-1]}", times, peaks, agreement)


# ---- task mode (issue 49) ----
DEFAULT_TASKS = "lung_vessels,liver_segments,pleural_pericard_effusion,headneck_muscles,appendicular_bones"
NO_CROP_IMAGE = "pelvis"  # a task without a crop model (appendicular_bones) runs on the hips CT
COMBINED = ("total", "liver_segments", "lung_vessels")  # one medseg run of three models, on the abdomen CT
COMBINED_IMAGE = "abdomen"


def task_weights(root: Path, tasks: list[str]) -> Path:
    """ts_fixture's oracle weights for ``tasks``: crop networks trained and compact, task networks NETWORK-sized."""
    from ts_fixture import (
        CROP_NETWORK,
        crop_networks,
        crop_weights,
        networks_for,
        write_network,
    )

    done = root / "complete.json"
    if done.is_file() and set(tasks) <= set(json.loads(done.read_text())):
        return root
    crop_ids = {network.dataset_id for task in tasks for network in crop_networks(task)}
    for network in networks_for(tasks):
        folder = root / network.folder / f"{network.trainer}__nnUNetPlans__{network.configuration}"
        if all((folder / f"fold_{fold}" / "checkpoint_final.pth").is_file() for fold in network.folds):
            continue  # written by an earlier run of other tasks
        trained = crop_weights(network.dataset_id) if network.dataset_id in crop_ids else None
        if trained is not None:
            write_network(root, network, weights=trained, **CROP_NETWORK)
        else:
            print(f"  writing {network.folder} ({len(network.folds)} fold(s), {NETWORK})", flush=True)
            write_network(root, network, **NETWORK)
    done.write_text(json.dumps(sorted(tasks)))
    return root


def default_configuration(task: str) -> str:
    entry = next(m for m in json.loads((ROOT / "resources" / "models" / "catalogue.json").read_text())["models"]
                 if m["id"] == f"totalsegmentator/{task}")
    return next(c["name"] for c in entry["configurations"] if c["mode"] == "default")


def task_image(work: Path, key: str) -> Path:
    from ts_fixture import CROP_IMAGES, read_ct

    path = work / "images" / f"{key}.nii.gz"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        sitk.WriteImage(read_ct(DATA, CROP_IMAGES[key]), str(path))
    return path


def names_of(path: Path, task: str | None) -> dict[int, str]:
    """Value -> name of a label map: medseg's sidecar, or TotalSegmentator's class map of ``task``."""
    if task is not None:
        from totalsegmentator.map_to_binary import class_map

        return dict(class_map[task])
    from medseg.io.label_files import read_sidecar

    labels, _ = read_sidecar(path)
    return {label.value: label.name for label in labels}


def by_name(array: np.ndarray, names: dict[int, str], keep: set[str]) -> np.ndarray:
    """The label map with each value replaced by its name's index in sorted ``keep`` (+1), 0 elsewhere."""
    order = {name: i + 1 for i, name in enumerate(sorted(keep))}
    table = np.zeros(max([int(array.max()), *names]) + 1, np.int32)
    for value, name in names.items():
        table[value] = order.get(name, 0)
    return table[array]


def run_tasks(args, results: dict) -> None:
    from ts_fixture import TASK_IMAGE
    from ts_peer import peer_environment

    from medseg.model.totalseg import import_totalsegmentator_task

    tasks = [t for t in args.tasks.split(",") if t]
    weights = task_weights(args.work / "task_weights", tasks + (list(COMBINED) if args.combined else []))
    models = {}
    for task in tasks + (list(COMBINED) if args.combined else []):
        folder = args.work / "task_models" / task
        if not folder.is_dir():
            import_totalsegmentator_task(weights, folder, task=task)
        models[task] = folder
    if args.device == "auto":  # as an install does: each network's CPU engine measured once, not timed
        from medseg.catalogue.install_measure import measure_path

        for task, folder in models.items():
            for line in measure_path(folder, f"totalsegmentator/{task}"):
                print(f"  {line}", flush=True)
    for task in tasks:
        key = TASK_IMAGE.get(task, NO_CROP_IMAGE)
        image = task_image(args.work, key)
        configuration = default_configuration(task)
        with tempfile.TemporaryDirectory(dir=args.work) as scratch:
            scratch = Path(scratch)
            env_ts = peer_environment(weights, scratch / "home", args.threads)
            request = {"image": str(image), "output": str(scratch / "ts.nii.gz"), "task": task, "fast": False,
                       "fastest": False, "roi_subset": None, "crop_mask": None, "force_split": False, "defaults": True}
            medseg = [sys.executable, "-m", "medseg", "segment", str(image), "--model", str(models[task]),
                      "--configuration", configuration, "-o", str(scratch / "medseg.nii.gz"), "--device", args.device,
                      "--threads", str(args.threads), "--force"]
            sides = {"TotalSegmentator": [(ts_command(scratch / "ts.request.json", request), env_ts)],
                     "medseg": [(medseg, medseg_env(args.threads))]}
            times, peaks = measure(task, sides, args.runs)
            ours = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / "medseg.nii.gz")))
            theirs = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / "ts.nii.gz")))
            if args.profile:
                profile_medseg(medseg, scratch / "profile", args.threads)
        agreement = (f"labels equal on {float((ours == theirs).mean()):.5%} of voxels, "
                     f"{len(np.unique(theirs))} labels, {int((theirs > 0).sum())} labelled voxels")
        results[task] = summarise(task, f"{key} CT {ours.shape[::-1]}, {configuration}", times, peaks, agreement)
    if args.combined:
        run_combined(args, weights, models, results)


def run_combined(args, weights: Path, models: dict[str, Path], results: dict) -> None:
    from ts_peer import peer_environment

    image = task_image(args.work, COMBINED_IMAGE)
    with tempfile.TemporaryDirectory(dir=args.work) as scratch:
        scratch = Path(scratch)
        env_ts = peer_environment(weights, scratch / "home", args.threads)
        peer = []
        for task in COMBINED:
            request = {"image": str(image), "output": str(scratch / f"ts_{task}.nii.gz"), "task": task, "fast": False,
                       "fastest": False, "roi_subset": None, "crop_mask": None, "force_split": False, "defaults": True}
            peer.append((ts_command(scratch / f"ts_{task}.request.json", request), env_ts))
        medseg = [sys.executable, "-m", "medseg", "segment", str(image)]
        for task in COMBINED:
            medseg += ["--model", str(models[task])]
        medseg += ["--configuration", default_configuration("total"), "-o", str(scratch / "medseg.nii.gz"),
                   "--device", args.device, "--threads", str(args.threads), "--force"]
        times, peaks = measure("combined", {"TotalSegmentator": peer, "medseg": [(medseg, medseg_env(args.threads))]},
                               args.runs)
        ours = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / "medseg.nii.gz")))
        our_names = names_of(scratch / "medseg.nii.gz", None)
        agreements = []
        for task in COMBINED:
            theirs = sitk.GetArrayFromImage(sitk.ReadImage(str(scratch / f"ts_{task}.nii.gz")))
            their_names = names_of(scratch / f"ts_{task}.nii.gz", task)
            keep = set(their_names.values())
            equal = by_name(ours, our_names, keep) == by_name(theirs, their_names, keep)
            agreements.append(f"{task} {float(equal.mean()):.5%}")
        if args.profile:
            profile_medseg(medseg, scratch / "profile", args.threads)
    title = f"{COMBINED_IMAGE} CT {ours.shape[::-1]}: " + " + ".join(COMBINED)
    results["combined"] = summarise("combined", title, times, peaks,
                                    "labels equal by name on " + ", ".join(agreements) + " of voxels")


def profile_medseg(command: list[str], folder: Path, threads: int) -> None:
    """One more medseg run with --profile: where its time went, per phase (its own table)."""
    folder.mkdir(parents=True, exist_ok=True)
    output = folder / "medseg.nii.gz"
    completed = subprocess.run([*command[:command.index("-o")], "-o", str(output), *command[command.index("-o") + 2:],
                                "--profile", str(folder)], env=medseg_env(threads), capture_output=True, text=True,
                               check=False)
    phases = folder / "phases.txt"
    print(phases.read_text() if phases.is_file() else completed.stdout[-3000:] + completed.stderr[-3000:], flush=True)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="fast,total")
    parser.add_argument("--tasks", nargs="?", const=DEFAULT_TASKS,
                        help=f"task mode: these TotalSegmentator tasks (default {DEFAULT_TASKS}) instead of the cases")
    parser.add_argument("--no-combined", dest="combined", action="store_false",
                        help="task mode without the combined row (total + liver_segments + lung_vessels in one run)")
    parser.add_argument("--device", choices=("auto", "cpu"), default="auto",
                        help="task mode: medseg's --device; auto (the default, what a user gets) measures each "
                             "network's CPU engine first, as an install does, and runs the one chosen; cpu: PyTorch, "
                             "as TotalSegmentator")
    parser.add_argument("--profile", action="store_true", help="task mode: one more medseg run per row, profiled")
    parser.add_argument("--threads", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--work", type=Path, default=ROOT / "build" / "bench_totalsegmentator")
    args = parser.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    results: dict = {}
    print(f"load average before: {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; threads {args.threads}", flush=True)
    if args.tasks is not None:
        run_tasks(args, results)
    else:
        run_cases(args, results)
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("\n| row | medseg median [spread], peak | TotalSegmentator median [spread], peak | time / memory ratio | "
          "agreement |\n|---|---|---|---|---|")
    for name, row in results.items():
        cells = []
        for side in ("medseg", "TotalSegmentator"):
            t, p = row["seconds"][side], row["peak_bytes"][side]
            pss = max(row["peak_bytes"][f"{side} PSS"])
            cells.append(f"{statistics.median(t):.1f} s [{min(t):.1f}–{max(t):.1f}], {max(p) / 2**30:.2f} GiB "
                         f"(PSS {pss / 2**30:.2f})")
        print(f"| {name} ({row['title']}) | {cells[0]} | {cells[1]} | {row['ratio_time']:.2f}× / "
              f"{row['ratio_memory']:.2f}× (PSS {row['ratio_pss']:.2f}×) | {row['agreement']} |")
    (args.work / ("task_results.json" if args.tasks is not None else "results.json")).write_text(
        json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
