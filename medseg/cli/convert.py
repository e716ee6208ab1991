"""``medseg convert PATH OUT [--series UID]``: any supported input to NIfTI, NRRD or MHA."""

from __future__ import annotations

import argparse

from medseg.cli._console import add_spacing_option, add_threads_option, print_findings, progress_printer


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "convert", help="convert a DICOM series or image file to NIfTI/NRRD/MHA",
        description="Load PATH (DICOM folder, files, .zip, DICOMDIR or image file) and write it to OUT; the "
                    "format follows OUT's suffix (.nii.gz, .nii, .nrrd, .mha).")
    parser.add_argument("path", help="input: DICOM folder, file, .zip, DICOMDIR or NIfTI/NRRD/MHA file")
    parser.add_argument("out", help="output file (.nii.gz, .nii, .nrrd or .mha)")
    parser.add_argument("--series", metavar="UID", help="Series Instance UID or series key (see `medseg info`)")
    parser.add_argument("--raw-stack", action="store_true",
                        help="keep an irregular (tilted, gapped) stack as acquired instead of regularizing it")
    add_spacing_option(parser)
    parser.add_argument("--quiet", action="store_true", help="no progress output")
    parser.add_argument("--force", action="store_true", help="replace OUT if it exists")
    add_threads_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.workflows.studies import ConvertRequest, OpenStudyRequest, convert_study

    study = OpenStudyRequest(args.path, series_uid=args.series, spacing_mm=args.spacing, regularize=not args.raw_stack)
    converted = convert_study(ConvertRequest(study, args.out, force=args.force),
                              progress=None if args.quiet else progress_printer())
    volume, written = converted.volume, converted.written
    print_findings(volume)
    print(f"wrote {written} size {list(volume.size_xyz)} spacing_mm "
          f"{[round(v, 4) for v in volume.spacing_mm]} {volume.array.dtype}")
    return 0
