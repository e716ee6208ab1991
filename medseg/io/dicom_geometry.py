"""Slice ordering and geometry checks for a stack of DICOM images.

Slices are sorted by the projection of Image Position (Patient) on the slice normal
(never by file name or instance number). The checks report, never silently fix:
gantry tilt (stacking direction not parallel to the normal), missing slices (a gap
greater than 1.5x the typical spacing), variable spacing, duplicate positions and
single slices.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from medseg.core.volume import GeometryFinding
from medseg.io.dicom_headers import SliceHeader

DUPLICATE_TOLERANCE_MM = 0.01
GAP_FACTOR = 1.5  # a step larger than this times the typical spacing is a gap
TILT_MIN_DEGREES = 0.1


@dataclass
class StackGeometry:
    slices: list[SliceHeader]  # sorted along the normal
    row: np.ndarray  # unit vector of increasing column index (x)
    col: np.ndarray  # unit vector of increasing row index (y)
    normal: np.ndarray  # row x col
    along_normal: np.ndarray  # each slice's position projected on the normal (sorted, mm)
    spacing_mm: tuple[float, float, float]  # (x, y, typical z step)
    origin_mm: tuple[float, float, float]
    findings: list[GeometryFinding] = field(default_factory=list)
    tilt_degrees: float = 0.0
    needs_regularization: bool = False
    not_a_volume: str | None = None  # why the stack is not a volume, if it is not

    @property
    def direction(self) -> np.ndarray:
        return np.column_stack([self.row, self.col, self.normal])


def _unit(vector: np.ndarray) -> np.ndarray:
    return vector / np.linalg.norm(vector)


def analyze_stack(slices: list[SliceHeader], gantry_tilt_tag: float | None = None) -> StackGeometry:
    """Sort the slices and describe the stack's geometry (findings included)."""
    first = slices[0]
    if first.orientation is not None:
        row = _unit(first.orientation[:3])
        col = first.orientation[3:]
        col = _unit(col - row * float(np.dot(row, col)))  # re-orthogonalise rounded cosines
    else:
        row, col = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.0])
    normal = np.cross(row, col)
    spacing_y, spacing_x = first.pixel_spacing or (1.0, 1.0)
    findings: list[GeometryFinding] = []
    if first.orientation is None:
        findings.append(GeometryFinding(
            "no_orientation", "Image Orientation (Patient) is missing; the images are taken as axial slices (rows "
                              "right to left, columns front to back). Check the orientation.", {}))
    stated = first.extra.get("pixel_spacing_stated")
    if stated is not None:
        findings.append(GeometryFinding(
            "unusable_spacing", f"The Pixel Spacing in the header is '{stated}', not two positive numbers: distances "
                                "and volumes cannot be measured.", {"pixel_spacing": stated}))
    elif first.pixel_spacing is None:
        findings.append(GeometryFinding("no_pixel_spacing", "Pixel Spacing is missing; 1 mm is assumed, so "
                                                            "distances and volumes may be wrong."))

    have_positions = all(s.position is not None for s in slices)
    if not have_positions:
        # Without positions the order is the instance number's; the geometry is a guess.
        ordered = sorted(slices, key=lambda s: (s.instance_number is None, s.instance_number or 0))
        findings.append(GeometryFinding(
            "no_position", "Image Position (Patient) is missing; slices are ordered by instance number "
            "and placed 1 mm apart.", {}))
        along = np.arange(len(ordered), dtype=np.float64)
        geometry = StackGeometry(ordered, row, col, normal, along, (spacing_x, spacing_y, 1.0),
                                 (0.0, 0.0, 0.0), findings)
        if len(ordered) == 1:
            _single(geometry, gantry_tilt_tag)
        return geometry

    along_all = np.array([float(np.dot(s.position, normal)) for s in slices])
    order = np.argsort(along_all, kind="stable")
    ordered = [slices[i] for i in order]
    along = along_all[order]
    origin = tuple(float(v) for v in ordered[0].position)
    geometry = StackGeometry(ordered, row, col, normal, along, (spacing_x, spacing_y, 1.0), origin, findings)
    if len(ordered) == 1:
        _single(geometry, gantry_tilt_tag)
        return geometry

    steps = np.diff(along)
    duplicates = int(np.sum(steps < DUPLICATE_TOLERANCE_MM))
    if duplicates:
        distinct = len(ordered) - duplicates
        geometry.not_a_volume = (
            f"{duplicates + 1 if distinct == 1 else duplicates} of {len(ordered)} images share a position "
            f"({distinct} distinct position{'s' if distinct != 1 else ''}): this is a time series or "
            "repeated scan, not a 3D volume")
        findings.append(GeometryFinding("duplicate_positions", geometry.not_a_volume,
                                        {"n_images": len(ordered), "n_distinct_positions": distinct}))
        geometry.spacing_mm = (spacing_x, spacing_y, float(np.max(steps)) if np.max(steps) > 0 else 1.0)
        return geometry

    typical = float(np.median(steps))
    geometry.spacing_mm = (spacing_x, spacing_y, typical)
    _check_tilt(geometry, gantry_tilt_tag)
    _check_spacing(geometry, steps, typical)
    return geometry


