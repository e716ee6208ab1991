"""``medseg evaluate MODEL DATASET [--json]``: per-case, per-label Dice and volume difference."""

from __future__ import annotations

import argparse
import math

from medseg.cli._console import add_threads_option


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score a model on a labelled dataset (Dice, volume difference)",
        description="Segment every case of DATASET with MODEL and compare with its label maps: per case and "
                    "per label, Dice and the volume difference in ml and %%. Labels are matched by name.")
    parser.add_argument("model", help="medseg model package (folder or .zip)")
    parser.add_argument("dataset", help="nnU-Net raw folder, images/labels folder, editor cases, or a dataset .json")
    parser.add_argument("--data-root", help="root for relative paths in a dataset .json")
    parser.add_argument("--held-out", action="store_true", help="only the dataset's validation (held-out) cases")
    parser.add_argument("--device", default="auto",
                        help="compute device: auto (the best here, the default) or one `medseg devices` lists")
    parser.add_argument("--json", action="store_true",
                        help="print the event stream, one JSON object per line: progress ..., case (per case), "
                             "then done (cases, mean_dice) or failed")
    parser.add_argument("--configuration",
                        help="score this configuration of the model on every case (default: each case's spacing "
                             "chooses, as in the app)")
    parser.add_argument("--record", action="store_true",
                        help="also write the scores into the model's provenance (model.json), for its model card")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.cli._events import EventStream

    events = EventStream(bool(args.json))
    with events.failures():
        return _evaluate(args, events)


def _evaluate(args: argparse.Namespace, events) -> int:
    from medseg.model.datasets import open_dataset
    from medseg.model.evaluate import evaluate_model, mean_dice
    from medseg.model.backends import resolve_device
    from medseg.model.package import load_package

    resolve_device(args.device)  # an absent device fails before the model and the cases are read
    package = load_package(args.model)
    dataset = open_dataset(args.dataset, args.data_root)
    specs = dataset.validation_specs if args.held_out else dataset.specs
    scores = evaluate_model(package, dataset, specs=specs, device=args.device,
                            progress=events.progress() if args.json else None, configuration=args.configuration)
    means = mean_dice(scores)
    if args.record:
        _record(package, args, dataset, scores, means)
    if args.json:
        for score in scores:
            events.emit("case", **score.to_dict())
        events.emit("done", model=package.name, dataset=dataset.name, cases=[s.to_dict() for s in scores],
                    mean_dice=means, configuration=args.configuration)
        return 0
    chosen = f", configuration {args.configuration!r}" if args.configuration else ""
    print(f"model {package.name!r}{chosen} on dataset {dataset.name!r} ({len(scores)} case(s))")
    print(f"  {'case':<24} {'label':<14} {'Dice':>7} {'reference ml':>13} {'predicted ml':>13} {'diff %':>8}")
    for case in scores:
        if case.configuration:
            print(f"  {case.case}: configuration {case.configuration}")
        for label in case.labels:
            dice = "   n/a" if math.isnan(label.dice) else f"{label.dice:7.4f}"
            diff = "n/a" if math.isnan(label.volume_difference_percent) else f"{label.volume_difference_percent:+.1f}"
            print(f"  {case.case:<24} {label.name:<14} {dice:>7} {label.reference_ml:13.1f} "
                  f"{label.predicted_ml:13.1f} {diff:>8}")
    print("  mean Dice: " + ", ".join(f"{k} {v:.4f}" for k, v in means.items() if not math.isnan(v)))
    return 0


def _record(package, args: argparse.Namespace, dataset, scores, means) -> None:
    """Keep the evaluation with the model: provenance["evaluations"], one entry per dataset and scope."""
    from medseg.errors import MedsegError
    from medseg.model.package import save_package

    if package.source_path is None or not package.source_path.is_dir():
        raise MedsegError("--record needs a model package folder (a .zip package is not rewritten)",
                          hint="unzip it, or run without --record")
    entry = {
        "dataset": dataset.name, "held_out_only": bool(args.held_out), "configuration": args.configuration,
        "command": "medseg " + " ".join(args.argv),
        "mean_dice": {k: (None if math.isnan(v) else round(v, 4)) for k, v in means.items()},
        "configuration_per_case": {case.case: case.configuration for case in scores},
        "cases": {case.case: {label.name: {"dice": None if math.isnan(label.dice) else round(label.dice, 4),
                                           "reference_ml": round(label.reference_ml, 1),
                                           "predicted_ml": round(label.predicted_ml, 1)}
                              for label in case.labels}
                  for case in scores},
    }
    evaluations = [e for e in package.provenance.get("evaluations", [])
                   if (e.get("dataset"), e.get("held_out_only"), e.get("configuration"))
                   != (entry["dataset"], entry["held_out_only"], entry["configuration"])]
    package.provenance["evaluations"] = [*evaluations, entry]
    save_package(package, package.source_path)
