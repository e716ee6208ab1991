"""``medseg evaluate MODEL DATASET [--json]``: per-case, per-label Dice and volume difference."""

from __future__ import annotations

import argparse
import math

from medseg.cli._console import add_threads_option, device_name


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "evaluate", help="score a model on a labelled dataset (Dice, volume difference)",
        description="Segment every case of DATASET with MODEL and compare with its label maps: per case and "
                    "per label, Dice and the volume difference in ml and %. Labels are matched by name.")
    parser.add_argument("model", help="an installed catalogue model, a medseg model package (folder or .zip), an "
                                      "nnU-Net v2 result folder, or 'starter' (the built-in model)")
    parser.add_argument("dataset", help="nnU-Net raw folder, images/labels folder, editor cases, or a dataset .json")
    parser.add_argument("--data-root", help="root for relative paths in a dataset .json")
    parser.add_argument("--held-out", action="store_true", help="only the dataset's validation (held-out) cases")
    parser.add_argument("--device", default="auto", type=device_name,
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
    from medseg.workflows.evaluate import EvaluateRequest, evaluate, record_evaluation
    from medseg.workflows.segment import SegmentSettings

    settings = SegmentSettings(device=args.device, configuration=args.configuration)
    # the device is checked first (an absent one fails before the model and the cases are read), by the use case
    evaluation = evaluate(EvaluateRequest(args.model, args.dataset, args.data_root, held_out=args.held_out,
                                          settings=settings), progress=events.progress() if args.json else None)
    model = evaluation.opened
    assert model is not None, "evaluate() gives the model it opened (only a hand-made Evaluation lacks it)"
    scores, means = evaluation.cases, evaluation.mean_dice
    if args.record:
        record_evaluation(model, evaluation, held_out=args.held_out, configuration=args.configuration,
                          command="medseg " + " ".join(args.argv))
    if args.json:
        for score in scores:
            events.emit("case", **score.to_dict())
        events.emit("done", model=model.name, dataset=evaluation.dataset, cases=[s.to_dict() for s in scores],
                    mean_dice=means, configuration=args.configuration)
        return 0
    chosen = f", configuration {args.configuration!r}" if args.configuration else ""
    print(f"model {model.name!r}{chosen} on dataset {evaluation.dataset!r} ({len(scores)} case(s))")
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
