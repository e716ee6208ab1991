"""``medseg segment PATH --model M -o OUT``: segment a CT series or image file and save the segmentation.

``OUT`` may be a DICOM SEG (``.dcm``, referencing the source series) or a label map
(``.nii.gz``, ``.nii``, ``.nrrd``, ``.mha``, with a ``.labels.json`` sidecar of names).
The output folder is checked before the model runs.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from medseg.cli import _model_options as model_options
from medseg.cli._console import (
    add_spacing_option,
    add_threads_option,
    device_name,
    findings_json,
    number,
    print_findings,
    progress_printer,
    whole_number,
)
from medseg.errors import ModelError

MANY_STRUCTURES = 20  # above this, the printed volumes list only the structures found


def add_inference_options(parser: argparse.ArgumentParser) -> None:
    """How the model runs: the options ``segment`` and ``batch`` share."""
    parser.add_argument("--device", default="auto", type=device_name,
                        help="compute device: auto (the best here, the default) or one `medseg devices` lists")
    parser.add_argument("--configuration", help="model configuration to use (default: chosen by the series' spacing)")
    parser.add_argument("--step", type=number(0.1, 1.0), default=0.5,
                        help="tile step as a fraction of the patch, 0.1 to 1 (default 0.5)")
    parser.add_argument("--mirror", action="store_true", help="mirroring test-time augmentation (slower)")
    parser.add_argument("--no-postprocess", action="store_true",
                        help="skip the model's own post-processing steps (model.json 'postprocessing')")
    parser.add_argument("--raw-stack", action="store_true",
                        help="keep an irregular (tilted, gapped) stack as acquired instead of regularizing it")
    parser.add_argument("--precision", choices=("f32", "int8", "bf16"), default="f32",
                        help="f32: the exact path (default); int8 or bf16: the faster tier, only where `medseg models "
                             "verify --tier int8|bf16 MODEL` verified it on this computer (an error otherwise); the "
                             "SEG's algorithm version and the sidecar say which ran")


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "segment", help="segment a CT with a model and write the label map",
        description="Load a DICOM series folder or a NIfTI/NRRD/MHA file, segment it with a medseg model "
                    "package or an nnU-Net v2 result folder, write the label map (format by the output's "
                    "extension: .dcm for a DICOM SEG referencing the source series, or .nii.gz, .nii, .nrrd, "
                    ".mha for a label map with a .labels.json sidecar of names) on the input's grid, and print the "
                    "volume of each label in ml. The output folder is checked before the model runs.")
    parser.add_argument("path", help="DICOM folder or image file")
    parser.add_argument("--model", "-m", action="append",
                        help="an installed catalogue model (e.g. totalsegmentator/total; `medseg models list`), a "
                             "medseg package (.medseg/.zip file or folder) or nnU-Net v2 result folder "
                             "(default: the built-in starter model: body, lungs, bones); give it several times to "
                             "run several models (e.g. TotalSegmentator tasks) into one segmentation")
    parser.add_argument("-o", "--output", required=True, help="segmentation to write: .dcm (DICOM SEG) or a label map "
                                                             "(.nii.gz, .nii, .nrrd, .mha)")
    add_inference_options(parser)
    parser.add_argument("--tile-batch", type=whole_number(1), help="tiles per forward pass (default: 1 on CPU, 2 on GPUs)")
    add_threads_option(parser)
    add_spacing_option(parser)
    parser.add_argument("--allow-modality", action="store_true",
                        help="segment a series whose modality (e.g. MR, PET) is not the one the model was trained on "
                             "(the result says so)")
    parser.add_argument("--force", action="store_true",
                        help="replace OUTPUT even when it exists and is not a segmentation medseg wrote")
    parser.add_argument("--profile", metavar="DIR",
                        help="write a torch.profiler trace (open the .pt.trace.json in Perfetto, or DIR in "
                             "TensorBoard) and phases.txt/.json to DIR, and print where the time went (load, "
                             "preprocess, network, stitching, export, write)")
    parser.add_argument("--json", action="store_true",
                        help="print the event stream, one JSON object per line: progress ..., then done (with the "
                             "result: output, device, fallbacks, volumes_ml) or failed")
    model_options.add_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from medseg.cli._events import EventStream

    events = EventStream(bool(args.json))
    with events.failures():
        return _segment(args, events)


def settings_of(args: argparse.Namespace, allow_modality: bool = False, model: Any = None) -> "Any":
    """The SegmentSettings that ``segment`` and ``batch``'s inference options say (``model``: the opened model,
    whose pipeline names the configurations a publisher's speed flags mean)."""
    from medseg.workflows.segment import SegmentSettings

    return SegmentSettings(device=args.device, configuration=model_options.configuration(args, model), step=args.step,
                           mirror=args.mirror, tile_batch=getattr(args, "tile_batch", None),
                           postprocess=not args.no_postprocess, allow_modality=allow_modality,
                           structures=model_options.structures(args), precision=getattr(args, "precision", "f32"))


