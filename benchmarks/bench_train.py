"""Training throughput (patches/s) and peak memory for the starter model's plan.

CPU, fp32: one process (2 threads) against two DDP processes over gloo (1 thread each,
the same global batch and the same 2 cores), each run in a fresh process so peak RSS is
its own. Where CUDA is available, also fp32 against AMP on the GPU. Patches are real:
example_ct_sm from shared/data with rule-based labels, sampled and augmented exactly as
``medseg train`` does.

Then the Train & Export tab against the command line on the same run (fine-tuning the
starter on example_ct_sm): iterations/s with the tab's live plots vs ``medseg train --json``
in a subprocess, the time from Start to the first plotted point, and the longest
event-loop gap while the tab trains.

    .venv/bin/python benchmarks/bench_train.py [--steps 8] [--batch 6] [--gui-only]
"""

from __future__ import annotations

import argparse
import os
import resource
import socket
import sys
import time
from importlib import resources
from pathlib import Path

import torch
import torch.multiprocessing as mp

REPO = Path(__file__).resolve().parents[1]
DATA = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
STARTER = Path(str(resources.files("medseg.resources") / "models" / "starter"))


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _worker(rank: int, world: int, port: int, steps: int, batch: int, device: str, amp: bool, threads: int,
            results: "mp.Queue") -> None:
    import torch.distributed as dist
    from training_step import optimizer_step

    from medseg.io import load
    from medseg.model.datasets import Case
    from medseg.model.losses import DeepSupervisionLoss
    from medseg.model.package import load_package
    from medseg.model.rule_labels import rule_label_map
    from medseg.model.training import DistributedContext, TrainConfig, local_batch, prepare_case
    from medseg.model.unet import build_network

    torch.set_num_threads(threads)
    if world > 1:
        os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
        dist.init_process_group("gloo", rank=rank, world_size=world)
    package = load_package(STARTER)
    plan = next(iter(package.configurations.values()))
    image = load(DATA / "ct" / "totalsegmentator" / "example_ct_sm.nii.gz")
    case = prepare_case(Case("example_ct_sm", image, rule_label_map(image)), plan)
    context = DistributedContext(rank, world, torch.device(device))
    network = build_network(plan, package.num_classes, deep_supervision=True).to(device)
    model = torch.nn.parallel.DistributedDataParallel(network) if world > 1 else network
    optimizer = torch.optim.SGD(network.parameters(), lr=1e-2, momentum=0.99, nesterov=True)
    scaler = torch.amp.GradScaler("cuda", enabled=amp)
    loss_fn = DeepSupervisionLoss()
    config = TrainConfig(seed=1)

    def step(iteration: int) -> None:
        images, targets = local_batch([case], plan, config, batch, 0, iteration, context)
        optimizer_step(model, network, optimizer, scaler, loss_fn, images, targets, amp, device.split(":")[0])

    for warmup in range(2):
        step(warmup)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    for iteration in range(steps):
        step(2 + iteration)
    if device.startswith("cuda"):
        torch.cuda.synchronize()
    elapsed = time.perf_counter() - started
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    gpu_mb = torch.cuda.max_memory_allocated() / 2**20 if device.startswith("cuda") else 0.0
    results.put({"rank": rank, "seconds": elapsed, "peak_rss_mb": peak_mb, "gpu_peak_mb": gpu_mb})
    if world > 1:
        dist.destroy_process_group()


def run(world: int, steps: int, batch: int, device: str = "cpu", amp: bool = False, threads: int = 1) -> dict:
    context = mp.get_context("spawn")
    results = context.Queue()
    port = _free_port()
    processes = [context.Process(target=_worker, args=(r, world, port, steps, batch, device, amp, threads, results))
                 for r in range(world)]
    for process in processes:
        process.start()
    records = [results.get(timeout=1800) for _ in processes]
    for process in processes:
        process.join()
    seconds = max(r["seconds"] for r in records)
    return {"patches_per_s": batch * steps / seconds, "peak_rss_mb_per_process": max(r["peak_rss_mb"] for r in records),
            "peak_rss_mb_total": sum(r["peak_rss_mb"] for r in records),
            "gpu_peak_mb": max(r["gpu_peak_mb"] for r in records)}


