"""``medseg export MODEL [MODEL...] --format onnx|torchscript|package -o OUT``, with the parity check printed.

The export is verified before it is written: ONNX Runtime (or TorchScript) and torch segment
the same CT and must give the same label on >= 99.99 % of voxels. The CT is ``--check-image``
(a real series is best); without it, the built-in synthetic phantom is used, and said so.
"""

from __future__ import annotations

import argparse
import dataclasses

from medseg.cli._console import add_threads_option
from medseg.model.export_formats import EXPORT_FORMATS, export_format, export_model


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
    from medseg.errors import MedsegError
    from medseg.workflows.models import open_model

    if not args.output.strip():  # Path("") is the working folder: the write failed as "Device or resource busy"
        raise MedsegError("no output given (-o is empty)",
                          hint="name the file (.onnx/.pt) or the package folder/.zip to write")
    if len(args.model) > 1 and export_format(args.format).one_model:
        combined = " or ".join(f"--format {f}" for f in EXPORT_FORMATS if not export_format(f).one_model)
        raise MedsegError(f"--format {args.format} exports one model; several are combined only with {combined}")
    packages = [open_model(reference).package for reference in args.model]
    if len(packages) > 1:
        from medseg.model.package_model import combine_packages

        package = combine_packages(packages)
    else:
        package = packages[0]
    volume, name = None, ""
    if not args.no_check:
        if args.check_image:
            from medseg.io import load

            volume, name = load(args.check_image), args.check_image
        else:
            from medseg.io.phantom import phantom_volume

            volume, name = phantom_volume(shape=(48, 160, 160), spacing=(2.0, 2.0, 4.0)), "the synthetic demo phantom"
    result = export_model(package, args.format, args.output, volume, name, args.configuration)
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
