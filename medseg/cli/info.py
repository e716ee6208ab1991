"""``medseg info PATH [--json]``: the series (or image file) found at PATH and their geometry findings."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
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


def _image_file_entry(path: str) -> dict[str, Any]:
    from medseg.io.image_files import describe_image

    header = describe_image(path)  # the header only: no voxel is read
    return {
        "key": str(path),
        "series_uid": "",
        "modality": "",
        "series_description": Path(path).name,
        "kind": "image_file",
        "loadable": header["components"] == 1,
        "n_files": 1,
        "n_slices": header["size_xyz"][2],
        "size_xyz": list(header["size_xyz"]),
        "spacing_mm": [round(v, 6) for v in header["spacing_mm"]],
        "origin_mm": [round(v, 6) for v in header["origin_mm"]],
        "direction": [round(float(v), 6) for v in header["direction"].reshape(-1)],
        "transfer_syntaxes": [],
        "dtype": header["dtype"],
        "findings": [{"kind": f.kind, "message": f.message, "details": f.details} for f in header["findings"]],
    }


def collect(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(series entries, skipped files) for the given paths."""
    from medseg.errors import DicomError
    from medseg.io import scan
    from medseg.io.image_files import image_suffix

    if len(paths) == 1 and image_suffix(paths[0]) is not None and Path(paths[0]).exists() \
            and not Path(paths[0]).is_dir():
        return [_image_file_entry(paths[0])], []
    result = scan(paths if len(paths) > 1 else paths[0])
    if not result.series:
        reasons = "; ".join(f"{Path(k.path).name}: {k.reason}" for k in result.skipped[:5])
        raise DicomError("no DICOM image series found" + (f" ({reasons})" if reasons else " (no files)"),
                         path=paths[0] if len(paths) == 1 else None,
                         hint="give a folder with DICOM files, a .zip, a DICOMDIR or a NIfTI/NRRD/MHA file")
    skipped = [{"path": k.path, "reason": k.reason} for k in result.skipped]
    return [s.to_dict() for s in result.series], skipped


def _vector(values: list[float], digits: int = 3) -> str:
    return "[" + ", ".join(f"{v:.{digits}f}".rstrip("0").rstrip(".") if isinstance(v, float) else str(v)
                           for v in values) + "]"


def _print_text(entries: list[dict[str, Any]], skipped: list[dict[str, str]]) -> None:
    import numpy as np

    from medseg.io.dicom_decode import syntax_name

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
