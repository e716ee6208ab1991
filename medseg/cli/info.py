"""``medseg info PATH [--json]``: the series (or image file) found at PATH and their geometry findings."""

from __future__ import annotations

import argparse
import json
from typing import Any

# The I/O stack (pydicom, SimpleITK, numpy) is imported inside the functions that use it:
# registering this command must not cost `medseg --help` a second.


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "info", help="list the DICOM series (or image file) at PATH with their geometry",
        description="List the series found at PATH (a DICOM folder, files, a .zip, a DICOMDIR, or a "
                    "NIfTI/NRRD/MHA file): UID, modality, description, files, size, spacing, origin, "
                    "direction, transfer syntaxes and geometry findings.")
    parser.add_argument("path", nargs="+", help="folder, file(s), .zip, DICOMDIR or image file")
    parser.add_argument("--json", action="store_true", help="print one JSON document (a list of series)")
    parser.set_defaults(func=run)


def collect(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(series entries, skipped files) for the given paths."""
    from medseg.workflows.study_info import describe_sources

    return describe_sources(paths)


def _vector(values: list[float], digits: int = 3) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)
                           for v in values) + "]"


def _print_text(entries: list[dict[str, Any]], skipped: list[dict[str, str]]) -> None:
    import numpy as np

    from medseg.workflows.study_info import transfer_syntax_name as syntax_name

    for number, entry in enumerate(entries, 1):
        status = "loadable" if entry["loadable"] else "not loadable"
        print(f"Series {number} of {len(entries)}: {entry['series_description'] or '(no description)'}"
              f" [{entry['kind']}, {status}]")
        print(f"  key:               {entry['key']}")
        print(f"  series UID:        {entry['series_uid'] or '(blank)'}")
        print(f"  modality:          {entry['modality'] or '-'}")
        print(f"  files:             {entry['n_files']} ({entry['n_slices']} images)")
        print(f"  size [x, y, z]:    {entry['size_xyz']}")
        print(f"  spacing_mm:        {_vector(entry['spacing_mm'], 4)}")
        print(f"  origin_mm:         {_vector(entry['origin_mm'], 3)}")
        direction = np.asarray(entry["direction"]).reshape(3, 3)
        print(f"  direction:         {_vector(list(direction.reshape(-1)), 4)}")
        if entry["transfer_syntaxes"]:
            print(f"  transfer syntaxes: {', '.join(syntax_name(t) for t in entry['transfer_syntaxes'])}")
        for finding in entry["findings"]:
            print(f"  finding [{finding['kind']}]: {finding['message']}")
    if skipped:
        print(f"Skipped {len(skipped)} file(s):")
        for item in skipped[:20]:
            print(f"  {item['path']}: {item['reason']}")
        if len(skipped) > 20:
            print(f"  ... and {len(skipped) - 20} more")


def run(args: argparse.Namespace) -> int:
    import sys

    entries, skipped = collect(args.path)
    if args.json:
        print(json.dumps(entries, indent=2))
        for item in skipped:  # the JSON document is a list of series: the files left out go to stderr
            print(f"medseg: skipped {item['path']}: {item['reason']}", file=sys.stderr)
    else:
        _print_text(entries, skipped)
    return 0
