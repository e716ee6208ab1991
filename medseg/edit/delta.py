"""A sparse change to a label map: the bounding box, which voxels in it changed, their old and new values.

This is the one currency of editing: every tool returns a :class:`Delta`, the document
applies it, the undo history keeps it (napari's ``_MaskedPaintAtom`` idea: bounding box +
changed voxels + old values, never a full copy), and the journal appends it to disk.
Which voxels changed is stored as flat indices into the box, or as a packed bit mask of
the box when that is smaller (large fills, a Segment result).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

Box = tuple[tuple[int, int, int], tuple[int, int, int]]  # (z, y, x) low inclusive, high exclusive


def box_slices(box: Box) -> tuple[slice, slice, slice]:
    lo, hi = box
    return tuple(slice(a, b) for a, b in zip(lo, hi))  # type: ignore[return-value]


def box_of(mask: np.ndarray, offset=(0, 0, 0)) -> Box | None:
    """The tight bounding box of the True voxels of ``mask`` (shifted by ``offset``), or None."""
    lo, hi = [], []
    for axis in range(3):
        other = tuple(a for a in range(3) if a != axis)
        hit = np.flatnonzero(mask.any(axis=other))
        if hit.size == 0:
            return None
        lo.append(int(hit[0]) + offset[axis])
        hi.append(int(hit[-1]) + 1 + offset[axis])
    return (tuple(lo), tuple(hi))  # type: ignore[return-value]


def union_box(a: Box, b: Box) -> Box:
    return (tuple(min(x, y) for x, y in zip(a[0], b[0])), tuple(max(x, y) for x, y in zip(a[1], b[1])))  # type: ignore[return-value]


def value_counts(values: np.ndarray, chunk: int = 1 << 16) -> np.ndarray:
    """np.bincount without its int64 copy of the whole input (in chunks), and O(1) for a constant fill.

    Small chunks: bincount's int64 copy of each (512 KB) stays in the cache and in memory the allocator
    already has; with 4 M-voxel chunks a new segmentation's 12.5 M voxels took 3.3x as long, on the GUI
    thread as the masks appeared (bench_app_segment.py)."""
    if values.size == 0:
        return np.zeros(1, dtype=np.int64)
    first = int(values[0])
    if values.size > 64 and int(values.min()) == first == int(values.max()):
        counts = np.zeros(first + 1, dtype=np.int64)
        counts[first] = values.size
        return counts
    counts = np.zeros(1, dtype=np.int64)
    for start in range(0, values.size, chunk):
        part = np.bincount(values[start:start + chunk])
        if part.size > counts.size:
            part[:counts.size] += counts
            counts = part
        else:
            counts[:part.size] += part
    return counts


@dataclass
class Delta:
    """Voxels of ``box`` at ``where`` change from ``old`` to ``new`` (arrays in the same order)."""

    box: Box
    index: np.ndarray | None  # uint32 flat indices into the box (C order), or None when ``bits`` is used
    bits: np.ndarray | None  # np.packbits of the box's changed-voxel mask
    old: np.ndarray
    new: np.ndarray
    # voxel counts per value of old and new, computed once (counts and events both need them)
    _histograms: tuple[np.ndarray, np.ndarray] | None = field(default=None, init=False, repr=False, compare=False)

    # --- construction -----------------------------------------------------------------
    @classmethod
    def from_blocks(cls, lo: tuple[int, int, int], before: np.ndarray, after: np.ndarray) -> "Delta | None":
        """The change from ``before`` to ``after``, two equal blocks whose corner is voxel ``lo``."""
        changed = before != after
        inner = box_of(changed)
        if inner is None:
            return None
        sl = box_slices(inner)
        changed, before, after = changed[sl], before[sl], after[sl]
        box = (tuple(a + b for a, b in zip(lo, inner[0])), tuple(a + b for a, b in zip(lo, inner[1])))
        return cls.from_mask(box, changed, before[changed], after[changed])  # type: ignore[arg-type]

    @classmethod
    def from_mask(cls, box: Box, changed: np.ndarray, old: np.ndarray, new: np.ndarray) -> "Delta":
        count = int(old.size)
        if count * 4 <= changed.size / 8:
            return cls(box, np.flatnonzero(changed).astype(np.uint32), None, old, new)
        return cls(box, None, np.packbits(changed.ravel()), old, new)

    # --- reading ------------------------------------------------------------------------
    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(b - a for a, b in zip(*self.box))  # type: ignore[return-value]

    @property
    def count(self) -> int:
        return int(self.old.size)

    @property
    def nbytes(self) -> int:
        where = self.index if self.index is not None else self.bits
        return int(where.nbytes + self.old.nbytes + self.new.nbytes) + 96

    def mask(self) -> np.ndarray:
        """The changed voxels as a boolean block of the box's shape."""
        shape = self.shape
        if self.bits is not None:
            return np.unpackbits(self.bits, count=int(np.prod(shape))).view(bool).reshape(shape)
        mask = np.zeros(int(np.prod(shape)), dtype=bool)
        mask[self.index] = True
        return mask.reshape(shape)

    def flat_index(self) -> np.ndarray:
        return self.index if self.index is not None else np.flatnonzero(self.mask())

    def global_index(self, shape_zyx: tuple[int, int, int]) -> np.ndarray:
        """Flat indices of the changed voxels into the whole label map (int64)."""
        local = np.unravel_index(self.flat_index(), self.shape)
        return np.ravel_multi_index(tuple(c + o for c, o in zip(local, self.box[0])), shape_zyx)

    def histograms(self) -> tuple[np.ndarray, np.ndarray]:
        """Voxel counts per value of ``old`` and of ``new`` (cached: counts and events both need them)."""
        if self._histograms is None:
            self._histograms = (value_counts(self.old), value_counts(self.new))
        return self._histograms

    def values(self) -> frozenset[int]:
        """Every label value this change touches (old and new)."""
        old, new = self.histograms()
        return frozenset(int(v) for v in np.flatnonzero(old)) | frozenset(int(v) for v in np.flatnonzero(new))

    # --- applying -------------------------------------------------------------------------
    def write(self, array: np.ndarray, values: np.ndarray) -> None:
        block = array[box_slices(self.box)]
        if self.index is not None:
            flat = block.reshape(-1) if block.flags.c_contiguous else None
            if flat is not None:
                flat[self.index] = values
                return
            local = np.unravel_index(self.index, self.shape)
            block[local] = values
        else:
            block[self.mask()] = values

    def inverse(self) -> "Delta":
        inverse = Delta(self.box, self.index, self.bits, self.new, self.old)
        if self._histograms is not None:
            inverse._histograms = (self._histograms[1], self._histograms[0])
        return inverse

    # --- combining -------------------------------------------------------------------------
    @classmethod
    def merge(cls, first: "Delta", later: "Delta", shape_zyx: tuple[int, int, int], dtype) -> "Delta":
        """One delta equal to applying ``first`` then ``later`` (a stroke's dabs become one undo step)."""
        box = union_box(first.box, later.box)
        idx = np.concatenate([first.global_index(shape_zyx), later.global_index(shape_zyx)])
        old = np.concatenate([first.old, later.old]).astype(dtype, copy=False)
        new = np.concatenate([first.new, later.new]).astype(dtype, copy=False)
        order = np.argsort(idx, kind="stable")
        idx, old, new = idx[order], old[order], new[order]
        starts = np.flatnonzero(np.r_[True, idx[1:] != idx[:-1]])
        ends = np.r_[starts[1:], idx.size] - 1
        idx, old, new = idx[starts], old[starts], new[ends]  # first old value, last new value
        keep = old != new
        idx, old, new = idx[keep], old[keep], new[keep]
        zyx = np.unravel_index(idx, shape_zyx)
        if idx.size:
            box = (tuple(int(c.min()) for c in zyx), tuple(int(c.max()) + 1 for c in zyx))  # type: ignore[assignment]
        local = tuple(c - o for c, o in zip(zyx, box[0]))
        bshape = tuple(b - a for a, b in zip(*box))
        changed = np.zeros(bshape, dtype=bool)
        changed[local] = True
        # values are in global-index order, which is the box's C order too
        return cls.from_mask(box, changed, old, new)

    # --- bytes (the journal) ----------------------------------------------------------------
    def to_bytes(self) -> bytes:
        return b"".join(self.to_parts())

    def to_parts(self) -> list[memoryview]:
        """:meth:`to_bytes` as consecutive pieces, the arrays as views and not copies: the journal writes a
        Segment-sized delta without holding the GIL for copies of it (the window's thread waits on those)."""
        header = {"box": self.box, "dtype": str(self.old.dtype), "count": self.count,
                  "kind": "index" if self.index is not None else "bits"}
        where = self.index if self.index is not None else self.bits
        head = json.dumps(header).encode()
        parts = [memoryview(len(head).to_bytes(4, "little") + head)]
        for part in (where, self.old, self.new):
            data = memoryview(np.ascontiguousarray(part)).cast("B")
            parts += [memoryview(len(data).to_bytes(8, "little")), data]
        return parts

    @classmethod
    def from_bytes(cls, data: bytes) -> "Delta":
        view = memoryview(data)
        size = int.from_bytes(view[:4], "little")
        header = json.loads(bytes(view[4:4 + size]))
        pos = 4 + size
        parts = []
        for _ in range(3):
            length = int.from_bytes(view[pos:pos + 8], "little")
            parts.append(bytes(view[pos + 8:pos + 8 + length]))
            pos += 8 + length
        dtype = np.dtype(header["dtype"])
        box = tuple(tuple(int(v) for v in part) for part in header["box"])
        old = np.frombuffer(parts[1], dtype=dtype).copy()
        new = np.frombuffer(parts[2], dtype=dtype).copy()
        if header["kind"] == "index":
            return cls(box, np.frombuffer(parts[0], dtype=np.uint32).copy(), None, old, new)  # type: ignore[arg-type]
        return cls(box, None, np.frombuffer(parts[0], dtype=np.uint8).copy(), old, new)  # type: ignore[arg-type]