def _single(geometry: StackGeometry, gantry_tilt_tag: float | None) -> None:
    details: dict = {}
    message = "Only one image: a single slice, not a 3D volume; slice spacing is set to 1 mm."
    if gantry_tilt_tag:
        details["gantry_detector_tilt_deg"] = gantry_tilt_tag
        message += f" The header records a gantry tilt of {gantry_tilt_tag:g} degrees."
    geometry.findings.append(GeometryFinding("single_slice", message, details))


def _check_tilt(geometry: StackGeometry, gantry_tilt_tag: float | None) -> None:
    first = geometry.slices[0].position
    last = geometry.slices[-1].position
    stacking = _unit(last - first)
    cos_angle = min(1.0, abs(float(np.dot(stacking, geometry.normal))))
    angle = math.degrees(math.acos(cos_angle))
    shear_mm = float(np.linalg.norm((last - first) - geometry.normal * np.dot(last - first, geometry.normal)))
    # Rounded positions give tiny spurious angles; a real tilt shears the stack by > half a pixel.
    if angle > TILT_MIN_DEGREES and shear_mm > 0.5 * min(geometry.spacing_mm[:2]):
        geometry.tilt_degrees = angle
        # The message is for a clinician; where the angle was read from stays in the details.
        geometry.findings.append(GeometryFinding(
            "gantry_tilt",
            f"The gantry was tilted {angle:.1f}° for this scan" + ("." if gantry_tilt_tag else
                                                                     " (seen in the image orientation only)."),
            {"angle_deg": round(angle, 3), "gantry_detector_tilt_deg": gantry_tilt_tag,
             "shear_mm": round(shear_mm, 3),
             "source": "GantryDetectorTilt tag" if gantry_tilt_tag else "ImageOrientationPatient only"}))
        geometry.needs_regularization = True


def _check_spacing(geometry: StackGeometry, steps: np.ndarray, typical: float) -> None:
    tolerance = max(0.02, 0.01 * typical)
    gaps = [i for i, step in enumerate(steps) if step > GAP_FACTOR * typical]
    missing_positions = []
    irregular_gaps = []
    for i in gaps:
        ratio = steps[i] / typical
        if abs(ratio - round(ratio)) < 0.15:  # a whole number of slices is missing
            missing_positions.append((i, int(round(ratio)) - 1))
        else:
            irregular_gaps.append(i)
    if missing_positions:
        n_missing = sum(n for _, n in missing_positions)
        geometry.findings.append(GeometryFinding(
            "missing_slices",
            f"{n_missing} slice{'s are' if n_missing != 1 else ' is'} missing: a gap of "
            + ", ".join(f"{steps[i]:.1f} mm after slice {i + 1}" for i, _ in missing_positions)
            + f" (slices are otherwise {typical:.2f} mm apart).",
            {"n_missing": n_missing, "after_slice_index": [i for i, _ in missing_positions],
             "gap_mm": [round(float(steps[i]), 3) for i, _ in missing_positions], "typical_mm": round(typical, 4)}))
        geometry.needs_regularization = True
    regular_steps = np.delete(steps, [i for i, _ in missing_positions])
    deviation = np.abs(regular_steps - typical)
    if np.any(deviation > tolerance):
        geometry.findings.append(GeometryFinding(
            "variable_spacing",
            f"The slices are unevenly spaced: {regular_steps.min():.2f} to {regular_steps.max():.2f} mm apart "
            f"(mostly {typical:.2f} mm).",
            {"min_mm": round(float(regular_steps.min()), 4), "max_mm": round(float(regular_steps.max()), 4),
             "typical_mm": round(typical, 4), "distinct_steps_mm": sorted({round(float(s), 2) for s in steps})}))
        geometry.needs_regularization = True
