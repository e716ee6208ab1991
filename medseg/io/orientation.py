"""Exact reorientation (axis permutation and flips, no interpolation) to a canonical order.

A network trained on arrays learns where things are *in the array*: the liver of a RAS
NIfTI lies on the other side of the array from the liver of an LPS DICOM series. Models
trained by medseg therefore see every image in one orientation (``Plan.orientation``,
"LPS": array x towards the patient's left, y posterior, z superior), and the result is
put back onto the input's own grid. nnU-Net's arrays depend on its image reader: SimpleITKIO
and NibabelIO hand over the array as the file stores it (imported models keep
``orientation = None``), while NibabelIOWithReorient and SimpleITKIOWithReorient turn every
image to RAS first, so models trained through them (TotalSegmentator's among them) get
``orientation = "RAS"`` (medseg.model.nnunet_import.READER_ORIENTATION).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from medseg.core.volume import Volume
from medseg.errors import GeometryError

_AXIS_LETTERS = {"L": (0, 1), "R": (0, -1), "P": (1, 1), "A": (1, -1), "S": (2, 1), "I": (2, -1)}


@dataclass(frozen=True)
class Reorientation:
    """Output axis j (x, y, z) is input axis ``source[j]``, reversed where ``flip[j]``."""

    source: tuple[int, int, int]
    flip: tuple[bool, bool, bool]

    @property
    def is_identity(self) -> bool:
        return self.source == (0, 1, 2) and not any(self.flip)

    def zyx_axes(self) -> list[int]:
        return [2 - self.source[2 - k] for k in range(3)]  # output zyx axis k <- input zyx axis

    def apply(self, array: np.ndarray) -> np.ndarray:
        """Reorient a (..., z, y, x) array (leading axes, e.g. classes, are kept)."""
        lead = array.ndim - 3
        out = np.transpose(array, [*range(lead), *(lead + a for a in self.zyx_axes())])
        flips = [lead + 2 - j for j in range(3) if self.flip[j]]
        return np.ascontiguousarray(np.flip(out, flips) if flips else out)

    def undo(self, array: np.ndarray) -> np.ndarray:
        """Back from the reoriented grid to the input grid."""
        lead = array.ndim - 3
        flips = [lead + 2 - j for j in range(3) if self.flip[j]]
        unflipped = np.flip(array, flips) if flips else array
        inverse = np.argsort(self.zyx_axes())
        return np.ascontiguousarray(np.transpose(unflipped, [*range(lead), *(lead + int(a) for a in inverse)]))


def reorientation_to(volume: Volume, code: str = "LPS") -> Reorientation:
    """The permutation and flips that bring ``volume``'s array axes closest to ``code``."""
    code = code.upper()
    if sorted(_AXIS_LETTERS[c][0] for c in code if c in _AXIS_LETTERS) != [0, 1, 2] or len(code) != 3:
        raise GeometryError(f"'{code}' is not an orientation code (three of L/R, P/A, S/I, one per axis)")
    direction = volume.direction
    dominant = [int(np.argmax(np.abs(direction[:, i]))) for i in range(3)]  # world axis of each array axis
    if sorted(dominant) != [0, 1, 2]:
        raise GeometryError("the image axes are too oblique to tell which one is which")
    source, flip = [], []
    for letter in code:
        world, sign = _AXIS_LETTERS[letter]
        axis = dominant.index(world)
        source.append(axis)
        flip.append(bool(np.sign(direction[world, axis]) != sign))
    return Reorientation(tuple(source), tuple(flip))  # type: ignore[arg-type]


def reoriented(volume: Volume, change: Reorientation) -> Volume:
    """``volume`` on the reoriented grid: the same voxels at the same physical points."""
    if change.is_identity:
        return volume
    size = volume.size_xyz
    corner = [size[change.source[j]] - 1 if change.flip[j] else 0 for j in range(3)]
    start = [0, 0, 0]
    for j in range(3):
        start[change.source[j]] = corner[j]
    direction = np.stack([volume.direction[:, change.source[j]] * (-1.0 if change.flip[j] else 1.0)
                          for j in range(3)], axis=1)
    spacing = tuple(volume.spacing_mm[change.source[j]] for j in range(3))
    origin = tuple(float(v) for v in volume.index_to_physical(start))
    return Volume(change.apply(volume.array), spacing, origin, direction, volume.meta)