def _segment(args: argparse.Namespace, events) -> int:
    from medseg.workflows.models import open_model
    from medseg.workflows.save import plan_save
    from medseg.workflows.split_masks import plan_split, write_split

    references = list(args.model or [None])
    if len(references) > 1:
        return _segment_several(args, events, references)
    args.model = references[0]

    # Options only some models take: the model is read first (in a moment) and refuses what it does not take,
    # and its unknown structures fail, before the series is read; otherwise the series comes first.
    early = open_model(args.model) if model_options.used_model_options(args) else None
    if early is not None:
        model_options.check_options(args, early)
    # A bad -o must fail now (before torch is even imported), not after the whole segmentation.
    split = plan_split(args.output) if getattr(args, "split", False) else None
    target = None if split is not None else plan_save(args.output, [args.path], force=args.force, option="-o")

    from medseg.workflows.devices import check_device, phase, profiled_run
    from medseg.workflows.save import save_segmentation
    from medseg.workflows.segment import Segmenter
    from medseg.workflows.studies import OpenStudyRequest, header_geometry, open_study

    device = check_device(args.device)  # an absent device fails before the series is read
    with profiled_run(args.profile, device, "medseg segment: where the time went") as profiling:
        with phase("load"):
            segmenter = Segmenter(early, settings_of(args, args.allow_modality, early)) if early is not None else None
            request = OpenStudyRequest(args.path, spacing_mm=args.spacing, regularize=not args.raw_stack)
            geometry = header_geometry(request)
            if geometry is not None:  # an image file too big to segment here: said before it is read
                if target is not None:
                    target.check_image(geometry)  # e.g. a DICOM SEG of an image file: before the model is read
                segmenter = segmenter or Segmenter(args.model, settings_of(args, args.allow_modality))
                segmenter.check_fits(request)
            volume = open_study(request).volume
            if target is not None:
                target.check_image(volume)  # e.g. a DICOM SEG of an image file: refused before the model is read
            segmenter = segmenter or Segmenter(args.model, settings_of(args, args.allow_modality))
        progress = events.progress() if args.json else progress_printer()
        prepared = segmenter.prepare(volume)
        summary = segmenter.prepared_summary(prepared)
        if summary is not None and not args.json:
            print(summary, file=sys.stderr)  # before a long run
        result = segmenter.run(prepared, progress=progress)
        with phase("write"):
            if split is not None:
                saved_notes = write_split(split, result.label_map, volume, result.model,
                                          segmenter.settings.structures)
            else:
                assert target is not None, "planned above whenever the output is not split"
                saved_notes = save_segmentation(target, result.label_map, volume, result.labels).notes
    notes = [*result.notes, *saved_notes]
    if profiling is not None:
        if args.json:
            events.emit("profile", folder=str(args.profile), trace=[str(p) for p in profiling.trace_files()],
                        **profiling.profile.to_dict(profiling.order))
        else:
            print(profiling.table(), file=sys.stderr)
            traces = profiling.trace_files()
            print(f"trace: {traces[-1] if traces else args.profile} (Perfetto: ui.perfetto.dev; or tensorboard "
                  f"--logdir {args.profile})", file=sys.stderr)
    written = args.output
    if args.json:
        for note in result.fallbacks:
            events.emit("fallback", text=note)
        for note in notes:
            events.emit("message", text=note)
        events.emit("done", **{
            "input": str(args.path),
            "output": str(written),
            "model": result.model.name,
            "model_card": result.model.to_dict(),
            "configuration": result.configuration,
            "device": result.device,
            "threads": result.threads,  # the CPU threads the run computed with (medseg.threads)
            "cpu_engine": result.cpu_engine,  # with --device auto on a CPU: the engine measured for this model, and why
            "fallbacks": result.fallbacks,
            "postprocessing": result.postprocessing,
            "notes": notes,
            "findings": findings_json(volume),
            "seconds": round(result.seconds, 3),
            "size_xyz": list(result.label_map.size_xyz),
            "spacing_mm": list(result.label_map.spacing_mm),
            "labels": _label_names(segmenter),
            "volumes_ml": {name: round(ml, 3) for name, ml in result.volumes_ml.items()},
            **result.details,  # the model kind's own facts (a TotalSegmentator task: reason, estimates_s, parts)
        })
        return 0
    print_findings(volume)
    for note in [*result.fallbacks, *notes]:
        print(f"note: {note}", file=sys.stderr)
    print(f"{result.model.name} [{result.configuration}] on {result.device}, {result.threads} CPU thread(s), "
          f"{result.seconds:.1f} s -> {written}")
    if result.cpu_engine is not None:
        print(f"  CPU engine {result.cpu_engine['engine']}: {result.cpu_engine['reason']}")
    if result.details.get("precision", "f32") != "f32":  # a faster tier verified here (medseg.model.precision_tier)
        print(f"  precision: {result.details['precision']}, the tier verified on this computer (not the exact float32)")
    for step in result.postprocessing:
        print(f"  after the network: {step}")
    # a model of many structures (over 20: TotalSegmentator's 117) lists the ones found; a small one all of its own
    many = len(segmenter.card.labels) > MANY_STRUCTURES
    shown = {name: ml for name, ml in result.volumes_ml.items() if ml or not many}
    width = max((len(name) for name in shown), default=5)
    for name, ml in shown.items():
        print(f"  {name:<{width}}  {ml:10.1f} ml")
    return 0


