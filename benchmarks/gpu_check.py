"""The GPU check (issues #16, #27): every GPU figure in one run of at most 6 minutes on one GPU machine.

Prepare here, then run there with the packed folder carried along (the tree stays under 64 MiB):

    .venv/bin/python benchmarks/gpu_pack.py                          # build/gpu-check/: peers, stand-ins, CT .npz
    # on the GPU machine (carry build/gpu-check):
    python3 benchmarks/gpu_check.py --out $OUT                       # writes $OUT/gpu_check.json too
    # a dry run here, on the CPU, refusing every import the GPU machine lacks:
    .venv/bin/python benchmarks/gpu_check.py --dry-run

Each part runs in its own process (its own peak memory and CUDA state), with a share of
the 6-minute budget; a part that fails or runs out of time is reported and the rest go on.

  medseg    512 x 512 x 300 CT (lung1 tiled, 0.78 x 0.78 x 1.5 mm) through nnU-Net's 3d_fullres-sized
            network (6 stages, 32 -> 320, 128^3, 14 labels, random weights), model load included:
            cold (first call in the process) and warm, peak GPU memory, the phase table of a warm
            call; labels with 1 tile a pass and in float32 too (what the agreement depends on)
  nnunet    nnU-Net v2's predictor on the same CT (everything on the device, no mirroring), once
  floor     the bare network over the same tiles (batch 1 and 4): what any pipeline can reach
  train     training steps on that plan, batch 2, deep supervision: fp32 and AMP, real patches
            (medseg's sampler, prefetched as medseg train does, and in the loop) vs ready tensors
  labels117 a 117-label network (TotalSegmentator's label count) on the same CT: export time,
            peak GPU memory of the export against 2 x label map + one class's logits
  starter   the shipped starter on the real lung1 series, labels against the CPU's

Targets (issue #27): medseg <= 2.0 s warm, <= 5 s cold, <= 0.05x nnU-Net's time; training with real
patches >= 90 % of the ready-tensor rate (AMP); labels >= 99.99 % equal to nnU-Net's.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_pack  # noqa: E402

BUDGET_SECONDS = 360
# each part's share of the budget (seconds); the order is the order they run in
PARTS = {"medseg": 70, "nnunet": 150, "floor": 20, "train": 55, "labels117": 40, "starter": 20}
NETWORK = dict(spacing_zyx=(1.5, 1.5, 1.5), patch_size=(128, 128, 128), n_stages=6, base_features=32, seed=3)
SMALL_NETWORK = dict(spacing_zyx=(1.5, 1.5, 1.5), patch_size=(32, 64, 64), n_stages=4, base_features=8, seed=3)


# --- helpers (in the child processes) -----------------------------------------------------------------


def ct_volume(slices: int, dry_run: bool = False):
    import numpy as np

    from medseg.core.volume import Volume

    lung = gpu_pack.load_volume(gpu_pack.PACK / "data" / "lung1.npz")
    array = np.tile(lung.array, (-(-slices // lung.array.shape[0]), 1, 1))[:slices]
    if dry_run:  # the CPU rehearsal: the middle 128 x 128 pixels
        array = array[:, 192:320, 192:320]
    array = np.ascontiguousarray(array)
    return Volume(array, gpu_pack.CT_SPACING_XYZ, lung.origin_mm, lung.direction)


def synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def reset_peak(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()


def peak_gpu_mb(device: str) -> float:
    import torch

    return torch.cuda.max_memory_allocated() / 2**20 if device == "cuda" else 0.0


def timed(device: str, function):
    reset_peak(device)
    started = time.perf_counter()
    result = function()
    synchronize(device)
    return result, round(time.perf_counter() - started, 3), round(peak_gpu_mb(device))


# --- the parts -----------------------------------------------------------------------------------------


def part_medseg(model: Path, args, out: Path) -> dict:
    import numpy as np
    import torch

    from medseg.model import backends
    from medseg.model.infer import segment
    from medseg.model.logits_grid import logits_to_label_map
    from medseg.model.package import build_networks
    from medseg.model.preprocess import preprocess_to
    from medseg.model.profiling import Profiling
    from medseg.model.sliding_window import sliding_window_logits
    from medseg.workflows.models import open_model

    volume = ct_volume(args.slices, args.dry_run)
    record = {"ct_shape_zyx": list(volume.shape_zyx), "runs": []}
    for attempt in range(3):  # cold (first in this process), then warm
        result, seconds, gpu_mb = timed(args.device, lambda: segment(volume, open_model(model).package, device=args.device,
                                                                     postprocess=False))
        record["runs"].append({"seconds": seconds, "peak_gpu_mb": gpu_mb, "device": result.device_used,
                               "fallbacks": result.fallbacks})
    np.save(out / "labels_medseg.npy", result.label_map.array)
    with Profiling(None, args.device if args.device == "cuda" else None) as profiling:
        segment(volume, open_model(model).package, device=args.device, postprocess=False)
    record["phases_warm"] = profiling.profile.to_dict(profiling.order)
    record["phase_table_warm"] = profiling.table()
    # what the agreement with nnU-Net depends on: 1 tile a pass (nnU-Net's batch), and no float16 at all
    package = open_model(model).package
    plan = package.configurations["3d_fullres"]
    prep = preprocess_to(volume, plan, args.device)
    image = prep.data
    one = sliding_window_logits(backends.TorchRunner(build_networks(package, "3d_fullres", args.device),
                                                     args.device), image, plan, tile_batch=1)
    np.save(out / "labels_medseg_batch1.npy", logits_to_label_map(one, prep))
    del one
    runner = backends.TorchRunner(build_networks(package, "3d_fullres", args.device), args.device)
    runner.autocast = False
    fp32 = sliding_window_logits(runner, image, plan)
    np.save(out / "labels_medseg_fp32.npy", logits_to_label_map(fp32, prep))
    record["torch"] = torch.__version__
    return record


def part_nnunet(model: Path, args, out: Path) -> dict:
    import numpy as np
    import torch
    from nnunetv2.inference.predict_from_raw_data import nnUNetPredictor

    torch.backends.cudnn.benchmark = True
    volume = ct_volume(args.slices, args.dry_run)
    spacing = [volume.spacing_zyx[0], volume.spacing_zyx[1], volume.spacing_zyx[2]]

    def predict():
        predictor = nnUNetPredictor(tile_step_size=0.5, use_gaussian=True, use_mirroring=False,
                                    perform_everything_on_device=args.device == "cuda",
                                    device=torch.device(args.device), allow_tqdm=False)
        predictor.initialize_from_trained_model_folder(str(model), use_folds=(0,))
        return predictor.predict_single_npy_array(volume.array[None].astype(np.float32), {"spacing": spacing},
                                                  None, None, False)

    labels, seconds, gpu_mb = timed(args.device, predict)
    np.save(out / "labels_nnunet.npy", np.asarray(labels).astype(np.uint8))
    return {"runs": [{"seconds": seconds, "peak_gpu_mb": gpu_mb}]}


def part_floor(model: Path, args, out: Path) -> dict:
    import torch

    from medseg.model.package import build_networks
    from medseg.model.preprocess import preprocess_to
    from medseg.model.sliding_window import pad_to_patch
    from medseg.model.tiling import tile_slicers
    from medseg.workflows.models import open_model

    torch.backends.cudnn.benchmark = True
    package = open_model(model).package
    plan = package.configurations["3d_fullres"]
    padded, _ = pad_to_patch(preprocess_to(ct_volume(args.slices, args.dry_run), plan, args.device).data, plan.patch_size)
    tiles = len(tile_slicers(padded.shape[1:], plan.patch_size, 0.5))
    network = build_networks(package, "3d_fullres", args.device)[0].eval()
    record = {"preprocessed_shape": list(padded.shape[1:]), "tiles": tiles}
    for batch in (1, 4):
        x = torch.randn(batch, 1, *plan.patch_size, device=args.device)
        with torch.inference_mode(), torch.autocast(args.device, enabled=args.device == "cuda"):
            for _ in range(3):
                network(x)
            synchronize(args.device)
            repeats = 10 if args.device == "cuda" else 1
            started = time.perf_counter()
            for _ in range(repeats):
                network(x)
            synchronize(args.device)
        per_tile = (time.perf_counter() - started) / repeats / batch
        record[f"batch{batch}_ms_per_tile"] = round(per_tile * 1000, 2)
        record[f"batch{batch}_floor_seconds"] = round(per_tile * tiles, 3)
    return record


def part_train(model: Path, args, out: Path) -> dict:
    import torch
    from training_step import optimizer_step

    from medseg.model.datasets import Case
    from medseg.model.losses import DeepSupervisionLoss
    from medseg.model.rule_labels import rule_label_map
    from medseg.model.training import DistributedContext, TrainConfig, prepare_case
    from medseg.model.training.prefetch import BatchPrefetcher, default_workers
    from medseg.model.training.sampling import host_batch
    from medseg.model.unet import build_network
    from medseg.workflows.models import open_model

    torch.backends.cudnn.benchmark = True
    package = open_model(model).package
    plan = package.configurations["3d_fullres"]
    image = gpu_pack.load_volume(gpu_pack.PACK / "data" / "ct_sm.npz")
    case = prepare_case(Case("ct_sm", image, rule_label_map(image)), plan)
    device = torch.device(args.device)
    ctx = DistributedContext(0, 1, device)
    batch, steps, warmup = 2, (12 if args.device == "cuda" else 2), (3 if args.device == "cuda" else 1)
    config = TrainConfig(seed=1)
    results = {}
    for amp in ((False, True) if args.device == "cuda" else (False,)):
        for source in ("tensors", "prefetched", "in-loop"):
            network = build_network(plan, package.num_classes, deep_supervision=True).to(device)
            optimizer = torch.optim.SGD(network.parameters(), lr=1e-2, momentum=0.99, nesterov=True)
            scaler = torch.amp.GradScaler("cuda", enabled=amp)
            loss_fn = DeepSupervisionLoss()
            keys = [(0, i) for i in range(warmup + steps)]
            make = lambda e, i: host_batch([case], plan, config, batch, e, i, ctx)  # noqa: E731
            fixed = tuple(t.to(device) for t in make(0, 0))
            feeder = BatchPrefetcher(make, keys, device, default_workers(device) if source == "prefetched" else 0)

            def step(i):
                images, targets = fixed if source == "tensors" else feeder.get(0, i)
                return optimizer_step(network, network, optimizer, scaler, loss_fn, images, targets, amp, device.type)

            for i in range(warmup):
                step(i)
            reset_peak(args.device)
            started = time.perf_counter()
            for i in range(steps):
                loss = step(warmup + i)
            synchronize(args.device)
            seconds = time.perf_counter() - started
            feeder.close()
            results[f"{'amp' if amp else 'fp32'}_{source}"] = {
                "iterations_per_s": round(steps / seconds, 2), "peak_gpu_mb": round(peak_gpu_mb(args.device)),
                "last_loss": round(float(loss.detach()), 4)}
    return results


def part_labels117(model: Path, args, out: Path) -> dict:
    import numpy as np
    import torch
    from nnunet_fixture import make_nnunet_result_folder

    from medseg.model import backends
    from medseg.model.logits_grid import logits_to_label_map
    from medseg.model.nnunet_import import import_nnunet
    from medseg.model.package import build_networks
    from medseg.model.preprocess import preprocess_to
    from medseg.model.sliding_window import sliding_window_logits

    names = ["background"] + [f"structure_{i}" for i in range(1, 117)]
    network = SMALL_NETWORK if args.dry_run else NETWORK
    folder = make_nnunet_result_folder(Path(args.work) / "labels117", labels=names, **network)
    package = import_nnunet(folder)
    plan = package.configurations["3d_fullres"]
    volume = ct_volume(args.slices, args.dry_run)
    prep = preprocess_to(volume, plan, args.device)
    runner = backends.TorchRunner(build_networks(package, "3d_fullres", args.device), args.device)
    logits, window_seconds, window_gpu = timed(args.device, lambda: sliding_window_logits(runner, prep.data, plan))
    runner = None  # the networks' GPU memory freed (the timed lambda is done with them)
    label_bytes = int(np.prod(volume.shape_zyx))
    one_class_bytes = int(np.prod(volume.shape_zyx)) * 4
    if args.device == "cuda":
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
    started = time.perf_counter()
    labels = logits_to_label_map(logits, prep)
    synchronize(args.device)
    export_seconds = time.perf_counter() - started
    export_gpu = (torch.cuda.max_memory_allocated() - before) if args.device == "cuda" else None
    return {"logits_shape": list(logits.shape), "logits_gb": round(logits.numel() * 2 / 2**30, 2),
            "sliding_window_seconds": window_seconds, "sliding_window_peak_gpu_mb": window_gpu,
            "export_seconds": round(export_seconds, 3),
            "export_peak_gpu_mb_above_logits": round(export_gpu / 2**20, 1) if export_gpu is not None else None,
            "budget_mb": round((2 * label_bytes + one_class_bytes) / 2**20, 1),
            "labels_present": int(len(np.unique(labels)))}


def part_starter(model: Path, args, out: Path) -> dict:
    import numpy as np

    from medseg.model.infer import segment
    from medseg.workflows.models import open_model

    volume = gpu_pack.load_volume(gpu_pack.PACK / "data" / "lung1.npz")
    if args.dry_run:  # the CPU rehearsal: 8 slices
        volume = volume.__class__(np.ascontiguousarray(volume.array[20:28]), volume.spacing_mm, volume.origin_mm,
                                  volume.direction)
    runs = []
    for _ in range(2):
        result, seconds, gpu_mb = timed(args.device, lambda: segment(volume, open_model(None).package, device=args.device))
        runs.append({"seconds": seconds, "peak_gpu_mb": gpu_mb, "configuration": result.configuration})
    record = {"runs": runs, "volumes_ml": {k: round(v, 1) for k, v in result.volumes_ml.items()}}
    reference = gpu_pack.PACK / "data" / "starter_lung1_cpu.npz"
    if reference.exists() and not args.dry_run:
        cpu = np.load(reference)["labels"]
        record["agreement_with_cpu"] = float((cpu == result.label_map.array).mean())
    return record


PART_FUNCTIONS = {"medseg": part_medseg, "nnunet": part_nnunet, "floor": part_floor, "train": part_train,
                  "labels117": part_labels117, "starter": part_starter}


# --- the parent ------------------------------------------------------------------------------------------


def child_main(args) -> int:
    gpu_pack.bootstrap()
    if args.dry_run:
        gpu_pack.block_missing_packages()
    import torch

    torch.set_num_threads(max(1, min(16, os.cpu_count() or 1)) if not args.dry_run else 2)
    out = Path(args.out)
    started = time.perf_counter()
    record = PART_FUNCTIONS[args.child](Path(args.model), args, out)
    record.update(part=args.child, wall=round(time.perf_counter() - started, 2),
                  peak_rss_mb=round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024))
    print("RESULT " + json.dumps(record), flush=True)
    return 0


def build_network_folder(work: Path, dry_run: bool) -> Path:
    from nnunet_fixture import make_nnunet_result_folder

    names = ["background"] + [f"organ_{i}" for i in range(1, 14)]
    return make_nnunet_result_folder(work / "fullres", labels=names, **(SMALL_NETWORK if dry_run else NETWORK))


def agreement(out: Path) -> dict:
    import numpy as np

    labels = {p.stem.replace("labels_", ""): np.load(p) for p in out.glob("labels_*.npy")}
    found = {}
    reference = labels.get("nnunet")
    for name, array in labels.items():
        if name != "nnunet" and reference is not None and array.shape == reference.shape:
            found[f"{name} vs nnunet"] = float((array == reference).mean())
    if "medseg" in labels:
        for name in ("medseg_batch1", "medseg_fp32"):
            if name in labels:
                found[f"medseg vs {name}"] = float((labels[name] == labels["medseg"]).mean())
    return found


def summary(records: dict, agree: dict) -> list[str]:
    lines = []
    medseg, nnunet = records.get("medseg"), records.get("nnunet")
    if medseg:
        cold, warm = medseg["runs"][0]["seconds"], min(r["seconds"] for r in medseg["runs"][1:])
        lines.append(f"medseg 512x512x{medseg['ct_shape_zyx'][0]}: cold {cold:.2f} s (target <= 5), warm {warm:.2f} s "
                     f"(target <= 2.0), peak GPU {max(r['peak_gpu_mb'] for r in medseg['runs'])} MB")
        if nnunet:
            seconds = nnunet["runs"][0]["seconds"]
            lines.append(f"nnU-Net: {seconds:.1f} s, peak GPU {nnunet['runs'][0]['peak_gpu_mb']} MB; medseg/nnU-Net "
                         f"warm {warm / seconds:.3f}x, cold {cold / seconds:.3f}x (target <= 0.05)")
        lines.append(medseg["phase_table_warm"])
    for key, value in agree.items():
        lines.append(f"labels equal, {key}: {value:.4%}")
    if "train" in records:
        train = records["train"]
        for precision in ("amp", "fp32"):
            if f"{precision}_tensors" in train:
                ready = train[f"{precision}_tensors"]["iterations_per_s"]
                ahead = train[f"{precision}_prefetched"]["iterations_per_s"]
                loop = train[f"{precision}_in-loop"]["iterations_per_s"]
                lines.append(f"training {precision}: ready tensors {ready} it/s, medseg's sampler prefetched {ahead} "
                             f"it/s ({ahead / ready:.0%} of ready; target >= 90 % with AMP), in the loop {loop} it/s")
    if "floor" in records:
        floor = records["floor"]
        lines.append(f"floor: {floor['tiles']} tiles, batch 1 {floor['batch1_floor_seconds']} s, "
                     f"batch 4 {floor['batch4_floor_seconds']} s")
    if "labels117" in records:
        many = records["labels117"]
        lines.append(f"117 labels: logits {many['logits_gb']} GB, export {many['export_seconds']} s, export peak GPU "
                     f"+{many['export_peak_gpu_mb_above_logits']} MB (budget {many['budget_mb']} MB)")
    if "starter" in records:
        starter = records["starter"]
        lines.append(f"starter on lung1: {', '.join(str(r['seconds']) + ' s' for r in starter['runs'])}; labels equal "
                     f"to the CPU's: {starter.get('agreement_with_cpu', 'no CPU reference packed')}")
    return lines


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slices", type=int, default=300)
    parser.add_argument("--device", default=None, help="default: cuda (cpu for --dry-run)")
    parser.add_argument("--parts", default=",".join(PARTS))
    parser.add_argument("--out", default=os.environ.get("OUT", "/tmp/gpu-check-out"))
    parser.add_argument("--dry-run", action="store_true",
                        help="here, on the CPU: a tiny network on 24 x 128 x 128 voxels, imports refused as on the GPU "
                             "machine")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--model", help=argparse.SUPPRESS)
    parser.add_argument("--work", help=argparse.SUPPRESS)
    args = parser.parse_args()
    args.device = args.device or ("cpu" if args.dry_run else "cuda")
    if args.child:
        return child_main(args)
    if not (gpu_pack.PACK / "data" / "lung1.npz").is_file():
        print(f"gpu_check: {gpu_pack.PACK} is missing: run benchmarks/gpu_pack.py first (and carry that folder)")
        return 2
    gpu_pack.bootstrap()
    if args.dry_run:
        gpu_pack.block_missing_packages()
        args.slices = min(args.slices, 24)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("gpu_check: no CUDA GPU here (use --dry-run for the CPU rehearsal)")
        return 2
    began = time.perf_counter()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    work = out / "work"
    info = {"torch": torch.__version__, "gpu": torch.cuda.get_device_name(0) if torch.cuda.is_available() else None,
            "device": args.device, "slices": args.slices, "dry_run": args.dry_run}
    print("INFO " + json.dumps(info), flush=True)
    model = build_network_folder(work, args.dry_run)
    records: dict = {}
    for part in args.parts.split(","):
        scale = 10 if args.dry_run else 1  # the CPU rehearsal may take longer; the GPU run has 6 minutes
        remaining = scale * BUDGET_SECONDS - (time.perf_counter() - began)
        limit = min(PARTS[part] * scale, remaining - 5)
        if limit < 10:
            print(f"SKIP {part}: {remaining:.0f} s of the budget left", flush=True)
            continue
        command = [sys.executable, __file__, "--child", part, "--model", str(model), "--work", str(work),
                   "--slices", str(args.slices), "--device", args.device, "--out", str(out)]
        if args.dry_run:
            command.append("--dry-run")
        started = time.perf_counter()
        try:
            done = subprocess.run(command, capture_output=True, text=True, timeout=limit)
        except subprocess.TimeoutExpired:
            print(f"TIMEOUT {part} after {limit:.0f} s", flush=True)
            continue
        lines = [line for line in done.stdout.splitlines() if line.startswith("RESULT ")]
        if done.returncode or not lines:
            print(f"FAIL {part} rc={done.returncode} after {time.perf_counter() - started:.1f} s\n"
                  f"{done.stderr[-2500:]}", flush=True)
            continue
        records[part] = json.loads(lines[-1][len("RESULT "):])
        print(f"{part} ({time.perf_counter() - started:.0f} s): " + lines[-1][len("RESULT "):], flush=True)
    agree = agreement(out)
    report = summary(records, agree)
    print("\n".join(["", f"== summary ({time.perf_counter() - began:.0f} s in all)", *report]), flush=True)
    (out / "gpu_check.json").write_text(json.dumps({"info": info, "records": records, "agreement": agree,
                                                    "summary": report}, indent=1))
    return 0 if records else 1


if __name__ == "__main__":
    sys.exit(main())
