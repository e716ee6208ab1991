"""Every label's surface, kept brick by brick so that an edit re-meshes only what it touched.

The 3D view shows each label as a smoothed surface (:func:`medseg.io.mesh.mesh_cells`, the
same meshing the STL export uses). The sample lattice of a label is cut into bricks of
``BRICK_CELLS`` cells per axis; each brick's mesh is kept. An edit (a box and the label
values it touched) re-meshes, for each of those labels, only the bricks whose surface
depends on the box (the box, the smoothing's reach and one sample). A 512×512×300 label map
re-meshes a brush stroke in tens of milliseconds instead of seconds for the whole label.

Decimation: a label is sampled coarser than its voxels when its surface is large, so that
the scene stays within ``triangle_budget`` triangles (what a software renderer turns
around at 30 frames/s, see ``benchmarks/bench_render.py``). The sample spacing is chosen
from the label's area (voxel faces on its boundary) when it is first meshed, and chosen
again when its voxel count has changed more than fourfold.

No Qt: the GUI runs :meth:`SurfaceBricks.update` in a worker thread and gets plain arrays. A
rebuild meshes labels side by side on the calling job's share of medseg's CPU threads.
"""

from __future__ import annotations

import contextlib
import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np
from scipy import ndimage

from medseg.core.volume import Volume
from medseg.io.mesh import CellMesh, Sampling, mesh_cells, sampling_for, to_patient

BRICK_CELLS = 16
TRIANGLE_BUDGET = 400_000  # the whole scene
MIN_LABEL_BUDGET = 20_000
# Marching cubes on a smoothed mask gives about this many triangles per (voxel-face area / sample area): measured
# 1.7-2.0 on TotalSegmentator's 117 structures (samples 1-7.6 mm); with 1.2 nearly every label overshot and
# was meshed twice (229 meshings for 117 labels, 119 now).
TRIANGLES_PER_FACE = 1.8
REPLAN_FACTOR = 4.0
OVERSHOOT_LIMIT = 1.4  # a label meshed to more than this times its budget is meshed again, coarser
FIT_ATTEMPTS = 3  # passes that mesh labels coarser while the whole scene is over the budget
FIT_MARGIN = 0.95  # aim under the target: a coarser sampling's count is still an estimate
MIN_FIT_TRIANGLES = 64  # a label this small is left as it is (coarser, it would vanish)


@dataclass
class Surface:
    """One label's surface in patient space: what the 3D view draws."""

    value: int
    vertices: np.ndarray  # (N, 3) float32 LPS mm
    faces: np.ndarray  # (M, 3) uint32
    normals: np.ndarray  # (N, 3) float32, unit, outward
    sample_mm: float

    @property
    def n_triangles(self) -> int:
        return len(self.faces)


@dataclass
class _Brick:
    vertices: np.ndarray  # (N, 3) float32 LPS mm
    faces: np.ndarray  # (M, 3) uint32, into this brick's vertices
    normals: np.ndarray  # (N, 3) float32


@dataclass
class _Label:
    sampling: Sampling
    sample_mm: float
    planned_voxels: int
    bricks: dict[tuple[int, int, int], _Brick] = field(default_factory=dict)

    @property
    def n_triangles(self) -> int:
        return sum(len(b.faces) for b in self.bricks.values())


def _label_pool(labels: int):
    """Threads for meshing labels side by side: this job's share of medseg's CPU threads (medseg.threads).

    The block means, the smoothing and the bookkeeping (NumPy, SciPy) run without the GIL; scikit-image's
    marching cubes holds it, so that step of two labels does not overlap.
    """
    from concurrent.futures import ThreadPoolExecutor

    from medseg import threads

    workers = max(1, min(labels, threads.current()))
    if workers == 1:
        return contextlib.nullcontext(_InThisThread())
    return ThreadPoolExecutor(workers, thread_name_prefix="medseg-mesh")


class _InThisThread:
    @staticmethod
    def map(function, items):
        return map(function, items)


def _kept_fraction(before: Sampling, after: Sampling) -> float:
    """About what share of a surface's triangles a coarser sampling keeps: they fall with the square of the
    samples' spacing (the cube root of a sample's volume in voxels)."""
    return (math.prod(before.step_zyx) / math.prod(after.step_zyx)) ** (2 / 3)


