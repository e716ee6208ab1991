"""The demo phantom's anatomy (:mod:`medseg.io.phantom`): a torso drawn from smooth shapes in HU and labels.

A :class:`Canvas` holds the HU and label arrays with the physical coordinates of their voxel
centres; the body (superellipse), organs (ellipsoids), ribs and vessels (tubes) and the patient
table are painted onto it, in millimetres in LPS with the torso's centre at (0, 0, 120).
"""

from __future__ import annotations

from typing import Iterable

import numpy as np

# Typical CT numbers (HU) of the tissues drawn; tests check the written series against them.
TISSUE_HU: dict[str, float] = {
    "air": -1000.0,
    "lung": -850.0,
    "fat": -100.0,
    "visceral_fat": -90.0,
    "muscle": 40.0,
    "blood": 40.0,
    "liver": 60.0,
    "spleen": 50.0,
    "kidney": 35.0,
    "stomach": 25.0,
    "bladder": 10.0,
    "disc": 80.0,
    "trabecular_bone": 250.0,
    "cortical_bone": 900.0,
    "dense_cortical_bone": 1100.0,
    "posterior_elements": 700.0,
    "table_shell": 500.0,
    "table_foam": -900.0,
}

_ANATOMY_CENTRE_Z_MM = 120.0
_BACKGROUND, _BODY, _LUNGS, _BONES, _LIVER = 0, 1, 2, 3, 4  # the values of medseg.io.phantom.PHANTOM_LABELS


# --- geometry helpers ----------------------------------------------------------------------


class Canvas:
    """HU and label arrays with the physical coordinates of their voxel centres."""

    def __init__(self, shape_zyx: tuple[int, int, int], spacing_xyz: tuple[float, float, float]):
        nz, ny, nx = shape_zyx
        sx, sy, sz = spacing_xyz
        self.origin_xyz = (-(nx - 1) * sx / 2.0, -(ny - 1) * sy / 2.0, _ANATOMY_CENTRE_Z_MM - (nz - 1) * sz / 2.0)
        self.x = self.origin_xyz[0] + sx * np.arange(nx, dtype=np.float32)
        self.y = self.origin_xyz[1] + sy * np.arange(ny, dtype=np.float32)
        self.z = self.origin_xyz[2] + sz * np.arange(nz, dtype=np.float32)
        self.hu = np.full(shape_zyx, TISSUE_HU["air"], dtype=np.float32)
        self.labels = np.zeros(shape_zyx, dtype=np.uint8)

    def box(self, lo: Iterable[float], hi: Iterable[float]) -> tuple[tuple[slice, slice, slice], np.ndarray, np.ndarray, np.ndarray] | None:
        """Index slices covering the physical box [lo, hi] (x, y, z) and the coordinates inside it."""
        (x0, y0, z0), (x1, y1, z1) = tuple(lo), tuple(hi)
        ranges = []
        for axis, a, b in ((self.z, z0, z1), (self.y, y0, y1), (self.x, x0, x1)):
            i0, i1 = int(np.searchsorted(axis, a, "left")), int(np.searchsorted(axis, b, "right"))
            if i1 <= i0:
                return None
            ranges.append(slice(i0, i1))
        zs, ys, xs = ranges
        return (zs, ys, xs), self.z[zs][:, None, None], self.y[ys][None, :, None], self.x[xs][None, None, :]

    def paint(self, region: tuple[tuple[slice, slice, slice], np.ndarray] | None, hu: float, label: int | None) -> None:
        if region is None:  # the shape lies outside this grid
            return
        slices, mask = region
        self.hu[slices][mask] = hu
        if label is not None:
            self.labels[slices][mask] = label


def _ellipsoid(canvas: Canvas, centre, semi, shrink: float = 0.0):
    """Voxels inside an axis-aligned ellipsoid; ``shrink`` mm thins it (for a cortical shell's inside)."""
    semi = np.maximum(np.asarray(semi, dtype=np.float32) - shrink, 0.1)
    centre = np.asarray(centre, dtype=np.float32)
    found = canvas.box(centre - semi, centre + semi)
    if found is None:
        return None
    slices, z, y, x = found
    rho = ((x - centre[0]) / semi[0]) ** 2 + ((y - centre[1]) / semi[1]) ** 2 + ((z - centre[2]) / semi[2]) ** 2
    return slices, rho <= 1.0


