"""``medseg plan PATH [--json]``: the U-Net plan (nnU-Net v2 rules) for a series' spacing and shape."""

from __future__ import annotations

import argparse
import json

from medseg.cli._console import number, whole_number
from medseg.errors import MedsegError

NNUNET_REFERENCE_GB = 8.0  # nnU-Net's reference activation counts correspond to an 8 GB GPU


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
    from medseg.model.configuration_choice import select_configuration
    from medseg.model.planner import REFERENCE_VAL_3D, plan_from_fingerprint

    if args.path is None and (args.spacing is None or args.shape is None):
        raise MedsegError("give a PATH to an image/series, or both --spacing Z Y X and --shape Z Y X")
    if args.gpu_memory_gb <= 0:
        raise MedsegError("--gpu-memory-gb must be positive")
    if args.path is not None:
        from medseg.io import load  # imported here: the --spacing form needs no image stack

        volume = load(args.path)
        spacing, shape = tuple(volume.spacing_zyx), tuple(volume.shape_zyx)
    else:
        spacing, shape = tuple(args.spacing), tuple(args.shape)
    reference = REFERENCE_VAL_3D * args.gpu_memory_gb / NNUNET_REFERENCE_GB
    configurations = plan_from_fingerprint([spacing], [shape], reference)
    selected = select_configuration(configurations, spacing)
    model_choice = None
    if args.model:
        from medseg.workflows.models import open_model

        package = open_model(args.model).package
        choice = package.choose(spacing, shape)
        model_choice = {
            "model": package.name, "configuration": choice.chosen.name, "reason": choice.reason,
            "candidates": [{"configuration": name, "suits_series": suits, "target_spacing_zyx":
                            list(package.configurations[name].target_spacing_image_zyx), "log_distance": round(gap, 4)}
                           for name, suits, gap in choice.candidates],
            "plan": choice.chosen.to_dict(),
            "postprocessing": [step.describe(package.names) for step in package.postprocess_steps()],
            "cpu_engine": _cpu_engine(package, choice.chosen.name),
            "precision": _precision_line(package, choice.chosen.name),  # a faster tier verified here, or none
        }

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


def _precision_line(package, configuration: str) -> str:
    from medseg.model.precision_tier import plan_line

    return plan_line(package, configuration)


def _cpu_engine(package, configuration: str) -> dict:
    """The CPU engine a run with --device auto would use (medseg.model.cpu_runtime), and why."""
    from medseg import threads
    from medseg.model.cpu_runtime import planned_choice

    return planned_choice(package, configuration, threads.budget()).to_dict()
