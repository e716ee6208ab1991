"""Starter v2 in one GPU run of at most 8 minutes (issue #27; ``make starter-v2-gpu``).

The 3D starter configurations lost to the 2D one on CPU training budgets (``make starter-v2``,
about an hour on 2 cores, resources/models/starter/README.md). Here the same recipe runs on
a GPU with the time it gives: the same training set (training_set_v2.json: rule-labelled
real CTs and the synthetic phantoms), the same flags as the Makefile's starter-v2 (2D at
3 x 2 x 2 mm; 3d_thin at 2 mm and 3d_thick at 5 x 2 x 2 mm, both started from the 2D kernels),
more iterations: each configuration's epochs are set from its measured rate so it trains
for its share of the budget (the two 3D ones side by side on the one GPU, as the Makefile
runs them on two cores). Then the same held-out scoring as ``medseg evaluate --held-out``:
lung1, example_ct_dicom, ge_head_tilt against the rule labels (as the app chooses, and each
configuration forced) and example_ct_dicom's bones against TotalSegmentator. A 3D
configuration is kept in the written package only where it beats the 2D one there.

The GPU machine has no SimpleITK or imagecodecs, so the cases travel as .npz (image, geometry,
labels in training indices), made here by ``pack`` (phantoms are regenerated there):

    .venv/bin/python benchmarks/starter_v2_gpu.py --pack          # build/gpu-starter-v2 (about 35 MiB)
    python3 benchmarks/starter_v2_gpu.py --out $OUT               # on the GPU machine (carry build/gpu-starter-v2)
    .venv/bin/python benchmarks/starter_v2_gpu.py --dry-run       # here on the CPU: seconds per configuration
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import gpu_pack  # noqa: E402

REPO = HERE.parent
PACKED = REPO / "build" / "gpu-starter-v2"
V2_SET = REPO / "resources" / "models" / "starter" / "training_set_v2.json"
REFERENCE = REPO / "resources" / "models" / "starter" / "reference_totalsegmentator.json"
BUDGET_SECONDS = 480
# seconds of training per configuration (3d_thin and 3d_thick train at the same time)
TRAIN_SECONDS = {"2d": 110, "3d_thin": 170, "3d_thick": 170}
CALIBRATION_ITERATIONS = 12
# The Makefile's starter-v2 flags (V2_COMMON + V2_2D / V2_3D), --threads dropped (the GPU machine's
# cores), epochs set from the measured rate; --validate-every large: the held-out scoring is the judge.
COMMON = ["--validate-every", "1000", "--base-features", "16", "--max-features", "64"]
RECIPES = {
    "2d": ["--configuration", "2d", "--configuration-name", "2d", "--target-spacing", "3", "2", "2",
           "--memory-gb", "0.35", "--iterations", "40", "--batch-size", "6"],
    "3d_thin": ["--configuration", "3d_fullres", "--configuration-name", "3d_thin", "--stages", "6", "--lr", "0.002",
                "--iterations", "15", "--batch-size", "2", "--target-spacing", "2", "2", "2", "--memory-gb", "1.0"],
    "3d_thick": ["--configuration", "3d_fullres", "--configuration-name", "3d_thick", "--stages", "6", "--lr",
                 "0.002", "--iterations", "15", "--batch-size", "2", "--target-spacing", "5", "2", "2",
                 "--memory-gb", "1.5"],
}


# --- packing (here) and the packed datasets (there) ---------------------------------------------------------


def pack_cases(folder: Path = PACKED) -> Path:
    """Every non-phantom case of the v2 set and of the TotalSegmentator reference as .npz, and each
    dataset's description (labels, colours, held-out names, post-processing, case specs) as JSON."""
    import numpy as np

    from medseg.model.datasets import open_dataset

    folder.mkdir(parents=True, exist_ok=True)
    for name, manifest in (("v2", V2_SET), ("reference", REFERENCE)):
        dataset = open_dataset(manifest, str(gpu_pack.SHARED))
        description = {field.name: getattr(dataset, field.name) for field in dataclasses.fields(dataset)
                       if field.name != "specs"}
        description["specs"] = [{"name": s.name, "label_rule": s.label_rule, "phantom": s.phantom, "weight": s.weight}
                                for s in dataset.specs]
        (folder / f"{name}.json").write_text(json.dumps(description, indent=1))
        for spec in dataset.specs:
            if spec.phantom is not None:
                continue  # regenerated on the GPU machine (its numpy, seeded): 24 MiB less to carry
            case = dataset.load(spec)
            image = case.image.array
            integral = np.array_equal(image, np.round(image)) and np.abs(image).max() < 32768
            np.savez_compressed(folder / f"{name}_{spec.name}.npz", image=image.astype(np.int16) if integral else image,
                                image_dtype=str(image.dtype), labels=case.label_map.array.astype(np.uint8),
                                spacing_mm=np.asarray(case.image.spacing_mm),
                                origin_mm=np.asarray(case.image.origin_mm), direction=case.image.direction,
                                notes=np.asarray(case.notes, dtype=str))
    return folder