def _elliptic_cylinder(canvas: Canvas, centre_xy, semi_xy, z_range, shrink: float = 0.0, exponent: float = 2.0):
    """Voxels inside a (super)elliptic cylinder along z between z_range (mm)."""
    ax, ay = max(semi_xy[0] - shrink, 0.1), max(semi_xy[1] - shrink, 0.1)
    cx, cy = centre_xy
    found = canvas.box((cx - ax, cy - ay, z_range[0] + shrink), (cx + ax, cy + ay, z_range[1] - shrink))
    if found is None:
        return None
    slices, z, y, x = found
    inside = np.abs((x - cx) / ax) ** exponent + np.abs((y - cy) / ay) ** exponent <= 1.0
    return slices, np.broadcast_to(inside, (z.shape[0],) + inside.shape[1:])


def _paint_shelled(canvas: Canvas, shape_fn, cortex_mm: float, cortex_hu: float, inner_hu: float, label: int) -> None:
    """A bone: a dense cortical shell around trabecular bone (both labelled bone)."""
    outer = shape_fn(0.0)
    if outer is not None:
        canvas.paint(outer, cortex_hu, label)
    inner = shape_fn(cortex_mm)
    if inner is not None:
        canvas.paint(inner, inner_hu, label)


def _tube_distance(canvas: Canvas, points: np.ndarray, radii: np.ndarray, out: np.ndarray) -> None:
    """Fold a polyline tube into ``out``: the signed distance (mm) to its surface, minimum kept.

    Each segment only touches its own small bounding box, so long curved tubes (ribs)
    cost little.
    """
    for a, b, ra, rb in zip(points[:-1], points[1:], radii[:-1], radii[1:]):
        r = max(ra, rb)
        found = canvas.box(np.minimum(a, b) - r, np.maximum(a, b) + r)
        if found is None:
            continue
        slices, z, y, x = found
        ab = b - a
        length2 = float(ab @ ab) or 1e-6
        t = np.clip(((x - a[0]) * ab[0] + (y - a[1]) * ab[1] + (z - a[2]) * ab[2]) / length2, 0.0, 1.0)
        d = np.sqrt((x - a[0] - t * ab[0]) ** 2 + (y - a[1] - t * ab[1]) ** 2 + (z - a[2] - t * ab[2]) ** 2)
        signed = d - (ra + t * (rb - ra))
        np.minimum(out[slices], signed, out=out[slices])


# --- anatomy ---------------------------------------------------------------------------------

_BODY_SEMI = (155.0, 117.0)  # superellipse half-width / half-depth (mm)
_BODY_EXPONENT = 2.4  # > 2 gives the flatter sides and back of a torso
_FAT_MM = 14.0


def _draw_table(canvas: Canvas) -> None:
    """A curved carbon-fibre table: two dense shells around a foam core, 6 mm below the back."""
    found = canvas.box((-1e4, 120.0, -1e4), (1e4, 160.0, 1e4))
    if found is None:
        return
    slices, z, y, x = found
    top = 123.0 - 0.0006 * x**2  # curves up towards the patient at the sides
    depth = y - top
    shape = (z.shape[0], y.shape[1], x.shape[2])
    shell = np.broadcast_to(((depth >= 0) & (depth < 3.0)) | ((depth >= 15.0) & (depth < 18.0)), shape)
    foam = np.broadcast_to((depth >= 3.0) & (depth < 15.0), shape)
    canvas.paint((slices, foam), TISSUE_HU["table_foam"], _BACKGROUND)
    canvas.paint((slices, shell), TISSUE_HU["table_shell"], _BACKGROUND)


def _draw_body_wall(canvas: Canvas, z_range: tuple[float, float]) -> None:
    def body(shrink: float):
        return _elliptic_cylinder(canvas, (0.0, 0.0), _BODY_SEMI, z_range, shrink, _BODY_EXPONENT)

    canvas.paint(body(0.0), TISSUE_HU["fat"], _BODY)
    canvas.paint(body(_FAT_MM), TISSUE_HU["muscle"], _BODY)
    # the abdominal cavity is full of fat around the organs
    canvas.paint(_ellipsoid(canvas, (0.0, -15.0, 55.0), (115.0, 72.0, 75.0)), TISSUE_HU["visceral_fat"], _BODY)