def _iteration_rate(times: list[float]) -> float:
    """Iterations per second between the first and the last iteration event (loading excluded)."""
    return (len(times) - 1) / (times[-1] - times[0]) if len(times) > 1 and times[-1] > times[0] else float("nan")


def _cli_iteration_rate(manifest: Path, out: Path, arguments: list[str]) -> float:
    """``medseg train --json`` in a subprocess: iteration events timed as they arrive on the pipe."""
    import subprocess

    process = subprocess.Popen([sys.executable, "-m", "medseg", "train", str(manifest), "--out", str(out),
                                *arguments, "--json"], stdout=subprocess.PIPE, text=True)
    times = [time.perf_counter() for line in process.stdout if '"event": "iteration"' in line]
    process.wait()
    return _iteration_rate(times)


def _gui_run(app, manifest: Path, workspace: Path, epochs: int, iterations: int, batch: int) -> dict:
    """The tab, same run, live plots on: rate, Start -> first plotted point, longest event-loop gap
    from Start until the run's plots are saved (the end of a run included)."""
    from PySide6.QtCore import QEventLoop, QTimer

    from medseg.gui.train.tab import TrainExportTab

    tab = TrainExportTab(workspace=workspace)
    tab.resize(1400, 820)
    tab.show()
    tab.pages.setCurrentWidget(tab.training_panel)  # the user watches the curves
    tab.dataset_panel._add_dataset(str(manifest), "manifest")
    events = QEventLoop()  # its processEvents(); PySide6 6.12's static one drops a reference to None per call
    while tab.dataset_panel.job is not None:
        events.processEvents()
        time.sleep(0.001)
    training = tab.training_panel
    training.refresh_labels()
    training.epochs.setValue(epochs)
    training.iterations.setValue(iterations)
    training.batch_size.setValue(batch)
    training.device.setCurrentText("CPU")
    times: list[float] = []
    longest = [0.0, None, 0.0]  # longest gap, last tick, when the longest ended

    def tick() -> None:
        now = time.perf_counter()
        if longest[1] is not None and now - longest[1] > longest[0]:
            longest[0], longest[2] = now - longest[1], now
        longest[1] = now

    timer = QTimer()
    timer.setInterval(5)
    timer.timeout.connect(tick)
    ended: list[dict] = []
    saved: list[str] = []
    training.run_ended.connect(ended.append)
    training.plots_saved.connect(saved.append)
    clicked = time.monotonic()
    timer.start()
    training.start()
    training.runner.record.connect(lambda r: times.append(time.perf_counter()) if r["event"] == "iteration" else None)
    while not (ended and saved):
        events.processEvents()
        time.sleep(0.001)
    timer.stop()
    tab.shutdown()
    tab.close()
    phase = "before the first iteration" if times and longest[2] < times[0] else (
        "during the iterations" if times and longest[2] <= times[-1] else "after the last iteration")
    return {"rate": _iteration_rate(times), "first_plot": (training.curves.first_plotted_at or float("nan")) - clicked,
            "gap_ms": 1000 * longest[0], "gap_phase": phase, "ended": ended[0]["event"]}


def _spread(values: list[float], unit: str = "", digits: int = 2) -> str:
    ordered = sorted(values)
    return (f"{ordered[len(ordered) // 2]:.{digits}f}{unit} [{ordered[0]:.{digits}f}-{ordered[-1]:.{digits}f}]"
            if len(ordered) > 1 else f"{ordered[0]:.{digits}f}{unit}")


