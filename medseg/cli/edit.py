"""``medseg edit IMAGE [--labels LABELMAP] -o OUT [operations…]``: the editing tools in batch.

Operations run in the order given, after all of them were checked (a bad number, an
unknown label or a locked target is named before anything runs). The label map is
written on the image's grid; its labels travel in a ``<OUT>.labels.json`` sidecar (the one
sidecar format, :mod:`medseg.io.label_files`), or OUT is a DICOM SEG (``.dcm``) referencing the
DICOM series, its segments coded by the labels' codes (TotalSegmentator's with ``--totalsegmentator-names``). ``--labels`` opens a label map (with its
sidecar: names, colours, locks, provenance) or a DICOM SEG the way the app does.
"""

from __future__ import annotations

import argparse
import json
import re
import sys

from medseg.cli._console import add_spacing_option, add_threads_option, findings_json, print_findings


class _Append(argparse.Action):
    """Keeps every operation, in command-line order, in ``args.operations``."""

    def __call__(self, parser, namespace, values, option_string=None):
        operations = getattr(namespace, "operations", None) or []
        operations.append((self.dest, tuple(str(v) for v in (values if isinstance(values, list) else [values]))))
        namespace.operations = operations


def register(subparsers: argparse._SubParsersAction) -> None:
    from medseg.workflows.edit_operations import register_operations
    from medseg.workflows.edit_recipe import CATALOGUE, options  # declarations only: no image-processing import

    register_operations()  # the model-backed operations (declarations too: the model loads when one runs)

    parser = subparsers.add_parser(
        "edit", help="apply editing tools to a label map in batch (keep largest, grow, fill holes, ...)",
        description="Apply the editor's tools to a label map in the order given, on the image's grid, and write it. "
                    "LABEL is a value or a name from the label map. Every operation is checked before any runs.")
    parser.add_argument("image", help="the CT: DICOM folder or image file")
    parser.add_argument("--labels", help="segmentation to start from (default: empty): a label map with its "
                        ".labels.json sidecar, or a DICOM SEG; placed on the image grid in patient coordinates")
    parser.add_argument("-o", "--output", required=True,
                        help="segmentation to write: a label map (.nii.gz, .nii, .nrrd, .mha) with its .labels.json "
                             "sidecar, or a DICOM SEG (.dcm; the image must be a DICOM series) coded by the labels' "
                             "name set (e.g. --totalsegmentator-names)")
    parser.add_argument("--only-background", action="store_true",
                        help="painting operations change only background voxels (default: any unlocked label)")
    parser.add_argument("--totalsegmentator-names", action="store_true",
                        help="name the labels by TotalSegmentator v2's class map (so LABEL can be e.g. liver)")
    parser.add_argument("--force", action="store_true",
                        help="replace OUTPUT even when it exists and is not a label map medseg wrote")
    add_spacing_option(parser)
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    parser.add_argument("--hu-mask", nargs=2, type=float, default=None, metavar=("LOW", "HIGH"),
                        help="painting operations change only voxels with LOW <= HU <= HIGH (the app's 'HU from … "
                             "to'); --fill-by-hu fills within this range")
    grow = parser.add_argument_group("settings of the operations that take them")
    for option, parameter in options().items():
        users = ", ".join(f"--{op.name}" for op in CATALOGUE.values() if parameter in op.parameters)
        if parameter.kind == "flag":
            grow.add_argument(option, dest=parameter.name, action="store_const", const=True, default=None,
                              help=f"{parameter.label} ({users})")
        elif parameter.kind == "text":
            grow.add_argument(option, dest=parameter.name, default=None, metavar=parameter.metavar,
                              help=f"{parameter.label} ({users}; default {parameter.default})")
        else:
            grow.add_argument(option, dest=parameter.name, type=float, default=None, metavar=parameter.metavar,
                              help=f"{parameter.label} ({users}): {parameter.describe()}")
    grow.add_argument("--background-seed", type=int, default=None, metavar="VALUE",
                      help="the seed value that marks background (grows, but paints nothing); default: the seeds' "
                           "label named 'background' in their .labels.json, if any")
    ops = parser.add_argument_group("operations (repeatable, applied in order)")
    for name, op in CATALOGUE.items():  # generated from the one catalogue (names as in the recipe and the app)
        metavars = tuple(p.metavar for p in op.positional)
        ranges = [p.describe(with_default=False) for p in op.positional if p.is_setting and p.minimum is not None]
        in_app = f" [in the app: the {op.title} tool, key {op.shortcut}]" if op.shortcut else ""
        ops.add_argument(f"--{name}", dest=name, nargs=len(metavars), metavar=metavars, action=_Append,
                         help=op.help + (f"; {', '.join(ranges)}" if ranges else "") + in_app)
    # a point X,Y,Z often starts with a minus (LPS): read "-12.5,30,-7" as a value, not an option
    parser._negative_number_matcher = re.compile(r"^-\d+$|^-\d*\.\d+$|^-\d*\.?\d*,[-\d.,;]*$")
    add_threads_option(parser)
    parser.set_defaults(func=run, operations=None)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.edit_recipe import FROM_FILE, TOTALSEGMENTATOR, EditRequest, edit_segmentation, options

    settings = {p.name: getattr(args, p.name) for p in options().values() if getattr(args, p.name) is not None}
    request = EditRequest(args.image, args.output, list(args.operations or []), labels=args.labels,
                          name_set=TOTALSEGMENTATOR if args.totalsegmentator_names else FROM_FILE, settings=settings,
                          hu_range=tuple(args.hu_mask) if args.hu_mask else None,
                          only_background=args.only_background, background_seed=args.background_seed,
                          spacing_mm=args.spacing, force=args.force)

    def say(op: str, count: int) -> None:
        if not args.json:
            print(f"{op}: {count} voxels changed")

    result = edit_segmentation(request, say, note=lambda text: print(f"note: {text}", file=sys.stderr))
    image, written, label_map, volumes = result.image, result.written, result.label_map, result.volumes_ml
    if args.json:
        print(json.dumps({"output": str(written),
                          "operations": [{"operation": o, "voxels_changed": n} for o, n in result.done],
                          "findings": findings_json(image), "threads": result.threads,
                          "volumes_ml": {str(v): round(ml, 3) for v, ml in volumes.items()}}, indent=1))
    else:
        print_findings(image)
        print(f"-> {written}")
        for value, ml in volumes.items():
            print(f"  {value:5d} {label_map.labels[value].name if value in label_map.labels else '':<24} {ml:10.2f} ml")
    return 0