def _draw_abdomen(canvas: Canvas, rng: np.random.Generator) -> None:
    paint = canvas.paint
    paint(_ellipsoid(canvas, (-60.0, -5.0, 105.0), (85.0, 75.0, 55.0)), TISSUE_HU["liver"], _LIVER)
    paint(_ellipsoid(canvas, (85.0, 35.0, 120.0), (28.0, 40.0, 40.0)), TISSUE_HU["spleen"], _BODY)
    for side in (-1.0, 1.0):
        paint(_ellipsoid(canvas, (side * 68.0, 45.0, 80.0 + 8.0 * side), (24.0, 20.0, 45.0)), TISSUE_HU["kidney"], _BODY)
    paint(_ellipsoid(canvas, (0.0, -45.0, 5.0), (45.0, 35.0, 30.0)), TISSUE_HU["bladder"], _BODY)
    # stomach with a gas cap at the front (patient supine): bowel gas the labeller must not call lung
    paint(_ellipsoid(canvas, (45.0, -35.0, 120.0), (35.0, 32.0, 30.0)), TISSUE_HU["stomach"], _BODY)
    gas = _ellipsoid(canvas, (45.0, -48.0, 122.0), (28.0, 16.0, 22.0))
    paint(gas, TISSUE_HU["air"], _BODY)
    # scattered gas in the bowel loops of the lower abdomen
    for _ in range(7):
        centre = (rng.uniform(-70, 70), rng.uniform(-70, 0), rng.uniform(30, 75))
        size = rng.uniform(6, 14)
        paint(_ellipsoid(canvas, centre, (size * 1.4, size, size * 1.2)), TISSUE_HU["air"], _BODY)


def _draw_chest(canvas: Canvas, rng: np.random.Generator) -> None:
    """Lungs (carved by the liver dome and the heart), lung vessels, heart, aorta and trachea."""
    shape = canvas.hu.shape
    lung_mask = np.zeros(shape, dtype=bool)
    for side in (-1.0, 1.0):
        region = _ellipsoid(canvas, (side * 70.0, 8.0, 185.0 - 5.0 * side), (52.0, 60.0, 100.0))
        if region is not None:
            lung_mask[region[0]] |= region[1]
    for carve_centre, carve_semi in (
        ((-60.0, -5.0, 105.0), (91.0, 81.0, 61.0)),  # the liver dome pushes up the right lung
        ((50.0, 0.0, 100.0), (70.0, 80.0, 50.0)),  # spleen/stomach under the left dome
        ((15.0, -25.0, 160.0), (60.0, 55.0, 50.0)),  # the heart
    ):
        region = _ellipsoid(canvas, carve_centre, carve_semi)
        if region is not None:
            lung_mask[region[0]] &= ~region[1]
    canvas.hu[lung_mask] = TISSUE_HU["lung"]
    canvas.labels[lung_mask] = _LUNGS

    # vessels fan out from each hilum; they are part of the lung label (as in TotalSegmentator)
    vessel_sdf = np.full(shape, np.inf, dtype=np.float32)
    for side in (-1.0, 1.0):
        hilum = np.array([side * 45.0, 5.0, 170.0], dtype=np.float32)
        for _ in range(22):
            direction = rng.normal(size=3) + np.array([side * 1.2, 0.0, 0.0])
            direction /= np.linalg.norm(direction)
            length = rng.uniform(40.0, 110.0)
            bend = rng.normal(scale=8.0, size=3)
            t = np.linspace(0.0, 1.0, 6, dtype=np.float32)[:, None]
            points = hilum + t * length * direction + np.sin(np.pi * t) * bend
            radii = np.linspace(3.5, 0.9, 6)
            _tube_distance(canvas, points.astype(np.float32), radii, vessel_sdf)
    vessels = (vessel_sdf <= 0) & lung_mask
    canvas.hu[vessels] = TISSUE_HU["blood"]

    canvas.paint(_ellipsoid(canvas, (15.0, -25.0, 160.0), (55.0, 50.0, 45.0)), TISSUE_HU["blood"], _BODY)
    z_top = float(canvas.z[-1]) + 10.0
    aorta = np.full(shape, np.inf, dtype=np.float32)
    _tube_distance(canvas, np.array([[22.0, 38.0, -20.0], [22.0, 38.0, 190.0], [10.0, -5.0, 215.0], [-5.0, -25.0, 195.0]], np.float32), np.full(4, 12.0), aorta)
    canvas.hu[aorta <= 0] = TISSUE_HU["blood"]
    canvas.labels[aorta <= 0] = _BODY
    def trachea(shrink: float):
        return _elliptic_cylinder(canvas, (0.0, -15.0), (10.0, 10.0), (200.0, z_top), shrink)

    canvas.paint(trachea(0.0), TISSUE_HU["muscle"], _BODY)
    canvas.paint(trachea(2.0), TISSUE_HU["air"], _BODY)