class SurfaceBricks:
    """The surfaces of a label map on ``geometry``'s grid. Not thread-safe: one worker calls it at a time."""

    def __init__(self, geometry: Volume, triangle_budget: int = TRIANGLE_BUDGET, smoothing: float = 0.6,
                 brick_cells: int = BRICK_CELLS) -> None:
        self.geometry = geometry
        self.triangle_budget = int(triangle_budget)
        self.smoothing = float(smoothing)
        self.brick_cells = int(brick_cells)
        self._labels: dict[int, _Label] = {}
        self.meshings: Counter[int] = Counter()  # bricks meshed per label value (what tests count)

    @property
    def values(self) -> list[int]:
        return sorted(self._labels)

    # --- whole label map -------------------------------------------------------------------
    def rebuild(self, labels: np.ndarray, values: Iterable[int] | None = None) -> dict[int, Surface]:
        """Mesh every label (``values``: those present; found when None) from scratch."""
        labels = np.asarray(labels)
        self._labels.clear()
        boxes = ndimage.find_objects(labels if labels.dtype.kind in "ui" else labels.astype(np.int32))
        present = [v for v in (values if values is not None else range(1, len(boxes) + 1))
                   if 0 < v <= len(boxes) and boxes[v - 1] is not None]
        with _label_pool(len(present)) as pool:
            areas = dict(zip(present, pool.map(lambda v: self._face_area_mm2(labels, v, boxes[v - 1]), present)))
            budgets = self._shares(areas)

            def mesh(value: int) -> None:
                box = boxes[value - 1]
                self._mesh_planned(labels, value, box, areas[value], budgets[value],
                                   int(np.count_nonzero(labels[box] == value)))

            list(pool.map(mesh, sorted(present, key=lambda v: -areas[v])))  # the largest first: they take longest
            self._fit_budget(labels, {v: boxes[v - 1] for v in present}, pool)
        return {value: self.surface(value) for value in present}

    def _shares(self, areas: dict[int, float], budget: float | None = None) -> dict[int, float]:
        """Each label's triangles: its share of the budget by area, never below the floor. The floors are taken
        out of the budget first, so the shares add up to the budget (floors added on top, and each label let
        over its share by up to OVERSHOOT_LIMIT, took 81 TotalSegmentator surfaces to 613k against 400k)."""
        floor = self._floor(len(set(self._labels) | set(areas)))
        remaining, shares = dict(areas), {}
        left = max(float(self.triangle_budget if budget is None else budget), floor * len(areas))
        while remaining:
            total = sum(remaining.values()) or 1.0
            small = [v for v, a in remaining.items() if left * a / total < floor]
            if not small:
                shares.update({v: left * a / total for v, a in remaining.items()})
                break
            for value in small:
                shares[value] = floor
                left -= floor
                del remaining[value]
        return shares

    def _fit_budget(self, labels: np.ndarray, boxes: dict[int, tuple], pool) -> None:
        """While the scene is over the budget (marching cubes' count is only estimated beforehand: most labels
        came out a fifth over their share), mesh labels one sampling step coarser — those that give up the most
        triangles first — until the counts they had say the scene fits: the fewest labels are meshed again.
        Only the labels of ``boxes`` (each one's box in ``labels``) are meshed again."""
        for _attempt in range(FIT_ATTEMPTS):
            total = self.triangles()
            if total <= self.triangle_budget:
                return
            counts = {v: self._labels[v].n_triangles for v in boxes
                      if v in self._labels and self._labels[v].n_triangles > MIN_FIT_TRIANGLES}
            coarser = {v: self._coarser(self._labels[v]) for v in counts}
            saved = {v: counts[v] * (1.0 - _kept_fraction(self._labels[v].sampling, coarser[v].sampling))
                     for v in counts}
            planned: list[int] = []
            expected = float(total)
            for value in sorted(saved, key=lambda v: -saved[v]):
                if expected <= self.triangle_budget * FIT_MARGIN:
                    break
                planned.append(value)
                expected -= saved[value]
            if not planned:
                return

            def mesh(value: int) -> None:
                self._labels[value] = coarser[value]
                self._mesh_whole(labels, value, boxes[value])

            list(pool.map(mesh, planned))

    def _coarser(self, entry: "_Label") -> "_Label":
        """``entry`` sampled coarser by the least that changes its sampling steps."""
        sample_mm = entry.sample_mm
        sampling = entry.sampling
        while sampling.step_zyx == entry.sampling.step_zyx:
            sample_mm *= 1.15
            sampling = sampling_for(self.geometry.spacing_zyx, sample_mm, self.smoothing)
        return _Label(sampling, sample_mm, entry.planned_voxels)

    def simplified(self) -> list[int]:
        """The labels sampled coarser than the voxels to keep the scene within the budget."""
        finest = min(self.geometry.spacing_mm)
        return [v for v, entry in self._labels.items() if entry.sample_mm > finest * 1.01]

    # --- an edit ----------------------------------------------------------------------------
    def update(self, labels: np.ndarray, box: tuple[tuple[int, int, int], tuple[int, int, int]],
               values: Iterable[int], counts: dict[int, int] | None = None) -> dict[int, Surface | None]:
        """Re-mesh the labels ``values`` where voxels ``box`` ((z, y, x) low, high) changed.

        ``counts``: each label's voxel count now (the document keeps them; counted when missing); a
        label whose count moved more than fourfold since it was planned is planned and meshed again whole.
        Returns the new surface of each label (None: the label has no voxels left).
        """
        labels = np.asarray(labels)
        lo, hi = box
        changed: dict[int, Surface | None] = {}
        replan: dict[int, int] = {}  # value -> its voxel count: planned and meshed whole
        for value in sorted({int(v) for v in values if int(v) != 0}):
            count = (counts or {}).get(value)
            if count is None:
                count = int(np.count_nonzero(labels == value))
            entry = self._labels.get(value)
            if count == 0:
                self._labels.pop(value, None)
                changed[value] = None
                continue
            if entry is None or not (1 / REPLAN_FACTOR <= count / max(entry.planned_voxels, 1) <= REPLAN_FACTOR):
                replan[value] = count
            else:
                self._mesh_box(labels, value, lo, hi)
                changed[value] = self.surface(value)
        if replan:
            self._replan(labels, replan, (lo, hi))
            changed.update({value: self.surface(value) if value in self._labels else None for value in replan})
        return changed

    def _replan(self, labels: np.ndarray, counts: dict[int, int], box) -> None:
        """Plan and mesh ``counts``' labels whole, sharing what the other labels leave of the budget as a
        rebuild shares it (a result's 117 new labels arrive as one edit: planned one by one, the first took
        the whole budget and the scene came to 665k triangles)."""
        if len(counts) == 1:
            (value,) = counts
            found = ndimage.find_objects((labels == value).astype(np.uint8))
            boxes = {value: found[0] if found else tuple(slice(l, h) for l, h in zip(*box))}
        else:  # one pass over the map for all of them
            found = ndimage.find_objects(labels if labels.dtype.kind in "ui" else labels.astype(np.int32))
            boxes = {v: found[v - 1] for v in counts if v <= len(found) and found[v - 1] is not None}
        for value in counts:
            self._labels.pop(value, None)
        others = self.triangles()
        with _label_pool(len(boxes)) as pool:
            areas = dict(zip(boxes, pool.map(lambda v: self._face_area_mm2(labels, v, boxes[v]), boxes)))
            shares = self._shares(areas, self.triangle_budget - others)
            list(pool.map(lambda v: self._mesh_planned(labels, v, boxes[v], areas[v], shares[v], counts[v]),
                          sorted(boxes, key=lambda v: -areas[v])))
            self._fit_budget(labels, boxes, pool)

    # --- results ----------------------------------------------------------------------------
    def surface(self, value: int) -> Surface:
        """The label's whole surface (its bricks joined), in patient space."""
        entry = self._labels[value]
        parts = [b for _key, b in sorted(entry.bricks.items())]
        if not parts:
            return Surface(value, np.zeros((0, 3), np.float32), np.zeros((0, 3), np.uint32),
                           np.zeros((0, 3), np.float32), entry.sample_mm)
        offsets = np.cumsum([0] + [len(b.vertices) for b in parts[:-1]]).astype(np.uint32)
        return Surface(value, np.concatenate([b.vertices for b in parts]),
                       np.concatenate([b.faces + o for b, o in zip(parts, offsets)]),
                       np.concatenate([b.normals for b in parts]), entry.sample_mm)

    def triangles(self) -> int:
        return sum(entry.n_triangles for entry in self._labels.values())

    # --- internals --------------------------------------------------------------------------
    def _plan(self, area_mm2: float, budget: float, voxels: int) -> _Label:
        finest = min(self.geometry.spacing_mm)
        sample_mm = max(finest, math.sqrt(TRIANGLES_PER_FACE * area_mm2 / max(budget, 1.0)))
        sampling = sampling_for(self.geometry.spacing_zyx, sample_mm, self.smoothing)
        return _Label(sampling, sample_mm, voxels)

    def _mesh_planned(self, labels: np.ndarray, value: int, box, area_mm2: float, budget: float, voxels: int) -> None:
        """Plan the label's sampling from its area and mesh it whole; a surface more intricate than its
        area says (vessels in the lungs, ribs) overshoots the budget: it is planned once more from the count."""
        self._labels[value] = self._plan(area_mm2, budget, voxels)
        self._mesh_whole(labels, value, box)
        overshoot = self._labels[value].n_triangles / max(budget, 1.0)
        if overshoot > OVERSHOOT_LIMIT:
            self._labels[value] = self._plan(area_mm2 * overshoot, budget, voxels)
            self._mesh_whole(labels, value, box)

    def _floor(self, labels: int) -> float:
        """The fewest triangles a label may be given: MIN_LABEL_BUDGET, less when so many labels share the
        scene that their floors alone would pass the budget (117 structures: half the budget among them)."""
        return min(MIN_LABEL_BUDGET, self.triangle_budget / (2 * max(labels, 1)))

    def _brick(self, mesh: CellMesh) -> _Brick:
        vertices, faces, normals = to_patient(self.geometry, mesh)
        return _Brick(vertices.astype(np.float32), faces.astype(np.uint32), normals.astype(np.float32))

    def _mesh_whole(self, labels: np.ndarray, value: int, box) -> None:
        """Mesh the label's whole box in one pass, then cut the faces into bricks (the same faces that
        brick-by-brick meshing gives: each face's samples are the same)."""
        entry = self._labels[value]
        entry.bricks.clear()
        cells = entry.sampling.cells_touched([s.start for s in box], [s.stop for s in box], labels.shape)
        mesh = mesh_cells(labels, value, entry.sampling, cells)
        self.meshings[value] += 1
        if not len(mesh.faces):
            return
        keys = (mesh.face_cells // self.brick_cells).astype(np.int64)
        code = (keys[:, 0] << 40) | (keys[:, 1] << 20) | keys[:, 2]  # one sortable number per brick
        order = np.argsort(code, kind="stable")
        starts = np.flatnonzero(np.diff(code[order], prepend=-1))
        for start, stop in zip(starts, [*starts[1:], len(order)]):
            faces = order[start:stop]
            key = tuple(int(k) for k in keys[faces[0]])
            entry.bricks[key] = self._brick(mesh.subset(faces))  # type: ignore[index]

    def _mesh_box(self, labels: np.ndarray, value: int, lo, hi) -> None:
        """Re-mesh every brick of ``value`` whose surface depends on voxels ``[lo, hi)``."""
        entry = self._labels[value]
        cell_lo, cell_hi = entry.sampling.cells_touched(lo, hi, labels.shape)
        counts = entry.sampling.sample_counts(labels.shape)
        size = self.brick_cells
        first = [c // size for c in cell_lo]
        last = [(c - 1) // size for c in cell_hi]
        for bz in range(first[0], last[0] + 1):
            for by in range(first[1], last[1] + 1):
                for bx in range(first[2], last[2] + 1):
                    key = (bz, by, bx)
                    low = tuple(b * size for b in key)
                    high = tuple(min((b + 1) * size, n - 1) for b, n in zip(key, counts))
                    mesh = mesh_cells(labels, value, entry.sampling, (low, high))  # type: ignore[arg-type]
                    self.meshings[value] += 1
                    if len(mesh.faces):
                        entry.bricks[key] = self._brick(mesh)
                    else:
                        entry.bricks.pop(key, None)

    def _face_area_mm2(self, labels: np.ndarray, value: int, box) -> float:
        """The area of the label's voxel boundary (voxel faces between it and anything else), in mm²."""
        padded = tuple(slice(max(0, s.start - 1), min(n, s.stop + 1)) for s, n in zip(box, labels.shape))
        mask = labels[padded] == value
        sz, sy, sx = self.geometry.spacing_zyx
        face_areas = (sy * sx, sz * sx, sz * sy)  # a face across z, y, x
        area = 0.0
        for axis, face in enumerate(face_areas):
            area += face * np.count_nonzero(np.diff(mask, axis=axis))
            area += face * (np.count_nonzero(mask.take(0, axis=axis)) + np.count_nonzero(mask.take(-1, axis=axis)))
        return float(area)
