"""``medseg edit IMAGE [--labels LABELMAP] -o OUT [operations…]``: the editing tools in batch.

Operations run in the order given, after all of them were checked (a bad number, an
unknown label or a locked target is named before anything runs). The label map is
written on the image's grid; label names travel in a ``<OUT>.labels.json`` sidecar.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

OPERATION_HELP = {  # kept here so `medseg --help` does not import the editing layer
    "threshold": ("LOW", "HIGH", "LABEL"), "keep-largest": ("LABEL",), "remove-smaller": ("LABEL", "ML"),
    "grow": ("LABEL", "MM"), "shrink": ("LABEL", "MM"), "smooth": ("LABEL", "MM"), "fill-holes": ("LABEL",),
    "interpolate": ("LABEL",), "union": ("A", "B"), "intersect": ("A", "B"), "subtract": ("A", "B"),
    "lock": ("LABEL",),
}
DESCRIPTIONS = {
    "threshold": "paint LABEL where LOW <= HU <= HIGH (locks respected)",
    "keep-largest": "keep only the largest 26-connected island of LABEL",
    "remove-smaller": "remove islands of LABEL smaller than ML millilitres",
    "grow": "add every voxel whose centre lies within MM of LABEL (anisotropy-aware)",
    "shrink": "remove every voxel of LABEL within MM of the outside",
    "smooth": "Gaussian-smooth LABEL with sigma MM",
    "fill-holes": "fill background that LABEL encloses",
    "interpolate": "fill empty axial slices between slices where LABEL is drawn",
    "union": "B's voxels join A", "intersect": "keep A only inside B's region (B, holes filled)",
    "subtract": "remove A inside B's region (B, holes filled)", "lock": "protect LABEL from later operations",
}


class _Append(argparse.Action):
    """Keeps every operation, in command-line order, in ``args.operations``."""

    def __call__(self, parser, namespace, values, option_string=None):
        operations = getattr(namespace, "operations", None) or []
        operations.append((self.dest, tuple(str(v) for v in (values if isinstance(values, list) else [values]))))
        namespace.operations = operations


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "edit", help="apply editing tools to a label map in batch (keep largest, grow, fill holes, ...)",
        description="Apply the editor's tools to a label map in the order given, on the image's grid, and write it. "
                    "LABEL is a value or a name from the label map. Every operation is checked before any runs.")
    parser.add_argument("image", help="the CT: DICOM folder or image file")
    parser.add_argument("--labels", help="label map to start from (default: empty); resampled to the image grid")
    parser.add_argument("-o", "--output", required=True, help="label map to write (.nii.gz, .nii, .nrrd, .mha)")
    parser.add_argument("--only-background", action="store_true",
                        help="painting operations change only background voxels (default: any unlocked label)")
    parser.add_argument("--totalsegmentator-names", action="store_true",
                        help="name the labels by TotalSegmentator v2's class map (so LABEL can be e.g. liver)")
    parser.add_argument("--json", action="store_true", help="print a JSON summary")
    ops = parser.add_argument_group("operations (repeatable, applied in order)")
    for name, metavars in OPERATION_HELP.items():
        ops.add_argument(f"--{name}", dest=name, nargs=len(metavars), metavar=metavars, action=_Append,
                         help=DESCRIPTIONS[name])
    parser.set_defaults(func=run, operations=None)


def sidecar_path(path: Path) -> Path:
    name = path.name
    for suffix in (".nii.gz", ".nii", ".nrrd", ".nhdr", ".mha", ".mhd"):
        if name.lower().endswith(suffix):
            name = name[: -len(suffix)]
            break
    return path.with_name(name + ".labels.json")


def run(args: argparse.Namespace) -> int:
    from medseg.edit.document import ViewerDocument
    from medseg.edit.label_map import LabelEntry, LabelMap
    from medseg.edit.recipe import Operation, run_operations, validate
    from medseg.edit.tools import PaintRules
    from medseg.errors import MedsegError
    from medseg.io import load, resample_to, write_image
    from medseg.io.atomic import atomic_write_text, check_writable

    operations = [Operation(name, raw) for name, raw in (args.operations or [])]
    if not operations:
        raise MedsegError("no operations given (see medseg edit --help)")
    output = Path(args.output)
    check_writable(output)
    image = load(args.image)
    document = ViewerDocument()
    document.set_undo_budget(0)  # a batch needs no undo: keep only the newest step
    document.set_volume(image, source=str(args.image))
    if args.labels:
        labels = load(args.labels)
        if not labels.same_grid(image):
            labels = resample_to(labels, image, interpolation="nearest")
        sidecar = sidecar_path(Path(args.labels))
        table = None
        if sidecar.is_file():
            rows = json.loads(sidecar.read_text())
            table = {int(v): LabelEntry(int(v), r["name"], tuple(r["color"]), True, bool(r.get("locked", False)))
                     for v, r in rows.items()}
        name_set = "TotalSegmentator v2 (total)" if args.totalsegmentator_names and table is None else "From file"
        label_map = LabelMap.from_volume(labels, table, name_set)
        document.set_label_map(label_map)
    else:
        document.new_label_map()
    validate(operations, document.label_map)
    rules = PaintRules(overwrite="background" if args.only_background else "unlocked")

    def say(op: str, count: int) -> None:
        if not args.json:
            print(f"{op}: {count} voxels changed")

    done = run_operations(document, operations, rules, say)
    label_map = document.label_map
    written = write_image(label_map.to_volume(), output)
    table = {str(v): {"name": e.name, "color": list(e.color), "locked": e.locked} for v, e in label_map.labels.items()
             if label_map.voxel_count(v) or e.locked}
    atomic_write_text(sidecar_path(output), json.dumps(table, indent=1))
    volumes = label_map.volumes_ml()
    if args.json:
        print(json.dumps({"output": str(written), "operations": [{"operation": o, "voxels_changed": n} for o, n in done],
                          "volumes_ml": {str(v): round(ml, 3) for v, ml in volumes.items()}}, indent=1))
    else:
        print(f"-> {written}")
        for value, ml in volumes.items():
            print(f"  {value:5d} {label_map.labels[value].name if value in label_map.labels else '':<24} {ml:10.2f} ml")
    return 0