def _draw_skeleton(canvas: Canvas) -> None:
    cortical, trabecular = TISSUE_HU["cortical_bone"], TISSUE_HU["trabecular_bone"]
    z_first, z_last = float(canvas.z[0]) - 30.0, float(canvas.z[-1]) + 30.0
    # spine: vertebrae 22 mm tall with 6 mm discs, posterior arch, spinous and transverse processes
    z = -20.0
    while z < z_last:
        if z + 28.0 > z_first:
            lo, hi = z, z + 22.0
            canvas.paint(_elliptic_cylinder(canvas, (0.0, 50.0), (21.0, 16.0), (hi, hi + 6.0)), TISSUE_HU["disc"], _BODY)
            _paint_shelled(canvas, lambda s: _elliptic_cylinder(canvas, (0.0, 50.0), (21.0, 16.0), (lo, hi), s), 2.0, cortical, trabecular, _BONES)
            found = canvas.box((-15.0, 64.0, lo + 3.0), (15.0, 94.0, hi - 3.0))
            if found is not None:  # the arch: a ring around the spinal canal behind the vertebral body
                slices, zz, yy, xx = found
                r2 = xx**2 + (yy - 79.0) ** 2
                ring = np.broadcast_to((r2 > 9.0**2) & (r2 <= 15.0**2), (zz.shape[0], yy.shape[1], xx.shape[2]))
                canvas.paint((slices, ring), TISSUE_HU["posterior_elements"], _BONES)
            for box_lo, box_hi in (((-4.0, 92.0, lo + 4.0), (4.0, 104.0, hi - 4.0)), ((-42.0, 68.0, lo + 5.0), (42.0, 76.0, hi - 5.0))):
                found = canvas.box(box_lo, box_hi)
                if found is not None:
                    slices, zz, yy, xx = found
                    solid = np.ones((zz.shape[0], yy.shape[1], xx.shape[2]), dtype=bool)
                    if box_lo[0] < -10:  # transverse processes: leave the canal and vertebral body alone
                        solid &= np.abs(xx) > 14.0
                    canvas.paint((slices, solid), TISSUE_HU["posterior_elements"], _BONES)
        z += 28.0

    # ribs: tubes that follow the chest wall from the spine forwards and downwards
    rib_sdf = np.full(canvas.hu.shape, np.inf, dtype=np.float32)
    a_rib, b_rib = _BODY_SEMI[0] - 22.0, _BODY_SEMI[1] - 24.0
    for index, z_back in enumerate((228.0, 206.0, 184.0, 162.0, 140.0, 118.0)):
        phi_end = 2.75 if index < 4 else 2.3  # the lower ribs end short of the sternum
        phi = np.linspace(0.3, phi_end, 48, dtype=np.float32)
        for side in (-1.0, 1.0):
            points = np.stack(
                [side * a_rib * np.sin(phi), b_rib * np.cos(phi), z_back - 38.0 * (phi - 0.3) / (2.75 - 0.3)], axis=1
            )
            _tube_distance(canvas, points, np.full(len(phi), 5.5), rib_sdf)
    canvas.paint((np.s_[:, :, :], rib_sdf <= 0), cortical, _BONES)
    canvas.paint((np.s_[:, :, :], rib_sdf <= -1.6), trabecular, _BONES)

    _paint_shelled(canvas, lambda s: _elliptic_cylinder(canvas, (0.0, -88.0), (15.0, 6.5), (150.0, 240.0), s), 1.8, TISSUE_HU["dense_cortical_bone"], trabecular, _BONES)
    # pelvis: two iliac wings (flattened ellipsoids) and the sacrum
    for side in (-1.0, 1.0):
        _paint_shelled(canvas, lambda s: _ellipsoid(canvas, (side * 105.0, 35.0, 25.0), (10.0, 48.0, 40.0), s), 2.5, TISSUE_HU["dense_cortical_bone"], trabecular, _BONES)
    _paint_shelled(canvas, lambda s: _ellipsoid(canvas, (0.0, 72.0, 15.0), (45.0, 16.0, 32.0), s), 2.0, cortical, trabecular, _BONES)


def draw_torso(canvas: Canvas, rng: np.random.Generator) -> None:
    """Paint the table, the body wall, abdomen, chest and skeleton, in that order (later shapes win)."""
    z_range = (float(canvas.z[0]) - 10.0, float(canvas.z[-1]) + 10.0)  # the torso runs off both ends
    _draw_table(canvas)
    _draw_body_wall(canvas, z_range)
    _draw_abdomen(canvas, rng)
    _draw_chest(canvas, rng)
    _draw_skeleton(canvas)
