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
    parser.add_argument("--save-json", metavar="OUT",
                        help="also write the figures as JSON (a .json file that says which definitions it follows)")
    parser.add_argument("--definitions", choices=("standard", "totalsegmentator"), default="standard",
                        help="standard (default): ml, HU as stored, SD n-1, percentiles; totalsegmentator: "
                             "TotalSegmentator 2.18.0's --statistics (mm³, the CT cast to int16, structures within "
                             "3 voxels of the edge reported as 0), to compare with its statistics.json")
    parser.add_argument("--intensity", choices=("mean", "median"), default="mean",
                        help="with --definitions totalsegmentator: its -sa (default mean)")
    parser.add_argument("--keep-border", action="store_true",
                        help="with --definitions totalsegmentator: its -sii (do not zero structures at the edge)")
    parser.add_argument("--extra", action="store_true",
                        help="with --definitions totalsegmentator: its -sx (voxels, SD, min, max, centroid, box)")
    parser.add_argument("--patient-name", action="store_true",
                        help="also put the patient's name in the CSV (left out by default)")
    parser.add_argument("--force", action="store_true",
                        help="replace the --csv / --save-json file even when it is not one medseg wrote")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.statistics import (
        TOTALSEGMENTATOR,
        StatisticsRequest,
        TotalSegOptions,
        segmentation_statistics,
    )
    from medseg.workflows.studies import OpenStudyRequest

    request = StatisticsRequest(
        args.segmentation, OpenStudyRequest(args.image, series_uid=args.series, spacing_mm=args.spacing,
                                            regularize=not args.raw_stack),
        definitions=args.definitions, options=TotalSegOptions(args.intensity, not args.keep_border, args.extra),
        csv=args.csv, json=args.save_json, patient_name=args.patient_name, force=args.force)
    result = segmentation_statistics(request)
    image, notes, statistics = result.opened.volume, result.opened.notes, result.statistics
    if statistics.definitions == TOTALSEGMENTATOR:
        return _totalsegmentator(args, image, notes, statistics)
    stats = statistics.labels
    if args.json:
        print(json.dumps({"segmentation": str(args.segmentation), "image": str(args.image),
                          "notes": notes, "findings": findings_json(image),
                          "definitions": "standard", "labels": [s.as_json() for s in stats]}, indent=1))
        return 0
    print_findings(image, sys.stdout)
    for note in notes:
        print(f"note: {note}")
    width = max([len(s.name) for s in stats] + [5])
    print(f"{'value':>5}  {'name':<{width}}  {'voxels':>9}  {'ml':>9}  {'HU mean':>8}  {'SD':>7}  {'min':>6}  "
          f"{'max':>6}  {'median':>7}  size mm (x, y, z; whole voxels)")
    for s in stats:
        size = ", ".join(f"{v:.1f}" for v in s.size_mm)
        print(f"{s.value:>5}  {s.name:<{width}}  {s.voxels:>9}  {s.volume_ml:>9.2f}  {s.hu_mean:>8.1f}  "
              f"{s.hu_sd:>7.1f}  {s.hu_min:>6.0f}  {s.hu_max:>6.0f}  {s.hu_median:>7.1f}  ({size})")
    for out in (args.csv, args.save_json):
        if out:
            print(f"wrote {out}")
    return 0


def _totalsegmentator(args: argparse.Namespace, image, notes: list[str], statistics) -> int:
    """The figures by TotalSegmentator's --statistics definitions (its statistics.json entries)."""
    figures, options = statistics.figures, statistics.options
    if args.json:
        print(json.dumps({"segmentation": str(args.segmentation), "image": str(args.image),
                          "notes": notes, **statistics.document()}, indent=1))
        return 0
    print_findings(image, sys.stdout)
    print(f"definitions: {options.describe()}")
    width = max([len(n) for n in figures] + [5])
    print(f"{'name':<{width}}  {'volume mm3':>12}  {'intensity':>10}")
    for name, entry in figures.items():
        print(f"{name:<{width}}  {entry['volume']:>12.1f}  {entry['intensity']:>10.3f}")
    for out in (args.csv, args.save_json):
        if out:
            print(f"wrote {out}")
    return 0
