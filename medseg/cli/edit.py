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
from pathlib import Path

from medseg.cli._console import add_spacing_option, add_threads_option, findings_json, print_findings


class _Append(argparse.Action):
    """Keeps every operation, in command-line order, in ``args.operations``."""

    def __call__(self, parser, namespace, values, option_string=None):
        operations = getattr(namespace, "operations", None) or []
        operations.append((self.dest, tuple(str(v) for v in (values if isinstance(values, list) else [values]))))
        namespace.operations = operations


def register(subparsers: argparse._SubParsersAction) -> None:
    from medseg.edit.operations import CATALOGUE, options  # declarations only: no image-processing import
    from medseg.workflows.edit_operations import register_operations

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
    from medseg.edit.document import SegmentationDocument
    from medseg.edit.label_map import NAME_SETS, LabelMap
    from medseg.edit.operations import CATALOGUE, options
    from medseg.edit.prompt_session import MASK_KINDS
    from medseg.edit.recipe import Operation, run_operations, validate
    from medseg.edit.tools import PaintRules
    from medseg.errors import MedsegError
    from medseg.io import load
    from medseg.io.label_files import sidecar_path
    from medseg.io.segmentations import open_segmentation
    from medseg.workflows.save import plan_save, save_segmentation

    operations = [Operation(name, raw) for name, raw in (args.operations or [])]
    if not operations and not args.labels:
        raise MedsegError("no operations given and no --labels to write: name at least one operation (see medseg "
                          "edit --help), or give a segmentation with --labels to write it as -o says (a label map, "
                          "or a DICOM SEG: .dcm)")
    inputs = [args.image, args.labels, sidecar_path(args.labels) if args.labels else None]
    for operation in operations:  # files an operation reads are inputs too: never the output
        spec = CATALOGUE.get(operation.name)
        for parameter, text in zip(spec.positional if spec else (), operation.raw):
            if parameter.kind.endswith("-file"):
                inputs.append(text)
            if parameter.kind in ("seeds-file", "segmentation-file"):  # read with their label sidecars
                inputs.append(sidecar_path(text))
            if parameter.kind == "prompt-spec" and text.split(":", 1)[0].strip().lower() in MASK_KINDS:
                inputs.append(text.split(":", 1)[1].rsplit(":neg", 1)[0].rsplit(":pos", 1)[0])  # its mask file
    # the output checked once, before anything is read (the save use case every interface uses); an earlier
    # output of medseg edit, unchanged since, is replaced without --force
    target = plan_save(args.output, inputs, force=args.force, option="-o", written_by="medseg edit")
    image = load(args.image, spacing_mm=args.spacing)
    target.check_image(image)
    document = SegmentationDocument()
    document.set_undo_budget(0)  # a batch needs no undo: keep only the newest step
    document.set_volume(image, source=str(args.image))
    if args.labels:
        opened = open_segmentation(args.labels, image)
        for note in [*opened.notes, *opened.naming]:
            print(f"note: {note}", file=sys.stderr)
        by_totalsegmentator = args.totalsegmentator_names and opened.name_set_applies
        described = None
        if by_totalsegmentator:
            from medseg.catalogue import load_catalogue

            described = load_catalogue().get("totalsegmentator/total").labels()
        label_map = LabelMap.from_volume(opened.label_map, None if by_totalsegmentator else opened.labels,
                                         NAME_SETS[1] if by_totalsegmentator else NAME_SETS[0], described)
        document.set_label_map(label_map)
    else:
        document.new_label_map()
    settings = {p.name: getattr(args, p.name) for p in options().values() if getattr(args, p.name) is not None}

    def load_seeds(path: str):
        return _load_seeds(Path(path), image, args.background_seed)

    def load_segmentation(path: str):
        from medseg.edit.merge import Segmentation

        opened = open_segmentation(path, image)
        for note in [*opened.notes, *opened.naming]:
            print(f"note: {note}", file=sys.stderr)
        return Segmentation(opened.label_map, opened.labels)

    def load_model(reference: str):
        from medseg.workflows.models import open_model

        return open_model(reference)

    rules = PaintRules(hu_range=tuple(sorted(args.hu_mask)) if args.hu_mask else None,
                       overwrite="background" if args.only_background else "unlocked")
    validate(operations, document.label_map, image, load_seeds, settings, load_segmentation, load_model)
    # what an operation wants read once it is done (a fill that flooded, a model's notes)
    document.notice.connect(lambda text, level: print(f"note: {text}", file=sys.stderr) if level == "warning" else None)

    def say(op: str, count: int) -> None:
        if not args.json:
            print(f"{op}: {count} voxels changed")

    from medseg import threads

    with threads.job("edit") as lease:
        done = run_operations(document, operations, rules, say)
        used = lease.threads
    label_map = document.label_map
    kept = {value: entry for value, entry in label_map.labels.items() if label_map.voxel_count(value) or entry.locked}
    written = save_segmentation(target, label_map.to_volume(), image, kept).path
    volumes = label_map.volumes_ml()
    if args.json:
        print(json.dumps({"output": str(written), "operations": [{"operation": o, "voxels_changed": n} for o, n in done],
                          "findings": findings_json(image), "threads": used,
                          "volumes_ml": {str(v): round(ml, 3) for v, ml in volumes.items()}}, indent=1))
    else:
        print_findings(image)
        print(f"-> {written}")
        for value, ml in volumes.items():
            print(f"  {value:5d} {label_map.labels[value].name if value in label_map.labels else '':<24} {ml:10.2f} ml")
    return 0


def _load_seeds(path: Path, image, background: int | None):
    """A seeds label image on ``image``'s grid (resampled by nearest neighbour), background seeds as BACKGROUND_SEED."""
    import numpy as np

    from medseg.edit.tools.grow_seeds import BACKGROUND_SEED
    from medseg.errors import MedsegError
    from medseg.io import load, resample_to

    if not path.exists():
        raise MedsegError("the seeds file does not exist", path=path)
    seeds = load(path)
    if not seeds.same_grid(image):
        seeds = resample_to(seeds, image, interpolation="nearest")
    array = np.asarray(seeds.array)
    if array.dtype.kind == "f" and not np.array_equal(array, np.rint(array)):
        raise MedsegError("a seeds file must hold whole label values", path=path)
    if array.size and (array.min() < 0 or array.max() >= BACKGROUND_SEED):
        raise MedsegError(f"seed values must lie in 0…{BACKGROUND_SEED - 1}", path=path)
    array = array.astype(np.uint16)
    if background is None:  # the label its sidecar names "background" (read by the one sidecar reader)
        from medseg.io.label_files import read_sidecar

        found = read_sidecar(path)
        named = [label.value for label in (found[0] if found else []) if label.name.strip().lower() == "background"]
        background = named[0] if named else None
    if background is not None:
        if not (array == background).any():
            raise MedsegError(f"the seeds hold no voxel of the background value {background}", path=path)
        array[array == background] = BACKGROUND_SEED
    return array