def _segment_several(args: argparse.Namespace, events, references: list) -> int:
    """Several models into one segmentation (medseg.workflows.segment_many): every model is read and every
    option checked before the series is read; an option applies to the models that take it."""
    from medseg.workflows.devices import check_device
    from medseg.workflows.models import open_model
    from medseg.workflows.save import plan_save, save_segmentation
    from medseg.workflows.segment_many import segment_with_models
    from medseg.workflows.studies import OpenStudyRequest, open_study

    if getattr(args, "split", False) or getattr(args, "profile", None):
        raise ModelError("--split and --profile take one model", hint="run the models one at a time for them")
    models = [open_model(reference) for reference in references]
    model_options.check_options_several(args, models)
    target = plan_save(args.output, [args.path], force=args.force, option="-o")
    check_device(args.device)  # an absent device fails before the series is read
    volume = open_study(OpenStudyRequest(args.path, spacing_mm=args.spacing, regularize=not args.raw_stack)).volume
    target.check_image(volume)
    progress = events.progress() if args.json else progress_printer()
    flagged = next((m for m in models if any(getattr(args, f, False) for f in m.pipeline.speed_flags())), models[0])
    combined = segment_with_models(volume, models, settings_of(args, args.allow_modality, flagged),
                                   progress=progress)
    saved_notes = save_segmentation(target, combined.label_map, volume, combined.labels).notes
    notes = [*combined.notes, *(n for study in combined.studies for n in study.notes), *saved_notes]
    fallbacks = [f for study in combined.studies for f in study.fallbacks]
    volumes = combined.volumes_ml
    if args.json:
        for note in fallbacks:
            events.emit("fallback", text=note)
        for note in notes:
            events.emit("message", text=note)
        events.emit("done", input=str(args.path), output=str(args.output),
                    models=[{"model": study.model.name, "configuration": study.configuration, "device": study.device,
                             "seconds": round(study.seconds, 3), **study.details} for study in combined.studies],
                    moves={name: {str(v): t for v, t in moved.items()} for name, moved in combined.moves.items()},
                    labels={str(v): {"name": label.name, "model": label.provenance.algorithm_name}
                            for v, label in combined.labels.items()},
                    volumes_ml={name: round(ml, 3) for name, ml in volumes.items()}, notes=notes,
                    findings=findings_json(volume), seconds=round(combined.seconds, 3))
        return 0
    print_findings(volume)
    for note in [*fallbacks, *notes]:
        print(f"note: {note}", file=sys.stderr)
    for study in combined.studies:
        print(f"{study.model.name} [{study.configuration}] on {study.device}, {study.seconds:.1f} s")
    print(f"{len(combined.studies)} models, {len(combined.labels)} structures found, {combined.seconds:.1f} s "
          f"-> {args.output}")
    width = max((len(label.name) for label in combined.labels.values()), default=5)
    for value, label in combined.labels.items():
        print(f"  {value:>4} {label.name:<{width}}  {volumes.get(label.name, 0.0):10.1f} ml  "
              f"({label.provenance.algorithm_name})")
    return 0


def _label_names(segmenter) -> dict[str, str]:
    return {str(v): label.name for v, label in sorted(segmenter.model.card.labels.items())}
