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
    from medseg.workflows.devices import device_report

    document, lines = device_report()
    if args.json:
        print(json.dumps(document, indent=1))
    else:
        print("\n".join(lines))
    return 0
