"""Surface meshes of each label, in physical LPS millimetres: the STL / OBJ export and the 3D view.

scikit-image's marching cubes (Lewiner) extracts the 0.5 iso-surface of each label's
mask, and trimesh writes it. Why these two: scikit-image is already in the scientific
stack the app ships with (scipy, numpy), marching cubes on a cropped mask is fast enough
for CT (seconds for a body mask), and trimesh writes both STL and OBJ from plain numpy
arrays in a few hundred kB of pure Python; VTK would add over 100 MB to the installer
for the same two calls.

One function, :func:`mesh_cells`, makes every surface: the export meshes a label's whole
box at full resolution (``EXACT``: the voxel mask itself), the 3D view
(``medseg.io.surface_bricks``) meshes it brick by brick, sampled every few voxels (each
sample the mean of its block of the mask, so thin structures fade instead of aliasing) and
smoothed with a small Gaussian — which never takes out a sample that is mostly inside the label, so
a structure one slice thin is a thin surface, not nothing. A brick is meshed from the samples around it, so its faces
meet its neighbours' exactly (the same samples give the same vertices): an edit re-meshes
only the bricks it touches.

Vertices are mapped from voxel indices through the volume's spacing, direction and
origin, so a mesh lies where the label lies in the patient (LPS, as DICOM and 3D Slicer
use; the STL header and OBJ comment say so). Faces wind outwards (positive volume).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage

from medseg.core.volume import Volume

_TRUNCATE = 4.0  # scipy's default: the Gaussian's kernel reaches int(4 * sigma + 0.5) samples
# How far above the iso-level a sample mostly inside the label is kept after smoothing: the surface of a
# one-sample-thin structure then lies about a quarter of a sample either side of it.
_THIN_MARGIN = 0.1


@dataclass(frozen=True)
class Sampling:
    """How a surface samples the mask: one sample per ``step`` voxels along (z, y, x), each the mean of its
    block of voxels, smoothed with a Gaussian of ``sigma`` samples per axis (0: not smoothed).

    Sample ``k`` of an axis is the block of voxels ``[(k - 1) * step, k * step)``: the first and last
    samples lie wholly outside the volume, so every surface is closed at the volume's edges.
    """

    step_zyx: tuple[int, int, int] = (1, 1, 1)
    sigma_zyx: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @property
    def radius_zyx(self) -> tuple[int, int, int]:
        """How many samples the smoothing reaches on each side."""
        return tuple(int(_TRUNCATE * s + 0.5) if s > 0 else 0 for s in self.sigma_zyx)  # type: ignore[return-value]

    def sample_counts(self, shape_zyx: tuple[int, ...]) -> tuple[int, int, int]:
        return tuple(-(-n // s) + 2 for n, s in zip(shape_zyx, self.step_zyx))  # type: ignore[return-value]

    def cells_touched(self, lo_zyx, hi_zyx, shape_zyx) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
        """The cells (between samples k and k + 1) whose surface depends on voxels ``[lo, hi)``."""
        counts = self.sample_counts(shape_zyx)
        low, high = [], []
        for lo, hi, step, radius, count in zip(lo_zyx, hi_zyx, self.step_zyx, self.radius_zyx, counts):
            first, last = (int(lo) + step) // step, (int(hi) - 1 + step) // step
            low.append(max(0, first - radius - 1))
            high.append(min(count - 1, last + radius + 1))
        return tuple(low), tuple(high)  # type: ignore[return-value]


EXACT = Sampling()  # the voxel mask itself: what the STL / OBJ export writes


def sampling_for(spacing_zyx, sample_mm: float, smoothing: float = 0.6) -> Sampling:
    """Samples about ``sample_mm`` apart (never finer than a voxel), smoothed by ``smoothing`` samples
    on each axis (at least that, and more along an axis whose voxels are finer than the samples)."""
    steps = tuple(max(1, int(round(sample_mm / sp))) for sp in spacing_zyx)
    if smoothing <= 0:
        return Sampling(steps, (0.0, 0.0, 0.0))  # type: ignore[arg-type]
    # thick slices (voxels coarser than the samples) leave terraces a slice high: smooth those more
    sigmas = tuple(float(smoothing) * (1.6 if sp > 1.5 * sample_mm else 1.0) for sp in spacing_zyx)
    return Sampling(steps, sigmas)  # type: ignore[arg-type]


@dataclass
class CellMesh:
    """Part of a surface in continuous voxel indices (z, y, x): vertices, faces, outward normals, and the
    sample cell each face lies in (to cut a mesh into bricks)."""

    vertices_zyx: np.ndarray  # (N, 3) float32
    faces: np.ndarray  # (M, 3) int32, outward by the right-hand rule in (x, y, z) index space
    normals_zyx: np.ndarray  # (N, 3) float32: the field's falling gradient, in index units
    face_cells: np.ndarray  # (M, 3) int32: (z, y, x) cell of each face

    @classmethod
    def empty(cls) -> "CellMesh":
        return cls(np.zeros((0, 3), np.float32), np.zeros((0, 3), np.int32), np.zeros((0, 3), np.float32),
                   np.zeros((0, 3), np.int32))

    def subset(self, keep: np.ndarray) -> "CellMesh":
        """The faces ``keep`` (a boolean mask or face indices), with only the vertices they use."""
        faces = self.faces[keep]
        used, renumbered = np.unique(faces, return_inverse=True)
        return CellMesh(self.vertices_zyx[used], renumbered.reshape(faces.shape).astype(np.int32),
                        self.normals_zyx[used], self.face_cells[keep])


def mesh_cells(labels: np.ndarray, value: int, sampling: Sampling = EXACT,
               cells: tuple[tuple[int, int, int], tuple[int, int, int]] | None = None) -> CellMesh:
    """The surface of ``labels == value`` inside the sample cells ``[low, high)`` (all cells when None).

    The mask is read around the cells (one sample more for the normals, plus the smoothing's reach),
    so the faces of neighbouring cell ranges meet exactly.
    """
    from skimage.measure import marching_cubes

    counts = sampling.sample_counts(labels.shape)
    low, high = cells if cells is not None else ((0, 0, 0), tuple(n - 1 for n in counts))
    if any(h <= l for l, h in zip(low, high)):
        return CellMesh.empty()
    # samples used by the cells (and one more on each side for the normals) and the samples smoothing them
    used_lo = [l - 1 for l in low]
    used_hi = [h + 2 for h in high]  # exclusive
    read_lo = [u - r for u, r in zip(used_lo, sampling.radius_zyx)]
    read_hi = [u + r for u, r in zip(used_hi, sampling.radius_zyx)]
    field = _block_means(labels, value, sampling.step_zyx, read_lo, read_hi)
    if field is None:
        return CellMesh.empty()
    if any(s > 0 for s in sampling.sigma_zyx):
        # A sample mostly inside the label stays inside after smoothing: a structure one slice (or one
        # sample) thin smoothed to below 0.5 everywhere, and the 3D view showed nothing of it. Thinner than
        # half a sample, it still fades (what keeps aliasing out).
        inside = field >= 0.5
        field = ndimage.gaussian_filter(field, sampling.sigma_zyx, mode="constant", cval=0.0, truncate=_TRUNCATE)
        np.maximum(field, np.where(inside, np.float32(0.5 + _THIN_MARGIN), np.float32(0.0)), out=field)
    used = field[tuple(slice(u - r0, e - r0) for u, e, r0 in zip(used_lo, used_hi, read_lo))]
    if not (used.min() < 0.5 < used.max()):
        return CellMesh.empty()
    verts, faces, normals, _ = marching_cubes(used, level=0.5, method="lewiner", allow_degenerate=False)
    # a face lies inside one cell: the cell that holds its centroid
    face_cells = (np.floor(verts[faces].mean(axis=1)).astype(np.int64) + np.asarray(used_lo)).astype(np.int32)
    samples = verts + np.asarray(used_lo)
    step = np.asarray(sampling.step_zyx, dtype=np.float64)
    # sample k is the block [(k - 1) * step, k * step): its centre is the voxel index below
    index_zyx = (samples - 1.0) * step + (step - 1.0) / 2.0
    mesh = CellMesh(index_zyx.astype(np.float32), faces.astype(np.int32), (normals / step).astype(np.float32),
                    face_cells)
    if cells is None:
        return mesh
    return mesh.subset(np.all((face_cells >= np.asarray(low)) & (face_cells < np.asarray(high)), axis=1))


def _block_means(labels: np.ndarray, value: int, step, read_lo, read_hi) -> np.ndarray | None:
    """Samples ``[read_lo, read_hi)`` of the mask: block means of ``labels == value`` (0 outside). None if empty."""
    step = tuple(int(s) for s in step)
    voxel_lo = [(k - 1) * s for k, s in zip(read_lo, step)]
    voxel_hi = [(k - 1) * s for k, s in zip(read_hi, step)]
    inner_lo = [max(0, v) for v in voxel_lo]
    inner_hi = [min(n, v) for n, v in zip(labels.shape, voxel_hi)]
    if any(h <= l for l, h in zip(inner_lo, inner_hi)):
        return None
    inside = labels[tuple(slice(l, h) for l, h in zip(inner_lo, inner_hi))] == value
    if not inside.any():
        return None
    mask = np.zeros([h - l for l, h in zip(voxel_lo, voxel_hi)], dtype=np.uint8)
    mask[tuple(slice(il - l, ih - l) for l, il, ih in zip(voxel_lo, inner_lo, inner_hi))] = inside
    if step == (1, 1, 1):
        return mask.astype(np.float32)
    # one axis at a time, as a few strided additions (a numpy reduction over runs of 2-8 values is slow)
    sums = mask.astype(np.uint16) if math.prod(step) > 255 else mask
    for axis, s in enumerate(step):
        if s > 1:
            index = [slice(None)] * 3
            index[axis] = slice(0, None, s)
            total = sums[tuple(index)].astype(np.uint16)
            for offset in range(1, s):
                index[axis] = slice(offset, None, s)
                total += sums[tuple(index)]
            sums = total
    return sums.astype(np.float32) * np.float32(1.0 / math.prod(step))


def to_patient(volume: Volume, mesh: CellMesh) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(vertices (N, 3) LPS mm, faces (M, 3), unit outward normals (N, 3)) of a :class:`CellMesh`."""
    vertices = volume.index_to_physical(mesh.vertices_zyx[:, ::-1].astype(np.float64))
    gradient_xyz = mesh.normals_zyx[:, ::-1].astype(np.float64) / np.asarray(volume.spacing_mm)
    normals = gradient_xyz @ volume.direction.T
    normals /= np.maximum(np.linalg.norm(normals, axis=1, keepdims=True), 1e-12)
    faces = mesh.faces.astype(np.int64)
    if np.linalg.det(volume.direction) < 0:  # a mirroring direction turns the winding inside out
        faces = faces[:, ::-1]
    return vertices, faces, normals


@dataclass
class MeshResult:
    value: int
    name: str
    path: Path
    n_vertices: int
    n_faces: int
    bbox_min_lps: tuple[float, float, float]
    bbox_max_lps: tuple[float, float, float]


def label_surface(label_map: Volume, value: int, box: tuple[slice, ...] | None = None,
                  sampling: Sampling = EXACT) -> tuple[np.ndarray, np.ndarray]:
    """(vertices (N, 3) in LPS mm, faces (M, 3)) of the surface around voxels equal to ``value``.

    ``box``: the label's bounding box (z, y, x slices) when already known (scipy's find_objects).
    """
    labels = np.asarray(label_map.array)
    if box is None:
        boxes = ndimage.find_objects((labels == value).astype(np.uint8))
        box = boxes[0] if boxes else None
    if box is None:
        return np.zeros((0, 3)), np.zeros((0, 3), dtype=np.int64)
    cells = sampling.cells_touched([s.start for s in box], [s.stop for s in box], labels.shape)
    vertices, faces, _normals = to_patient(label_map, mesh_cells(labels, value, sampling, cells))
    return vertices, faces


def safe_name(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", name).strip("_") or "label"


def encode_stl(mesh: Any, name: str, value: int) -> bytes:
    """The STL row's encoder: binary STL whose 80-byte header names the label and the space."""
    import trimesh

    data = trimesh.exchange.stl.export_stl(mesh)
    header = f"medseg {name} SPACE=LPS mm".encode("ascii", "replace")[:80].ljust(80, b" ")
    return header + data[80:]


def encode_obj(mesh: Any, name: str, value: int) -> bytes:
    """The OBJ row's encoder: vertices and faces, after a comment naming the label and the space."""
    import trimesh

    text = trimesh.exchange.obj.export_obj(mesh, include_normals=False, include_texture=False, header=None)
    return (f"# medseg surface of '{name}' (label {value}); coordinates: LPS millimetres\n" + text).encode()