def gui_against_cli(epochs: int, iterations: int, batch: int, repeats: int = 3) -> None:
    import json
    import tempfile

    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from PySide6.QtCore import QStandardPaths
    from PySide6.QtWidgets import QApplication

    work = Path(tempfile.mkdtemp(prefix="bench_train_gui_"))
    manifest = work / "set.json"
    manifest.write_text(json.dumps({
        "name": "bench", "data_root": str(DATA / "ct" / "totalsegmentator"), "labels": ["body", "lungs", "bones"],
        "cases": [{"name": "sm", "image": "example_ct_sm.nii.gz", "label_rule": "starter"}]}))
    arguments = ["--epochs", str(epochs), "--iterations", str(iterations), "--batch-size", str(batch),
                 "--device", "cpu", "--from", str(STARTER)]
    QStandardPaths.setTestModeEnabled(True)
    app = QApplication.instance() or QApplication([])
    print(f"GUI vs CLI, fine-tuning the starter on example_ct_sm: {epochs} x {iterations} iterations, batch {batch}, "
          f"CPU; {repeats} runs of each, alternating (median [min-max])")
    cli_rates, gui = [], []
    for repeat in range(repeats):
        cli_rates.append(_cli_iteration_rate(manifest, work / f"cli{repeat}", arguments))
        gui.append(_gui_run(app, manifest, work / f"tab{repeat}", epochs, iterations, batch))
        print(f"  run {repeat + 1}: CLI {cli_rates[-1]:.2f} it/s, tab {gui[-1]['rate']:.2f} it/s ({gui[-1]['ended']}), "
              f"longest event-loop gap {gui[-1]['gap_ms']:.0f} ms ({gui[-1]['gap_phase']}), "
              f"Start -> first point {gui[-1]['first_plot']:.2f} s")
    print(f"  medseg train --json (subprocess): {_spread(cli_rates, ' it/s')}")
    print(f"  Train & Export tab, live plots:   {_spread([g['rate'] for g in gui], ' it/s')}")
    print(f"  GUI/CLI throughput {_spread([g['rate'] / c for g, c in zip(gui, cli_rates)], 'x')}; "
          f"Start -> first plotted point {_spread([g['first_plot'] for g in gui], ' s')}; "
          f"longest event-loop gap, Start to plots saved {_spread([g['gap_ms'] for g in gui], ' ms', 0)}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=6, help="global batch (the starter was trained with 6)")
    parser.add_argument("--gui-only", action="store_true", help="only the GUI-against-CLI measurement")
    parser.add_argument("--gui-epochs", type=int, default=2)
    parser.add_argument("--gui-iterations", type=int, default=15)
    parser.add_argument("--gui-repeats", type=int, default=3)
    args = parser.parse_args()
    if args.gui_only:
        gui_against_cli(args.gui_epochs, args.gui_iterations, 2, args.gui_repeats)
        return 0
    from medseg.model.package import load_package

    plan = next(iter(load_package(STARTER).configurations.values()))
    print(f"starter plan: {plan.dim}D, patch {plan.patch_size}, features {plan.features_per_stage}; "
          f"global batch {args.batch}, {args.steps} timed steps after 2 warm-up steps; {os.cpu_count()} CPUs")
    one = run(1, args.steps, args.batch, threads=2)
    two = run(2, args.steps, args.batch, threads=1)
    print(f"{'run':<34} {'patches/s':>10} {'peak RSS/process MB':>20} {'peak RSS total MB':>18}")
    for name, record in (("CPU fp32, 1 process x 2 threads", one), ("CPU fp32, 2 processes (gloo) x 1", two)):
        print(f"{name:<34} {record['patches_per_s']:10.2f} {record['peak_rss_mb_per_process']:20.0f} "
              f"{record['peak_rss_mb_total']:18.0f}")
    print(f"ratio 2 processes / 1 process: throughput {two['patches_per_s'] / one['patches_per_s']:.2f}x, "
          f"total peak memory {two['peak_rss_mb_total'] / one['peak_rss_mb_total']:.2f}x")
    if torch.cuda.is_available():
        fp32 = run(1, args.steps * 4, args.batch, "cuda", amp=False)
        amp = run(1, args.steps * 4, args.batch, "cuda", amp=True)
        print(f"CUDA fp32 {fp32['patches_per_s']:.1f} patches/s ({fp32['gpu_peak_mb']:.0f} MB), AMP "
              f"{amp['patches_per_s']:.1f} patches/s ({amp['gpu_peak_mb']:.0f} MB): AMP/fp32 "
              f"{amp['patches_per_s'] / fp32['patches_per_s']:.2f}x")
    else:
        print("CUDA: not available on this machine (AMP throughput not measured)")
    gui_against_cli(args.gui_epochs, args.gui_iterations, 2, args.gui_repeats)
    return 0


if __name__ == "__main__":
    sys.exit(main())
