"""``medseg segment CT -o OUT --model <TotalSegmentator model> [--fast|--fastest] [--structures a,b] [--split]``.

The TotalSegmentator branch of ``medseg segment``: TotalSegmentator's pipeline (medseg.model.totalseg)
with its numbers and names. OUT is one multi-label map (its ``--ml``) or a DICOM SEG as for every
model; with ``--split`` OUT is a folder with one ``<structure>.nii.gz`` per structure (every structure
of the run, empty ones too), as TotalSegmentator names its files.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from medseg.cli._console import print_findings, progress_printer
from medseg.errors import ModelError, SaveError

FLAG_CONFIGURATIONS = {"fast": "3mm", "fastest": "6mm"}


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TotalSegmentator models")
    speed = group.add_mutually_exclusive_group()
    speed.add_argument("--fast", action="store_true", help="TotalSegmentator's 3 mm model (its --fast)")
    speed.add_argument("--fastest", action="store_true", help="TotalSegmentator's 6 mm model (its --fastest)")
    group.add_argument("--structures", help="only these structures, comma-separated TotalSegmentator names "
                                            "(its --roi_subset: the run is cropped around them)")
    group.add_argument("--split", action="store_true",
                       help="OUT is a folder of one <structure>.nii.gz per structure, as TotalSegmentator writes them")


def is_totalseg_model_path(path) -> bool:
    from medseg.model.totalseg import is_totalseg_model

    return is_totalseg_model(path)


def refuse_options_for_other_models(args: argparse.Namespace) -> None:
    used = [f"--{name}" for name in ("fast", "fastest", "structures", "split") if getattr(args, name, None)]
    if used:
        raise ModelError(f"{', '.join(used)} apply to TotalSegmentator models only",
                         hint="--model totalsegmentator/total (or the folder of a converted TotalSegmentator model)")


def run(args: argparse.Namespace, events) -> int:
    from medseg.io import load
    from medseg.io.atomic import check_writable
    from medseg.io.image_files import write_image
    from medseg.io.label_files import is_saved_segmentation, save_segmentation, segmentation_format
    from medseg.io.output_paths import check_output, source_paths
    from medseg.model.backends import resolve_device
    from medseg.model.totalseg import choose_configuration, load_totalseg_model, segment_totalseg, structure_values

    output = Path(args.output)
    if args.split:
        if output.exists() and not output.is_dir():
            raise SaveError("with --split, -o names a folder (one <structure>.nii.gz per structure), not a file",
                            path=output)
        output.mkdir(parents=True, exist_ok=True)
        check_writable(output / "probe.nii.gz")
    else:
        segmentation_format(output)
        check_output(output, [args.path], force=args.force, ours=is_saved_segmentation, option="-o")
        check_writable(output)
    model = load_totalseg_model(args.model)
    structures = [s.strip() for s in args.structures.split(",") if s.strip()] if args.structures else None
    structure_values(model, structures)  # an unknown name fails before the series is read
    device = resolve_device(args.device)
    volume = load(args.path, regularize=not args.raw_stack, spacing_mm=args.spacing)
    if not args.split:
        check_output(output, source_paths(volume), force=True, option="-o")
        if segmentation_format(output) == "dicom-seg":
            from medseg.io.dicom_seg import check_can_reference

            check_can_reference(volume, output)
    forced = next((FLAG_CONFIGURATIONS[f] for f in FLAG_CONFIGURATIONS if getattr(args, f)), args.configuration)
    choice = choose_configuration(model, volume, device, forced)
    if not args.json:
        print(f"configuration {choice.summary()}", file=sys.stderr)
    result, run_info = segment_totalseg(volume, model, choice.name, structures, device=device,
                                        progress=events.progress() if args.json else progress_printer())
    labels = [label for value, label in sorted(result.labels.items())]
    if args.split:
        wanted = structure_values(model, structures) or sorted(model.labels)
        written = []
        for value in wanted:
            mask = (result.label_map.array == value).astype("uint8")
            written.append(write_image(volume.with_array(mask, modality="SEG"), output / f"{model.labels[value]}.nii.gz"))
        notes = [f"{len(written)} masks in {output}"]
    else:
        notes = save_segmentation(result.label_map, volume, output, labels)
    notes = [f"configuration {choice.summary()}", *run_info.notes, *notes]
    if args.json:
        for note in result.fallbacks:
            events.emit("fallback", text=note)
        for note in notes:
            events.emit("message", text=note)
        events.emit("done", input=str(args.path), output=str(output), model=model.name, configuration=choice.name,
                    reason=choice.reason, estimates_s={k: round(v, 1) for k, v in choice.estimates_s.items()},
                    device=result.device_used, seconds=round(result.seconds, 3), parts=run_info.parts,
                    labels={str(k): v for k, v in sorted(model.labels.items())},
                    volumes_ml={name: round(ml, 3) for name, ml in result.volumes_ml.items() if ml})
        return 0
    print_findings(volume)
    for note in [*result.fallbacks, *notes[1:]]:
        print(f"note: {note}", file=sys.stderr)
    print(f"{model.name} [{choice.name}] on {result.device_used}, {result.seconds:.1f} s -> {output}")
    present = {name: ml for name, ml in result.volumes_ml.items() if ml}
    width = max((len(name) for name in present), default=5)
    for name, ml in present.items():
        print(f"  {name:<{width}}  {ml:10.1f} ml")
    return 0
