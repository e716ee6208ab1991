"""``medseg mesh SEGMENTATION --image SERIES -o OUT_DIR``: one STL/OBJ surface per label, in LPS mm."""

from __future__ import annotations

import argparse
import json
import sys

from medseg.cli._console import add_spacing_option, add_threads_option, findings_json, print_findings
from medseg.workflows.meshes import MESH_FORMATS


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "mesh", help="write one surface mesh (STL/OBJ) per label",
        description="Open a label map or DICOM SEG onto the CT it was drawn on and write one surface per label "
                    "(marching cubes) into OUT_DIR, in physical LPS millimetres (as DICOM and 3D Slicer use).")
    parser.add_argument("segmentation", help="label map file or DICOM SEG (.dcm)")
    parser.add_argument("--image", required=True, help="the CT: DICOM folder, files, .zip or image file")
    parser.add_argument("--series", metavar="UID", help="Series Instance UID or series key (see `medseg info`)")
    parser.add_argument("--raw-stack", action="store_true", help="open an irregular stack as acquired")
    parser.add_argument("-o", "--output", required=True, metavar="OUT_DIR", help="folder for the mesh files")
    parser.add_argument("--format", default=MESH_FORMATS[0].key, choices=[f.key for f in MESH_FORMATS],
                        help=f"mesh format (default: {MESH_FORMATS[0].key})")
    add_spacing_option(parser)
    parser.add_argument("--json", action="store_true", help="print JSON")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.meshes import MeshRequest, mesh_segmentation
    from medseg.workflows.studies import OpenStudyRequest

    study = OpenStudyRequest(args.image, series_uid=args.series, spacing_mm=args.spacing, regularize=not args.raw_stack)
    result = mesh_segmentation(MeshRequest(args.segmentation, study, args.output, args.format))
    image, notes, results = result.opened.volume, result.opened.notes, result.meshes
    if args.json:
        print(json.dumps({"notes": notes, "findings": findings_json(image), "meshes": [
            {"value": r.value, "name": r.name, "path": str(r.path), "vertices": r.n_vertices, "faces": r.n_faces,
             "bbox_min_lps_mm": r.bbox_min_lps, "bbox_max_lps_mm": r.bbox_max_lps} for r in results]}, indent=1))
        return 0
    print_findings(image, sys.stdout)
    for note in notes:
        print(f"note: {note}")
    for r in results:
        print(f"{r.value:>5}  {r.name}: {r.n_faces} triangles -> {r.path}")
    return 0
