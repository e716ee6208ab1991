"""A whole segmentation (a model's result, or a label map from a file) merged into the document's label map,
as one change: the ``merge-segmentation`` operation of the catalogue, and the step a Segment ends with.

Two ways to meet the labels already there: REPLACE (every unlocked voxel takes the incoming segmentation, and
the labels it replaces leave the table) and ADD (only the incoming labels whose names are not in the table
yet, and only where there is no label now: nothing on screen changes). Locked labels are never overwritten
and never grow.

The incoming values are kept (a model's result has the model's numbers: spleen is 1 in the window as in
``medseg segment``'s file and TotalSegmentator's, which scripts rely on). A value moves only where it must to
keep a user's label: a value a locked label holds (REPLACE), or any label here (ADD). A moved label records
the model's value (:attr:`Label.model_value`, written to the sidecar) and the change says which moved.
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


def _left(target: LabelMap, delta: Delta | None, value: int) -> int:
    """Voxels of ``value`` after ``delta`` (a model's value with no entry of its own may still hold some)."""
    count = target.voxel_count(value)
    if delta is None:
        return count
    removed, added = delta.histograms()
    return count - (int(removed[value]) if value < removed.size else 0) + (int(added[value]) if value < added.size else 0)


def moved_text(moved: list[tuple[str, int, int]]) -> str:
    """What a merge says about values that moved: ``moved`` holds (name, the model's value, the value here)."""
    shown = [f"{name} {old} \u2192 {new}" for name, old, new in sorted(moved, key=lambda m: m[1])[:8]]
    more = f" and {len(moved) - 8} more" if len(moved) > 8 else ""
    return (f"{len(moved)} of the incoming label values moved to keep your labels: {', '.join(shown)}{more} "
            "(each moved label records its model value in the saved .labels.json)")


def moved_in_step(step_labels: Mapping[int, tuple[Label | None, Label | None]]) -> list[tuple[str, int, int]]:
    """The labels a merge step moved off their model value: (name, model value, value here)."""
    return [(after.name, after.model_value, value) for value, (before, after) in step_labels.items()
            if after is not None and after.model_value is not None
            and (before is None or before.model_value != after.model_value)]


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
    here = {entry.name.strip().lower() for entry in target.labels.values()}
    if mode == ADD:  # only the labels not here yet arrive; every value here stays its label's
        labels = {v: e for v, e in labels.items() if e.name.strip().lower() not in here}
        kept = set(target.labels) | {int(v) for v in np.flatnonzero(target.counts) if v}
    else:  # only locked labels stay
        kept = set(target.locked_values())
    remap: dict[int, int] = {}
    taken = kept | set(labels)
    for value, entry in sorted(labels.items()):
        mine = target.labels.get(value)
        if value in kept and not (mode == REPLACE and mine is not None and _same_name(mine, entry)):
            free = max(taken) + 1
            taken.add(free)
            remap[value] = free
    if remap:
        lut = np.arange(max(int(proposed.max(initial=0)), max(remap)) + 1, dtype=label_dtype(max(taken)))
        for old, new in remap.items():
            lut[old] = new
        proposed = remap_values(proposed, lut)
    arriving = {remap.get(v, v): replace(entry, value=remap.get(v, v), model_value=v if v in remap else entry.model_value)
                for v, entry in labels.items()}
    current = target.array
    if mode == ADD:
        chosen = np.isin(proposed, list(arriving)) & (current == 0)
        after = np.where(chosen, proposed, current)
    else:
        after = proposed.astype(np.promote_types(current.dtype, proposed.dtype), copy=True)
    locked = target.locked_values()
    if locked:
        keep = np.isin(current, list(locked))
        after[keep] = current[keep]
        after = np.where(np.isin(after, list(locked)) & ~keep, current, after)  # a locked label does not grow
    after = after.astype(np.promote_types(current.dtype, after.dtype), copy=False)
    delta = Delta.from_blocks((0, 0, 0), current, after)
    table: dict[int, Label | None] = {}
    if mode == REPLACE:  # the labels replaced leave the table (undo puts them back)
        table.update({value: None for value, mine in target.labels.items()
                      if not mine.locked and value not in arriving and not _left(target, delta, value)})
    if mode == ADD:  # a label that gets no voxel (there is a label wherever it was found) adds no empty row
        arriving = {value: entry for value, entry in arriving.items() if _left(target, delta, value)}
        remap = {old: new for old, new in remap.items() if new in arriving}
    for value, entry in arriving.items():
        mine = target.labels.get(value)
        if mine is None or (not mine.locked and not _same_name(mine, entry)):
            table[value] = entry
        elif not mine.locked:  # the same structure: the user's name, colour and visibility stay; the voxels are the model's
            table[value] = replace(mine, provenance=entry.provenance)
    cautions = (moved_text([(labels[old].name, old, new) for old, new in remap.items()]),) if remap else ()
    return Change(delta, table, cautions=cautions, block=after[box_slices(delta.box)] if delta is not None else None)


__all__ = ["ADD", "MERGE_MODES", "REPLACE", "SEGMENT_STEP", "Segmentation", "merge_change", "moved_in_step", "moved_text"]
