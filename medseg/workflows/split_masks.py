"""``--split``: a result written as a folder of one binary mask per structure, as TotalSegmentator names its files.

One ``<structure>.nii.gz`` per structure of the run (all of the model's, or the subset asked for;
empty ones too). The folder is checked writable before anything runs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medseg.errors import SaveError


def plan_split(output: str | os.PathLike) -> Path:
    """The --split folder (created), checked writable before anything runs."""
    from medseg.workflows.outputs import check_writable

    folder = Path(output)
    if folder.exists() and not folder.is_dir():
        raise SaveError("with --split, -o names a folder (one <structure>.nii.gz per structure), not a file",
                        path=folder)
    folder.mkdir(parents=True, exist_ok=True)
    check_writable(folder / "probe.nii.gz")
    return folder


def write_split(folder: Path, label_map: Any, image: Any, card: Any, wanted: tuple[str, ...] | None) -> list[str]:
    """One binary mask per structure of the run (all of ``card``'s labels, or the subset ``wanted``)."""
    from medseg.io.image_files import write_image

    names = {label.name: value for value, label in card.labels.items()}
    chosen = list(wanted) if wanted is not None else [card.labels[v].name for v in sorted(card.labels)]
    for name in chosen:
        mask = (label_map.array == names[name]).astype("uint8")
        write_image(image.with_array(mask, modality="SEG"), folder / f"{name}.nii.gz")
    return [f"{len(chosen)} masks in {folder}"]


__all__ = ["plan_split", "write_split"]
