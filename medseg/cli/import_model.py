"""``medseg import-model NNUNET_FOLDER OUT.medseg``: convert an nnU-Net v2 result folder once, safely."""

from __future__ import annotations

import argparse
import json


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "import-model", help="convert an nnU-Net v2 result folder into a medseg model package",
        description="Read an nnU-Net v2 result folder (dataset.json, plans.json, fold_*/checkpoint_final.pth) "
                    "without unpickling code, and write a medseg package (model.json + weights.safetensors). "
                    "OUT ending in .medseg or .zip gives one file, anything else a folder.")
    parser.add_argument("folder", help="nnU-Net result folder, e.g. .../Dataset001_X/nnUNetTrainer__nnUNetPlans__3d_fullres")
    parser.add_argument("out", help="output package (.medseg / .zip file, or a folder)")
    parser.add_argument("--folds", nargs="+", help="folds to import (default: all fold_* folders)")
    parser.add_argument("--name", help="package name (default: <dataset>__<configuration>)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.model_install import import_nnunet_folder

    folds = [int(f) if f.isdigit() else f for f in args.folds] if args.folds else None
    imported = import_nnunet_folder(args.folder, args.out, folds, args.name)
    package, out = imported.package, imported.path
    if args.json:
        print(json.dumps({
            "output": str(out),
            "name": package.name,
            "labels": {str(k): v for k, v in package.names.items()},
            "configurations": {n: package.num_folds(n) for n in package.configurations},
            "provenance": package.provenance,
        }, indent=1))
    else:
        print(imported.summary)
        print(f"written to {out}")
    return 0
