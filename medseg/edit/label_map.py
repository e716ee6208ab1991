"""The editable label map: one label value per voxel on the image's grid, plus its label table.

A :class:`LabelMap` *is* a :class:`~medseg.core.volume.Volume` (same grid, same geometry, so
every writer that takes a Volume takes it) that also carries the label table and the
voxel count of every value. The array is uint8 while every value fits (≤ 255) and is
widened in place to uint16 the first time a larger value is written: the old array is
dropped, so nobody keeps a second copy.

The counts are kept up to date from the edit deltas (:meth:`apply`), so per-label volumes
never need a recount of the whole map after an edit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Iterable, Mapping

import numpy as np

from medseg.core.label_colors import distinct_color, totalsegmentator_name
from medseg.core.label_values import label_dtype
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.edit.delta import value_counts
from medseg.errors import GeometryError, MedsegError

NAME_SETS = ("From file", "TotalSegmentator v2 (total)")


def build_label_table(values: Iterable[int], names: Mapping[int, str | Label] | None = None,
                      name_set: str = NAME_SETS[0], described: Mapping[int, Label] | None = None) -> dict[int, Label]:
    """One label per value present (0 excluded): the file's own label where ``names`` holds one (its
    codes and provenance kept), else named from ``names`` (or TotalSegmentator's class map) and
    coloured by the one colour table.

    ``described``: the model's own labels for the name set (TotalSegmentator's, from the catalogue: names,
    groups, codes and colours); a value it describes takes that label whole.
    """
    names = names or {}
    table = {}
    for value in sorted({int(v) for v in values if int(v) != 0}):
        given = names.get(value)
        name = given.name if isinstance(given, Label) else given
        if name_set == NAME_SETS[1]:
            if described and value in described:
                table[value] = replace(described[value], value=value)
                continue
            name = totalsegmentator_name(value) or name
        if isinstance(given, Label) and name == given.name:
            table[value] = given
        else:
            table[value] = Label(value, name or "")
    return table


class LabelMap(Volume):
    """A label Volume on the image grid, with its label table and per-value voxel counts."""

    def __init__(self, array: np.ndarray, spacing_mm=(1.0, 1.0, 1.0), origin_mm=(0.0, 0.0, 0.0),
                 direction=None, meta=None, labels: Mapping[int, Label] | None = None) -> None:
        array = np.asarray(array)
        if array.size and array.dtype.kind == "f" and not np.array_equal(array, np.rint(array)):
            raise MedsegError("a label map must hold whole numbers; this one holds fractions")
        low = int(array.min()) if array.size else 0
        high = int(array.max()) if array.size else 0
        if low < 0:
            raise MedsegError(f"a label map cannot hold negative values (found {low})")
        wanted = label_dtype(high)
        if array.dtype != wanted:
            array = array.astype(wanted)
        kwargs = {} if direction is None else {"direction": direction}
        if meta is not None:
            kwargs["meta"] = meta
        super().__init__(array, spacing_mm, origin_mm, **kwargs)
        self.counts = np.pad(value_counts(self.array.ravel()), (0, 1))
        present = [int(v) for v in np.nonzero(self.counts)[0] if v]
        table = dict(labels) if labels is not None else {}
        names = self.meta.labels
        for value in present:
            if value not in table:
                table.update(build_label_table([value], names))
        self.labels: dict[int, Label] = dict(sorted(table.items()))

    # --- construction ------------------------------------------------------------------
    @classmethod
    def from_volume(cls, volume: Volume, labels: Mapping[int, Label] | None = None,
                    name_set: str = NAME_SETS[0], described: Mapping[int, Label] | None = None) -> "LabelMap":
        """Wrap a loaded label Volume (no copy when it is already uint8/uint16 of the right width)."""
        if isinstance(volume, LabelMap) and labels is None:
            labels = volume.labels
        label_map = cls(volume.array, volume.spacing_mm, volume.origin_mm, volume.direction, volume.meta, labels)
        if labels is None and name_set != NAME_SETS[0]:
            present = [int(v) for v in np.nonzero(label_map.counts)[0]]
            label_map.labels = build_label_table(present, volume.meta.labels, name_set, described)
        return label_map

    @classmethod
    def empty_like(cls, image: Volume, labels: Mapping[int, Label] | None = None) -> "LabelMap":
        """An all-background label map on ``image``'s grid."""
        meta = replace(image.meta, labels={}, modality="SEG", extra={})
        return cls(np.zeros(image.shape_zyx, dtype=np.uint8), image.spacing_mm, image.origin_mm,
                   image.direction.copy(), meta, labels or {})

    def check_fits(self, image: Volume) -> None:
        if not self.same_grid(image):
            raise GeometryError(f"the label map's grid {self.size_xyz} does not match the image's {image.size_xyz}")

    # --- the table -----------------------------------------------------------------------
    def next_free_value(self) -> int:
        used = set(self.labels) | {int(v) for v in np.nonzero(self.counts)[0]}
        value = 1
        while value in used:
            value += 1
        return value

    def entry(self, value: int) -> Label:
        try:
            return self.labels[value]
        except KeyError:
            raise MedsegError(f"there is no label {value} in this segmentation") from None

    def locked_values(self) -> frozenset[int]:
        return frozenset(v for v, e in self.labels.items() if e.locked)

    def new_label_color(self, value: int, name: str | None = None) -> tuple[int, int, int]:
        """The colour a label added now gets: one that stands apart from those in the table."""
        return distinct_color(value, name, (entry.color for entry in self.labels.values()))

    def ensure_entry(self, value: int, name: str | None = None) -> Label:
        if value not in self.labels and value != 0:
            self.labels[value] = Label(value, name or "", self.new_label_color(value, name))
            self.labels = dict(sorted(self.labels.items()))
        return self.labels.get(value) or Label(0, "background", (0, 0, 0))

    # --- voxels --------------------------------------------------------------------------
    def widen_for(self, value: int) -> bool:
        """Make the array wide enough for ``value`` (uint8 → uint16, in place of the old one)."""
        if label_dtype(int(value)).itemsize <= self.array.dtype.itemsize:
            return False
        self.array = self.array.astype(np.uint16)
        return True

    def voxel_count(self, value: int) -> int:
        return int(self.counts[value]) if 0 <= value < len(self.counts) else 0

    def volumes_ml(self) -> dict[int, float]:
        voxel_ml = self.voxel_volume_ml
        return {int(v): float(self.counts[v] * voxel_ml) for v in np.nonzero(self.counts)[0] if v != 0}

    def recount(self) -> None:
        """Count every value again (only after writing the array directly, outside the document)."""
        self.counts = np.pad(value_counts(self.array.ravel()), (0, 1))

    def update_counts(self, removed: np.ndarray, added: np.ndarray) -> None:
        """Adjust the per-value counts: ``removed``/``added`` are per-value voxel counts of a change."""
        top = max(removed.size, added.size)
        if top > len(self.counts):
            self.counts = np.concatenate([self.counts, np.zeros(top - len(self.counts), np.int64)])
        self.counts[:removed.size] -= removed
        self.counts[:added.size] += added

    def to_volume(self) -> Volume:
        """A plain Volume sharing this array, with the table in ``meta.labels``."""
        meta = replace(self.meta, labels=dict(self.labels))
        return Volume(self.array, self.spacing_mm, self.origin_mm, self.direction.copy(), meta)

    def __repr__(self) -> str:
        return f"LabelMap(size_xyz={self.size_xyz}, dtype={self.array.dtype}, labels={len(self.labels)})"


__all__ = ["LabelMap", "build_label_table", "NAME_SETS"]
