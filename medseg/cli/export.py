"""``medseg export MODEL [MODEL...] --format onnx|torchscript|package -o OUT``, with the parity check printed.

The export is verified before it is written: ONNX Runtime (or TorchScript) and torch segment
the same CT and must give the same label on >= 99.99 % of voxels. The CT is ``--check-image``
(a real series is best); without it, the built-in synthetic phantom is used, and said so.
"""

from __future__ import annotations

import argparse
import dataclasses

from medseg.cli._console import add_threads_option
from medseg.workflows.model_export import EXPORT_FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "export", help="export a model as ONNX, TorchScript or a medseg package (verified)",
        description="Export MODEL for another runtime and verify it: the exported model and torch segment "
                    "the same CT, and at least 99.99 % of voxels must get the same label.")
    parser.add_argument("model", nargs="+",
                        help="medseg model package (folder or .zip), nnU-Net v2 result folder or 'starter'; with "
                             "--format package, several models of the same labels are combined into one model "
                             "holding all their configurations")
    parser.add_argument("--format", required=True, choices=EXPORT_FORMATS)
    parser.add_argument("-o", "--output", required=True, help="output file (.onnx/.pt) or package folder/.zip")
    parser.add_argument("--configuration", help="which configuration (default: the first; 'package' exports all)")
    parser.add_argument("--check-image", help="CT (file or DICOM folder) for the parity check "
                                              "(default: the synthetic demo phantom)")
    parser.add_argument("--no-check", action="store_true", help="skip the parity check")
    parser.add_argument("--json", action="store_true",
                        help="print the event stream, one JSON object per line: parity (per check), then done "
                             "(path, format) or failed")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.cli._events import EventStream

    events = EventStream(bool(getattr(args, "json", False)))
    with events.failures():
        return _export(args, events)


def _export(args: argparse.Namespace, events) -> int:
    from medseg.workflows.model_export import ExportRequest, export_models

    result = export_models(ExportRequest(args.model, args.format, args.output, args.configuration,
                                         check=not args.no_check, check_image=args.check_image)).result
    if events.enabled:
        for report in result.parity:
            events.emit("parity", text=str(report), agreement=report.agreement, passed=report.passed,
                        **dataclasses.asdict(report))
        events.emit("done", path=str(result.path), format=result.format, parity=[str(r) for r in result.parity],
                    checked=not args.no_check)
        return 0
    for report in result.parity:
        print(report)
    if args.no_check:
        print("parity check skipped (--no-check)")
    print(f"wrote {result.format} export to {result.path}")
    return 0
