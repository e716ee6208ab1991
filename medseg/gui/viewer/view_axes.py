"""Which array axes each slice view shows, and which way round (no Qt here).

Views are shown the way radiologists read them, whatever order the file stored its
voxels in: axial and coronal in radiological convention (patient's right on the
screen's left), axial with anterior up, coronal and sagittal with superior up,
sagittal with anterior on the left (as 3D Slicer and ITK-SNAP do). Flips are numpy
views with negative strides, so choosing a slice never copies the volume.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

VIEW_NAMES = ("axial", "coronal", "sagittal")

# For each view: the LPS component along its normal, the LPS component (and sign) that
# must point to the screen's right, and the one that must point down.
_CANONICAL = {
    "axial": (2, (0, +1), (1, +1)),  # right = patient L, down = P
    "coronal": (1, (0, +1), (2, -1)),  # right = patient L, down = I
    "sagittal": (0, (1, +1), (2, -1)),  # right = P, down = I
}
_LETTERS = {  # (left, right, top, bottom) edge letters
    "axial": ("R", "L", "A", "P"),
    "coronal": ("R", "L", "S", "I"),
    "sagittal": ("A", "P", "S", "I"),
}


def index_axes_to_lps(direction: np.ndarray) -> tuple[int, int, int]:
    """For each index axis (x, y, z), the LPS axis it runs closest to (a permutation)."""
    magnitude = np.abs(np.asarray(direction, dtype=float))
    best = max(itertools.permutations(range(3)), key=lambda perm: sum(magnitude[perm[i], i] for i in range(3)))
    return tuple(best)  # type: ignore[return-value]


@dataclass(frozen=True)
class ViewAxes:
    name: str
    normal_axis: int  # index axis (0 = x, 1 = y, 2 = z) that this view scrolls through
    horizontal_axis: int  # index axis along the screen's columns
    vertical_axis: int  # index axis along the screen's rows
    flip_horizontal: bool
    flip_vertical: bool
    letters: tuple[str, str, str, str]  # left, right, top, bottom

    def slice_of(self, array_zyx: np.ndarray, position: int) -> np.ndarray:
        """The 2D (rows, columns) view of ``array_zyx`` at ``position`` along the normal."""
        index: list[slice | int] = [slice(None)] * 3
        index[2 - self.normal_axis] = position
        return self.orient(array_zyx[tuple(index)])

    def orient(self, plane: np.ndarray) -> np.ndarray:
        """A plane as numpy indexing leaves it (remaining axes in z, y, x order) turned to the screen."""
        # The remaining numpy axes are the index axes in descending order (z, y, x).
        first_index_axis = max(a for a in range(3) if a != self.normal_axis)
        if first_index_axis != self.vertical_axis:
            plane = plane.T
        if self.flip_vertical:
            plane = plane[::-1, :]
        if self.flip_horizontal:
            plane = plane[:, ::-1]
        return plane

    def shape_of(self, size_xyz: tuple[int, int, int]) -> tuple[int, int]:
        """(columns, rows) of this view's image."""
        return size_xyz[self.horizontal_axis], size_xyz[self.vertical_axis]

    def pixel_to_index(self, column: float, row: float, position: int, size_xyz: tuple[int, int, int]) -> tuple[float, float, float]:
        xyz = [0.0, 0.0, 0.0]
        xyz[self.normal_axis] = float(position)
        n_columns, n_rows = self.shape_of(size_xyz)
        xyz[self.horizontal_axis] = (n_columns - 1 - column) if self.flip_horizontal else column
        xyz[self.vertical_axis] = (n_rows - 1 - row) if self.flip_vertical else row
        return tuple(xyz)  # type: ignore[return-value]

    def index_to_pixel(self, xyz: tuple[float, float, float], size_xyz: tuple[int, int, int]) -> tuple[float, float]:
        n_columns, n_rows = self.shape_of(size_xyz)
        column = xyz[self.horizontal_axis]
        row = xyz[self.vertical_axis]
        return (
            (n_columns - 1 - column) if self.flip_horizontal else column,
            (n_rows - 1 - row) if self.flip_vertical else row,
        )

    def pixel_spacing(self, spacing_xyz: tuple[float, float, float]) -> tuple[float, float]:
        """Millimetres per (column, row): what makes anisotropic voxels look right."""
        return spacing_xyz[self.horizontal_axis], spacing_xyz[self.vertical_axis]


def view_axes(name: str, direction: np.ndarray) -> ViewAxes:
    """How the view ``name`` ("axial", "coronal", "sagittal") shows a volume with ``direction``."""
    normal_lps, (right_lps, right_sign), (down_lps, down_sign) = _CANONICAL[name]
    lps_of = index_axes_to_lps(direction)
    axis_for = {lps: index for index, lps in enumerate(lps_of)}
    horizontal, vertical = axis_for[right_lps], axis_for[down_lps]
    direction = np.asarray(direction, dtype=float)
    return ViewAxes(
        name=name,
        normal_axis=axis_for[normal_lps],
        horizontal_axis=horizontal,
        vertical_axis=vertical,
        flip_horizontal=bool(np.sign(direction[right_lps, horizontal]) != right_sign),
        flip_vertical=bool(np.sign(direction[down_lps, vertical]) != down_sign),
        letters=_LETTERS[name],
    )
