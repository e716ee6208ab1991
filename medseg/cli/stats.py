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
    from medseg.edit.stats import (
        is_stats_csv,
        is_stats_json,
        label_statistics,
        stats_json,
        study_columns,
        write_stats_csv,
        write_stats_json,
    )
    from medseg.errors import SaveError
    from medseg.io import load
    from medseg.io.atomic import check_writable
    from medseg.io.label_files import sidecar_path
    from medseg.io.output_paths import check_output, source_paths
    from medseg.io.segmentations import open_segmentation

    inputs = [args.segmentation, sidecar_path(args.segmentation), args.image]
    outputs = [(args.csv, ".csv", "--csv", is_stats_csv), (args.save_json, ".json", "--save-json", is_stats_json)]
    for out, suffix, option, ours in outputs:
        if out:
            if not str(out).lower().endswith(suffix):
                raise SaveError(f"{option} must name a {suffix} file", path=out, hint=f"e.g. {option} statistics{suffix}")
            check_output(out, inputs, force=args.force, ours=ours, option=option)
            check_writable(out)
    image = load(args.image, series_uid=args.series, regularize=not args.raw_stack, spacing_mm=args.spacing)
    for out, _suffix, option, _ours in outputs:
        if out:
            check_output(out, source_paths(image), force=True, option=option)
    opened = open_segmentation(args.segmentation, image)
    names = {s.value: s.name for s in opened.segments}
    study = study_columns(image, patient_name=args.patient_name)
    if args.definitions == "totalsegmentator":
        return _totalsegmentator(args, image, opened, names, study)
    stats = label_statistics(image, opened.label_map, names)
    if args.csv:
        write_stats_csv(stats, args.csv, study)
    if args.save_json:
        write_stats_json(stats_json(stats, study), args.save_json)
    if args.json:
        print(json.dumps({"segmentation": str(args.segmentation), "image": str(args.image),
                          "notes": [*opened.notes, *opened.naming], "findings": findings_json(image),
                          "definitions": "standard", "labels": [s.as_json() for s in stats]}, indent=1))
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
    for out in (args.csv, args.save_json):
        if out:
            print(f"wrote {out}")
    return 0


def _totalsegmentator(args: argparse.Namespace, image, opened, names: dict[int, str], study: dict[str, str]) -> int:
    """The figures by TotalSegmentator's --statistics definitions (its statistics.json entries)."""
    from medseg.edit.stats import write_stats_json
    from medseg.edit.totalseg_stats import TotalSegOptions, totalseg_csv, totalseg_json, totalseg_statistics
    from medseg.io.atomic import atomic_write_text

    options = TotalSegOptions(args.intensity, not args.keep_border, args.extra)
    figures = totalseg_statistics(image, opened.label_map, names, options)
    document = totalseg_json(figures, options, study)
    if args.csv:
        atomic_write_text(args.csv, totalseg_csv(figures, {n: v for v, n in names.items()}, options, study))
    if args.save_json:
        write_stats_json(document, args.save_json)
    if args.json:
        print(json.dumps({"segmentation": str(args.segmentation), "image": str(args.image),
                          "notes": [*opened.notes, *opened.naming], **document}, indent=1))
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
