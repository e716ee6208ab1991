"""``medseg stats SEGMENTATION --image SERIES``: per-label volume, HU and bounding box."""

from __future__ import annotations

import argparse
import json
import sys

from medseg.cli._console import add_spacing_option, add_threads_option, findings_json, print_findings


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "stats", help="per-label statistics of a segmentation over its CT",
        description="Open a label map (.nii.gz, .nii, .nrrd, .mha, names from its .labels.json sidecar) or a "
                    "DICOM SEG onto the CT it was drawn on and print, for every label, the voxel count, volume "
                    "(ml), HU mean/SD/min/max/median and bounding box (LPS mm).")
    parser.add_argument("segmentation", help="label map file or DICOM SEG (.dcm)")
    parser.add_argument("--image", required=True, help="the CT: DICOM folder, files, .zip or image file")
    parser.add_argument("--series", metavar="UID", help="Series Instance UID or series key (see `medseg info`)")
    parser.add_argument("--raw-stack", action="store_true", help="open an irregular stack as acquired")
    add_spacing_option(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--csv", metavar="OUT",
                        help="also write the table as CSV (a .csv file, with the series UID and description)")
    parser.add_argument("--patient-name", action="store_true",
                        help="also put the patient's name in the CSV (left out by default)")
    parser.add_argument("--force", action="store_true",
                        help="replace the --csv file even when it is not a statistics table medseg wrote")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.edit.stats import is_stats_csv, label_statistics, study_columns, write_stats_csv
    from medseg.errors import SaveError
    from medseg.io import load
    from medseg.io.atomic import check_writable
    from medseg.io.label_files import open_segmentation, sidecar_path
    from medseg.io.output_paths import check_output, source_paths

    inputs = [args.segmentation, sidecar_path(args.segmentation), args.image]
    if args.csv:
        if not str(args.csv).lower().endswith(".csv"):
            raise SaveError("--csv must name a .csv file", path=args.csv, hint="e.g. --csv label_statistics.csv")
        check_output(args.csv, inputs, force=args.force, ours=is_stats_csv, option="--csv")
        check_writable(args.csv)
    image = load(args.image, series_uid=args.series, regularize=not args.raw_stack, spacing_mm=args.spacing)
    if args.csv:
        check_output(args.csv, source_paths(image), force=True, option="--csv")
    opened = open_segmentation(args.segmentation, image)
    names = {s.value: s.name for s in opened.segments}
    stats = label_statistics(image, opened.label_map, names)
    if args.csv:
        write_stats_csv(stats, args.csv, study_columns(image, patient_name=args.patient_name))
    if args.json:
        print(json.dumps({"segmentation": str(args.segmentation), "image": str(args.image),
                          "notes": [*opened.notes, *opened.naming], "findings": findings_json(image),
                          "labels": [s.as_json() for s in stats]}, indent=1))
        return 0
    print_findings(image, sys.stdout)
    for note in [*opened.notes, *opened.naming]:
        print(f"note: {note}")
    width = max([len(s.name) for s in stats] + [5])
    print(f"{'value':>5}  {'name':<{width}}  {'voxels':>9}  {'ml':>9}  {'HU mean':>8}  {'SD':>7}  {'min':>6}  "
          f"{'max':>6}  {'median':>7}  size mm (x, y, z; whole voxels)")
    for s in stats:
        size = ", ".join(f"{v:.1f}" for v in s.size_mm)
        print(f"{s.value:>5}  {s.name:<{width}}  {s.voxels:>9}  {s.volume_ml:>9.2f}  {s.hu_mean:>8.1f}  "
              f"{s.hu_sd:>7.1f}  {s.hu_min:>6.0f}  {s.hu_max:>6.0f}  {s.hu_median:>7.1f}  ({size})")
    if args.csv:
        print(f"wrote {args.csv}")
    return 0