def packed_dataset(which: str, folder: Path = PACKED):
    """The v2 set (or the reference set) with every case read from the .npz files (phantoms generated)."""
    import numpy as np

    from medseg.core.volume import Volume
    from medseg.model.datasets import Case, CaseSpec, Dataset

    class PackedDataset(Dataset):
        def load(self, spec):
            path = folder / f"{which}_{spec.name}.npz"
            if not path.is_file():
                return super().load(spec)  # a phantom
            data = np.load(path)
            image = Volume(data["image"].astype(str(data["image_dtype"])), tuple(data["spacing_mm"]),
                           tuple(data["origin_mm"]), data["direction"])
            return Case(spec.name, image, image.with_array(data["labels"]), [str(n) for n in data["notes"]])

    description = json.loads((folder / f"{which}.json").read_text())
    description["labels"] = {int(k): v for k, v in description["labels"].items()}
    description["colors"] = {int(k): tuple(v) for k, v in description["colors"].items()}
    description["specs"] = [CaseSpec(**spec) for spec in description["specs"]]
    return PackedDataset(**description)


# --- one configuration (a child process) ---------------------------------------------------------------------


def _settings(name: str, out: Path, device: str, extra: list[str]):
    from medseg.cli import build_parser
    from medseg.cli.train import run_settings

    args = build_parser().parse_args(["train", str(V2_SET), "--out", str(out), "--device", device,
                                      *COMMON, *RECIPES[name], *extra])
    return run_settings(args)


def train_configuration(name: str, out: Path, device: str, seconds: float, dry_run: bool) -> dict:
    """Calibrate the rate, then train for ``seconds``: returns the record (epochs, rate, time)."""
    from medseg.model.package import load_package
    from medseg.model.training import IterationEvent, train

    dataset = packed_dataset("v2")
    inflate = load_package(out.parent / "starter_2d") if name != "2d" else None
    record = {"configuration": name}
    config, plan_options = _settings(name, out, device, ["--epochs", "1", "--iterations", str(CALIBRATION_ITERATIONS)])
    times = []
    started = time.perf_counter()
    for event in train(dataset, out.with_name(out.name + "_calibration"), config, plan_options=plan_options,
                       inflate_from=inflate):
        if isinstance(event, IterationEvent):
            times.append(time.perf_counter())
    rate = (len(times) - 3) / (times[-1] - times[2])  # the first steps include cuDNN's autotuning
    record["calibration_seconds"] = round(time.perf_counter() - started, 1)
    config, plan_options = _settings(name, out, device, [])
    epochs = max(1, int(seconds * rate / config.iterations_per_epoch)) if not dry_run else 1
    config = dataclasses.replace(config, epochs=epochs)
    record.update(iterations_per_s=round(rate, 2), epochs=epochs, iterations=epochs * config.iterations_per_epoch)
    started = time.perf_counter()
    for _ in train(dataset, out, config, plan_options=plan_options, inflate_from=inflate,
                   provenance={"training_command": f"benchmarks/starter_v2_gpu.py ({name}, {epochs} epochs)"}):
        pass
    record["train_seconds"] = round(time.perf_counter() - started, 1)
    return record


# --- scoring and the package ------------------------------------------------------------------------------


def score(package, device: str) -> dict:
    """medseg evaluate --held-out: as the app chooses, each configuration forced; and against TotalSegmentator."""
    from medseg.workflows.evaluate import EvaluateRequest, evaluate
    from medseg.workflows.models import package_model
    from medseg.workflows.segment import SegmentSettings

    def cases_of(dataset, configuration=None):
        model = package_model(package, package.source_path)
        return evaluate(EvaluateRequest(model, dataset, specs=dataset.validation_specs,
                                        settings=SegmentSettings(device=device, configuration=configuration))).cases

    from medseg.model.evaluate import mean_dice

    scores = {}
    v2, reference = packed_dataset("v2"), packed_dataset("reference")
    for configuration in (None, *package.configurations):
        cases = cases_of(v2, configuration)
        scores[configuration or "as chosen"] = {
            "mean_dice": mean_dice(cases),
            "cases": {c.case: {"configuration": c.configuration, **{label.name: label.dice for label in c.labels}}
                      for c in cases}}
    cases = cases_of(reference)
    scores["TotalSegmentator bones"] = {"mean_dice": mean_dice(cases)}
    return scores


