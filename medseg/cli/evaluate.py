"""``medseg evaluate MODEL DATASET [--json]``: per-case, per-label Dice and volume difference."""

from __future__ import annotations

import argparse
import json
import math


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score a model on a labelled dataset (Dice, volume difference)",
        description="Segment every case of DATASET with MODEL and compare with its label maps: per case and "
                    "per label, Dice and the volume difference in ml and %%. Labels are matched by name.")
    parser.add_argument("model", help="medseg model package (folder or .zip)")
    parser.add_argument("dataset", help="nnU-Net raw folder, images/labels folder, editor cases, or a dataset .json")
    parser.add_argument("--data-root", help="root for relative paths in a dataset .json")
    parser.add_argument("--held-out", action="store_true", help="only the dataset's validation (held-out) cases")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, directml, onnx-cpu (default auto)")
    parser.add_argument("--json", action="store_true", help="print JSON for scripts")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.model.datasets import open_dataset
    from medseg.model.evaluate import evaluate_model, mean_dice
    from medseg.model.package import load_package

    package = load_package(args.model)
    dataset = open_dataset(args.dataset, args.data_root)
    specs = dataset.validation_specs if args.held_out else dataset.specs
    scores = evaluate_model(package, dataset, specs=specs, device=args.device)
    means = mean_dice(scores)
    if args.json:
        print(json.dumps({"model": package.name, "dataset": dataset.name, "cases": [s.to_dict() for s in scores],
                          "mean_dice": {k: (None if math.isnan(v) else v) for k, v in means.items()}}, indent=1))
        return 0
    print(f"model {package.name!r} on dataset {dataset.name!r} ({len(scores)} case(s))")
    print(f"  {'case':<24} {'label':<14} {'Dice':>7} {'reference ml':>13} {'predicted ml':>13} {'diff %':>8}")
    for case in scores:
        for label in case.labels:
            dice = "   n/a" if math.isnan(label.dice) else f"{label.dice:7.4f}"
            diff = "n/a" if math.isnan(label.volume_difference_percent) else f"{label.volume_difference_percent:+.1f}"
            print(f"  {case.case:<24} {label.name:<14} {dice:>7} {label.reference_ml:13.1f} "
                  f"{label.predicted_ml:13.1f} {diff:>8}")
    print("  mean Dice: " + ", ".join(f"{k} {v:.4f}" for k, v in means.items() if not math.isnan(v)))
    return 0
