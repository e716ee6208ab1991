"""A whole segmentation (a model's result, or a label map from a file) merged into the document's label map,
as one change: the ``merge-segmentation`` operation of the catalogue, and the step a Segment ends with.

Two ways to meet the labels already there: REPLACE (every unlocked voxel takes the incoming segmentation)
and ADD (only the incoming labels whose names are not in the table yet, and only where there is no label
now: nothing on screen changes). Locked labels are never overwritten and never grow. An incoming value
already used here for another structure gets a free value instead, and the table records the maker of the
value its label landed on (the model's provenance).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Mapping

import numpy as np

from medseg.core.label_arrays import remap_values
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit.delta import Delta, box_slices
from medseg.edit.label_map import LabelMap
from medseg.edit.operation import Change
from medseg.errors import GeometryError, MedsegError

if TYPE_CHECKING:
    from medseg.edit.document import SegmentationDocument

# The undo description of a model's result starts with this (the GUI adds the model's name).
SEGMENT_STEP = "Segment"
REPLACE, ADD = "replace", "add"
MERGE_MODES = (REPLACE, ADD)


@dataclass(frozen=True)
class Segmentation:
    """A label map on the image grid with its labels (names, colours, provenance): what is merged."""

    label_map: Volume
    labels: Mapping[int, Label]


def _same_name(a: Label, b: Label) -> bool:
    return a.name.strip().lower() == b.name.strip().lower()


def merge_change(document: "SegmentationDocument", incoming: Segmentation, mode: str = REPLACE) -> Change:
    """The change that merges ``incoming`` into the document's label map (see the module's text)."""
    if mode not in MERGE_MODES:
        raise MedsegError(f"unknown way to merge a segmentation: {mode!r} (known: {', '.join(MERGE_MODES)})")
    result, labels = incoming.label_map, incoming.labels
    if document.volume is None or not result.same_grid(document.volume):
        raise GeometryError("the segmentation does not fit the open image (it changed while segmenting)")
    # a preview writes nothing: with no label map yet, the merge is made against an empty one (not created here)
    target = document.label_map if document.label_map is not None else LabelMap.empty_like(document.volume)
    proposed = np.asarray(result.array)
    remap: dict[int, int] = {}
    taken = set(target.labels) | set(labels)
    for value, entry in labels.items():
        mine = target.labels.get(value)
        if mine is not None and not _same_name(mine, entry):
            free = max(taken) + 1
            taken.add(free)
            remap[value] = free
    if remap:
        lut = np.arange(max(int(proposed.max(initial=0)), max(remap)) + 1, dtype=label_dtype(max(taken)))
        for old, new in remap.items():
            lut[old] = new
        proposed = remap_values(proposed, lut)
    arriving = {remap.get(v, v): replace(entry, value=remap.get(v, v)) for v, entry in labels.items()}
    current = target.array
    if mode == ADD:
        here = {entry.name.strip().lower() for entry in target.labels.values()}
        arriving = {v: e for v, e in arriving.items() if e.name.strip().lower() not in here}
        chosen = np.isin(proposed, list(arriving)) & (current == 0)
        after = np.where(chosen, proposed, current)
    else:
        after = proposed.astype(np.promote_types(current.dtype, proposed.dtype), copy=True)
    locked = target.locked_values()
    if locked:
        keep = np.isin(current, list(locked))
        after[keep] = current[keep]
        after = np.where(np.isin(after, list(locked)) & ~keep, current, after)  # a locked label does not grow
    table: dict[int, Label | None] = {}
    for value, entry in arriving.items():
        mine = target.labels.get(value)
        if mine is None:
            table[value] = entry
        elif not mine.locked:  # the user's name, colour and visibility stay; the voxels are the model's
            table[value] = replace(mine, provenance=entry.provenance)
    after = after.astype(np.promote_types(current.dtype, after.dtype), copy=False)
    delta = Delta.from_blocks((0, 0, 0), current, after)
    return Change(delta, table, block=after[box_slices(delta.box)] if delta is not None else None)


__all__ = ["ADD", "MERGE_MODES", "REPLACE", "SEGMENT_STEP", "Segmentation", "merge_change"]
