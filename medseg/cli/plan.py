"""``medseg plan PATH [--json]``: the U-Net plan (nnU-Net v2 rules) for a series' spacing and shape."""

from __future__ import annotations

import argparse
import json

from medseg.cli._console import number, whole_number
from medseg.workflows.planning import NNUNET_REFERENCE_GB


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "plan", help="show the U-Net plan for a series (stages, strides, kernels, patch)",
        description="Plan a U-Net for the series at PATH (or for --spacing/--shape) with nnU-Net v2's rules: "
                    "target spacing, patch size, per-stage strides and kernels, batch size. With --model, "
                    "also show which configuration of that model the series would use.")
    parser.add_argument("path", nargs="?", help="DICOM folder/file, .zip or NIfTI/NRRD/MHA image")
    parser.add_argument("--spacing", nargs=3, type=number(0.05, 50), metavar=("Z", "Y", "X"),
                        help="voxel spacing in mm (0.05 to 50)")
    parser.add_argument("--shape", nargs=3, type=whole_number(1), metavar=("Z", "Y", "X"), help="image size in voxels")
    parser.add_argument("--gpu-memory-gb", type=number(above=0, high=4096), default=NNUNET_REFERENCE_GB,
                        help="memory budget the patch is sized for (default: 8, as nnU-Net)")
    parser.add_argument("--model", help="an installed catalogue model, a medseg model package, an nnU-Net result "
                                        "folder or 'starter': report "
                                        "the configuration it would select for the series, why, and its strides")
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.planning import PlanRequest, plan_series

    planned = plan_series(PlanRequest(args.path, tuple(args.spacing) if args.spacing else None,
                                      tuple(args.shape) if args.shape else None, args.gpu_memory_gb, args.model))
    spacing, shape, configurations, selected = planned.spacing_zyx, planned.shape_zyx, planned.configurations, \
        planned.selected
    model_choice, package = planned.model_choice, planned.package

    if args.json:
        document = {
            "spacing_zyx": list(spacing),
            "shape_zyx": list(shape),
            "gpu_memory_gb": args.gpu_memory_gb,
            "selected": selected.name,
            "configurations": {name: plan.to_dict() for name, plan in configurations.items()},
        }
        if model_choice:
            document["model_selection"] = model_choice
        print(json.dumps(document, indent=1))
        return 0
    print(f"series: spacing (z, y, x) {' x '.join(f'{s:.3g}' for s in spacing)} mm, "
          f"shape {' x '.join(str(n) for n in shape)} voxels")
    for plan in configurations.values():
        print(plan)
    print(f"selected for this spacing: {selected.name}")
    if model_choice:
        print(f"\nmodel {model_choice['model']!r} would use its configuration {model_choice['configuration']!r}:")
        print(f"  why: {model_choice['reason']}")
        for row in model_choice["candidates"]:
            target = " x ".join(f"{s:.3g}" for s in row["target_spacing_zyx"])
            print(f"  {row['configuration']:<12} target {target} mm, "
                  f"{'suits' if row['suits_series'] else 'not made for'} this kind of series, "
                  f"log-distance {row['log_distance']:.2f}")
        print(package.configurations[model_choice["configuration"]])
        for step in model_choice["postprocessing"]:
            print(f"  then: {step}")
        engine = model_choice["cpu_engine"]
        print(f"on a CPU with --device auto: {engine['engine']} ({engine['reason']}), "
              f"{engine['threads']} thread(s)")
        print(model_choice["precision"])
    return 0