def mean_over_labels(dice: dict) -> float:
    values = [v for v in dice.values() if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pack", action="store_true", help="write the .npz cases here (build/gpu-starter-v2)")
    parser.add_argument("--out", default=os.environ.get("OUT", str(REPO / "build" / "starter_v2_gpu")))
    parser.add_argument("--device", default=None, help="default: cuda (cpu for --dry-run)")
    parser.add_argument("--dry-run", action="store_true", help="on the CPU here: 1 epoch each, imports as on the GPU")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--seconds", type=float, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.pack:
        folder = pack_cases()
        print(f"{folder}: {gpu_pack.size_mib(folder):.1f} MiB")
        return 0
    gpu_pack.bootstrap()
    if args.dry_run:
        gpu_pack.block_missing_packages()
    device = args.device or ("cpu" if args.dry_run else "cuda")
    out = Path(args.out)
    if args.child:
        record = train_configuration(args.child, out / f"starter_{args.child.replace('3d_', '')}", device,
                                     args.seconds, args.dry_run)
        print("RESULT " + json.dumps(record), flush=True)
        return 0
    import torch

    if device == "cuda" and not torch.cuda.is_available():
        print("starter_v2_gpu: no CUDA GPU here (use --dry-run for the CPU rehearsal)")
        return 2
    if not PACKED.is_dir():
        print(f"starter_v2_gpu: {PACKED} is missing: run with --pack first (and carry that folder)")
        return 2
    began = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)

    def start(name: str) -> subprocess.Popen:
        command = [sys.executable, __file__, "--child", name, "--seconds", str(TRAIN_SECONDS[name]), "--out",
                   str(out), "--device", device] + (["--dry-run"] if args.dry_run else [])
        return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def finish(name: str, process: subprocess.Popen) -> dict:
        stdout, stderr = process.communicate()
        lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
        if process.returncode or not lines:
            raise SystemExit(f"{name} failed (rc {process.returncode}):\n{stderr[-3000:]}")
        record = json.loads(lines[-1][len("RESULT "):])
        print(f"{name}: {record} ({time.perf_counter() - began:.0f} s since the start)", flush=True)
        return record

    records = {"2d": finish("2d", start("2d"))}
    three_d = {name: start(name) for name in ("3d_thin", "3d_thick")}  # side by side on the one GPU
    records.update({name: finish(name, process) for name, process in three_d.items()})

    from medseg.model.package import load_package, save_package
    from medseg.model.package_model import combine_packages

    names = {"2d": "starter_2d", "3d_thin": "starter_thin", "3d_thick": "starter_thick"}
    combined = combine_packages([load_package(out / names[n]) for n in ("2d", "3d_thin", "3d_thick")])
    scores = score(combined, device)
    two_d = mean_over_labels(scores["2d"]["mean_dice"])
    lines = ["held-out mean Dice (lung1, example_ct_dicom, ge_head_tilt; rule labels), mean over labels:"]
    for name, entry in scores.items():
        lines.append(f"  {name:<24} " + "  ".join(f"{k} {v:.3f}" for k, v in entry["mean_dice"].items())
                     + (f"   mean {mean_over_labels(entry['mean_dice']):.3f}" if name != "TotalSegmentator bones" else ""))
    kept = ["2d"] + [n for n in ("3d_thin", "3d_thick") if mean_over_labels(scores[n]["mean_dice"]) > two_d]
    lines.append(f"3D configurations that beat the 2D one ({two_d:.3f}) on the held-out scans: "
                 f"{', '.join(kept[1:]) or 'none'}; the package keeps {', '.join(kept)}")
    shipped = combine_packages([load_package(out / names[n]) for n in kept]) if len(kept) > 1 else \
        load_package(out / names["2d"])
    save_package(shipped, out / "starter_v2")
    print("\n".join(lines), flush=True)
    (out / "starter_v2_gpu.json").write_text(json.dumps(
        {"device": device, "gpu": torch.cuda.get_device_name(0) if device == "cuda" else None, "training": records,
         "scores": scores, "kept": kept, "seconds": round(time.perf_counter() - began, 1)}, indent=1, default=str))
    print(f"done in {time.perf_counter() - began:.0f} s (budget {BUDGET_SECONDS} s): {out / 'starter_v2'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
