"""``medseg segment``'s options for TotalSegmentator models, and ``--split``'s output.

The run itself is the workflows' segment use case (``Segmenter``), as for every model: these are
only the flags TotalSegmentator users know (``--fast``, ``--fastest``, ``--structures`` = its
``--roi_subset``) turned into settings, and ``--split``, which writes OUT as a folder with one
``<structure>.nii.gz`` per structure of the run (empty ones too), as TotalSegmentator names its files.
"""

from __future__ import annotations

import argparse
from pathlib import Path

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


def is_totalseg_reference(reference: str | None) -> bool:
    """``--model`` names a converted TotalSegmentator model (a catalogue id is the folder it is installed in)."""
    if not reference:
        return False
    from medseg.workflows.models import is_totalseg_folder, model_path

    return is_totalseg_folder(model_path(reference))


def refuse_options_for_other_models(args: argparse.Namespace) -> None:
    used = [f"--{name}" for name in ("fast", "fastest", "structures", "split") if getattr(args, name, None)]
    if used:
        raise ModelError(f"{', '.join(used)} apply to TotalSegmentator models only",
                         hint="--model totalsegmentator/total (or the folder of a converted TotalSegmentator model)")


def configuration(args: argparse.Namespace) -> str | None:
    """--fast / --fastest as the configuration they name, else --configuration."""
    flagged = [FLAG_CONFIGURATIONS[flag] for flag in FLAG_CONFIGURATIONS if getattr(args, flag, False)]
    if flagged and getattr(args, "configuration", None) and args.configuration != flagged[0]:
        raise ModelError(f"--configuration {args.configuration} contradicts --{'fast' if flagged[0] == '3mm' else 'fastest'}")
    return flagged[0] if flagged else getattr(args, "configuration", None)


def structures(args: argparse.Namespace) -> tuple[str, ...] | None:
    text = getattr(args, "structures", None)
    if text is None:
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip())


def plan_split(output: str) -> Path:
    """The --split folder, checked writable before anything runs."""
    from medseg.io.atomic import check_writable

    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise SaveError("with --split, -o names a folder (one <structure>.nii.gz per structure), not a file",
                        path=folder)
    folder.mkdir(parents=True, exist_ok=True)
    check_writable(folder / "probe.nii.gz")
    return folder


def write_split(folder: Path, label_map, image, card, wanted: tuple[str, ...] | None) -> list[str]:
    """One binary mask per structure of the run (all of the model's, or the subset asked for)."""
    from medseg.io.image_files import write_image

    names = {label.name: value for value, label in card.labels.items()}
    chosen = list(wanted) if wanted is not None else [card.labels[v].name for v in sorted(card.labels)]
    for name in chosen:
        mask = (label_map.array == names[name]).astype("uint8")
        write_image(image.with_array(mask, modality="SEG"), folder / f"{name}.nii.gz")
    return [f"{len(chosen)} masks in {folder}"]
