"""``medseg segment``'s options that only some models take (``--split``'s output: medseg.workflows.split_masks).

The run itself is the workflows' segment use case (``Segmenter``), as for every model: these are
only the flags a publisher's users know (TotalSegmentator's ``--fast``, ``--fastest``, ``--structures``
= its ``--roi_subset``) turned into settings — the model's pipeline says which it takes — and
``--split``, which writes OUT as a folder with one ``<structure>.nii.gz`` per structure of the run
(empty ones too), as TotalSegmentator names its files.
"""

from __future__ import annotations

import argparse

from medseg.errors import ModelError


def add_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("TotalSegmentator models")
    speed = group.add_mutually_exclusive_group()
    speed.add_argument("--fast", action="store_true", help="TotalSegmentator's 3 mm model (its --fast)")
    speed.add_argument("--fastest", action="store_true", help="TotalSegmentator's 6 mm model (its --fastest)")
    group.add_argument("--structures", help="only these structures, comma-separated TotalSegmentator names "
                                            "(its --roi_subset: the run is cropped around them)")
    group.add_argument("--split", action="store_true",
                       help="OUT is a folder of one <structure>.nii.gz per structure, as TotalSegmentator writes them")


def used_model_options(args: argparse.Namespace) -> list[str]:
    """The options that only some models take (a publisher's speed flags, a structure subset, --split)."""
    return [f"--{name}" for name in ("fast", "fastest", "structures", "split") if getattr(args, name, None)]


def check_options(args: argparse.Namespace, model) -> None:
    """Refuse the options ``model`` (an OpenedModel) does not take, naming them: its pipeline says which
    speed flags it has and whether a structure subset crops its runs."""
    flags = model.pipeline.speed_flags()
    refused = [f"--{name}" for name in ("fast", "fastest") if getattr(args, name, False) and name not in flags]
    if not model.capabilities.structure_subset:
        refused += [f"--{name}" for name in ("structures", "split") if getattr(args, name, None)]
    if refused:
        raise ModelError(f"{', '.join(refused)} apply to TotalSegmentator models only, not {model.card.name}",
                         hint="--model totalsegmentator/total (or the folder of a converted TotalSegmentator model)")


def check_options_several(args: argparse.Namespace, models: list) -> None:
    """With several models an option must suit at least one of them (it applies to those it suits)."""
    refused = [f"--{name}" for name in ("fast", "fastest") if getattr(args, name, False)
               and not any(name in model.pipeline.speed_flags() for model in models)]
    if getattr(args, "structures", None) and not any(model.capabilities.structure_subset for model in models):
        refused.append("--structures")
    if refused:
        raise ModelError(f"{', '.join(refused)} apply to none of {', '.join(m.card.name for m in models)}",
                         hint="they apply to TotalSegmentator models (e.g. --model totalsegmentator/total)")


def configuration(args: argparse.Namespace, model=None) -> str | None:
    """--fast / --fastest as the configuration they name for ``model``, else --configuration."""
    flags = model.pipeline.speed_flags() if model is not None else {}
    flagged = [(flag, flags[flag]) for flag in ("fast", "fastest") if getattr(args, flag, False) and flag in flags]
    if flagged and getattr(args, "configuration", None) and args.configuration != flagged[0][1]:
        raise ModelError(f"--configuration {args.configuration} contradicts --{flagged[0][0]}")
    return flagged[0][1] if flagged else getattr(args, "configuration", None)


def structures(args: argparse.Namespace) -> tuple[str, ...] | None:
    text = getattr(args, "structures", None)
    if text is None:
        return None
    return tuple(name.strip() for name in text.split(",") if name.strip())
