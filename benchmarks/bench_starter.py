"""The starter model's configurations side by side on the held-out scans: Dice, false lung, CPU time.

For every held-out scan of ``resources/models/starter/training_set.json`` (never trained on by
any configuration) and one chest slice no configuration saw (``CT1_J2KR``, left out when the
manifest trains on it), each configuration
of the starter (``2d``, ``3d_thin``, ``3d_thick``) is forced in turn, and then the one the
series' spacing chooses (``auto``, what the app runs). Printed per scan and configuration:

* Dice of body, lungs and bones against the rule labels (``medseg.model.rule_labels``, the
  labeller that also made the training labels: agreement with it, not anatomy);
* Dice of bones against TotalSegmentator (the union of its bone labels, an independent
  model; ``reference_totalsegmentator.json``), where a held-out scan has it;
* false lung: ml labelled lung outside the rule's lungs (the 2D starter's known error is air
  next to the chest wall, e.g. between the arm and the torso, taken for lung);
* CPU time of ``medseg.model.infer.segment`` (median [min-max] of --repeats runs, in-process,
  torch on the CPU with --threads threads).

Run: .venv/bin/python benchmarks/bench_starter.py [--repeats 3] [--threads 2] [--json out.json]
     [--model build/starter_v2 --manifest resources/models/starter/training_set_v2.json]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("MEDSEG_SHARED_DATA", REPO.parent / "shared" / "data"))
STARTER_DIR = REPO / "resources" / "models" / "starter"
# a chest slice the shipped starter never saw (its training set holds it out); added unless the
# manifest trains on it (training_set_v2.json does: it has no other whole-chest slice)
EXTRA_SCANS = {"chest_slice_ct1": "ct/cornerstone_testimages/CT1_J2KR"}


def held_out_scans(manifest_path: Path) -> dict[str, Path]:
    manifest = json.loads(manifest_path.read_text())
    cases = {case["name"]: case for case in manifest["cases"]}
    scans = {name: SHARED / cases[name]["image"] for name in manifest["validation"]}
    trained_on = {case.get("image") for name, case in cases.items() if name not in manifest["validation"]}
    scans.update({name: SHARED / path for name, path in EXTRA_SCANS.items() if path not in trained_on})
    return scans


def totalsegmentator_bones() -> dict[str, tuple[Path, list[int]]]:
    manifest = json.loads((STARTER_DIR / "reference_totalsegmentator.json").read_text())
    return {case["name"]: (SHARED / case["label"], [int(v) for v in case["label_values"]])
            for case in manifest["cases"]}


def measure(package, volume, rule, ts_bones, configuration, repeats: int) -> dict:
    from medseg.model.evaluate import dice_per_label
    from medseg.model.infer import segment

    seconds, result = [], None
    for _ in range(repeats):
        started = time.perf_counter()
        result = segment(volume, package, device="cpu", configuration=configuration)
        seconds.append(time.perf_counter() - started)
    labels = result.label_map.array
    dice = dice_per_label(labels, rule, [1, 2, 3])
    record = {
        "configuration": result.configuration,
        "seconds": seconds,
        "dice": {"body": dice[1], "lungs": dice[2], "bones": dice[3]},
        "rule_ml": {name: float((rule == value).sum() * volume.voxel_volume_ml)
                    for value, name in ((1, "body"), (2, "lungs"), (3, "bones"))},
        "false_lung_ml": float(((labels == 2) & (rule != 2)).sum() * volume.voxel_volume_ml),
    }
    if ts_bones is not None:
        reference = ts_bones
        predicted = labels == 3
        record["dice_bones_totalsegmentator"] = float(2 * (predicted & reference).sum()
                                                      / max(predicted.sum() + reference.sum(), 1))
    return record


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", help="also write the figures here")
    parser.add_argument("--model", default="starter", help="model package (default: the built-in starter)")
    parser.add_argument("--manifest", default=str(STARTER_DIR / "training_set.json"),
                        help="the model's training manifest: its validation cases are the held-out scans")
    args = parser.parse_args()
    import torch

    torch.set_num_threads(args.threads)
    from medseg.io import load
    from medseg.io.resample import resample_to
    from medseg.model.rule_labels import rule_label_map
    from medseg.workflows.models import open_model

    package = open_model(args.model).package
    references = totalsegmentator_bones()
    names = [None, *package.configurations]
    print(f"model {package.name!r} ({args.model}): configurations {', '.join(package.configurations)}; "
          f"{args.repeats} run(s) each, {args.threads} threads, CPU (torch)")
    header = (f"{'scan':<18}{'configuration':<18}{'body':>7}{'lungs':>7}{'bones':>7}{'bones/TS':>9}"
              f"{'false lung ml':>14}{'CPU s (median [min-max])':>28}")
    print(header)
    figures: dict[str, dict] = {}
    for scan, path in held_out_scans(Path(args.manifest)).items():
        volume = load(path)
        rule = rule_label_map(volume).array
        ts_bones = None
        if scan in references:
            label_path, values = references[scan]
            ts_bones = np.isin(resample_to(load(label_path), volume, "nearest").array, values)
        figures[scan] = {}
        for name in names:
            record = measure(package, volume, rule, ts_bones, name, args.repeats)
            figures[scan][name or "auto"] = record
            dice = record["dice"]
            cells = "".join("    n/a" if np.isnan(dice[k]) else f"{dice[k]:7.3f}" for k in ("body", "lungs", "bones"))
            ts = record.get("dice_bones_totalsegmentator")
            seconds = record["seconds"]
            spread = (f"{statistics.median(seconds):.1f} [{min(seconds):.1f}-{max(seconds):.1f}]"
                      if len(seconds) > 1 else f"{seconds[0]:.1f}")
            label = f"auto → {record['configuration']}" if name is None else name
            print(f"{scan:<18}{label:<18}{cells}{'' if ts is None else f'{ts:9.3f}':>9}"
                  f"{record['false_lung_ml']:14.1f}{spread:>28}", flush=True)
    print("Dice 'n/a': the label is in neither the rule labels nor the prediction. Targets (issue 13), where "
          "the label exists: body >= 0.97, lungs >= 0.95, bones >= 0.85 (rule), bones >= 0.80 (TotalSegmentator); "
          "no false lung > 5 ml in a scan without lungs.")
    if args.json:
        Path(args.json).write_text(json.dumps(figures, indent=1, default=float))
    return 0


if __name__ == "__main__":
    sys.exit(main())
