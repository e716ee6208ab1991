"""``medseg devices [--json]``: the compute devices medseg can use here, and the one ``auto`` picks."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "devices", help="list the compute devices (CUDA, DirectML, MPS, CPU) and the one medseg uses",
        description="Check which compute devices this machine offers medseg: CUDA GPUs (name, memory), "
                    "DirectML through ONNX Runtime, Apple MPS, and the CPU (threads, memory); print the "
                    "device --device auto chooses and whether this build can train.")
    parser.add_argument("--json", action="store_true", help="print one JSON document")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.model.devices import probe, report_lines

    report = probe()
    if args.json:
        print(json.dumps(report.to_dict(), indent=1))
    else:
        print("\n".join(report_lines(report)))
    return 0
