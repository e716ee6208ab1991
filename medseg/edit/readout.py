"""Reading the document at a voxel: the value, the label, the position in mm; voxel and label volumes.

A part of :class:`~medseg.edit.document.SegmentationDocument` (which inherits it); it only reads ``volume``
and ``label_map``.
"""

from __future__ import annotations

from typing import Any

import numpy as np


class VoxelReadout:
    def voxel_ml(self) -> float:
        """The volume of one voxel of the open image, in ml (0 without an image)."""
        if self.volume is None:
            return 0.0
        return float(np.prod(self.volume.spacing_mm)) / 1000.0

    def label_volumes_ml(self) -> dict[int, float]:
        """Volume of every label value in ml, kept current from the edit deltas (no recount)."""
        if self.label_map is None:
            return {}
        return self.label_map.volumes_ml()

    def clamp(self, xyz: Any) -> tuple[int, int, int]:
        """The voxel index (x, y, z) nearest to ``xyz`` inside the image."""
        if self.volume is None:
            return (0, 0, 0)
        size = self.volume.size_xyz
        return tuple(int(min(max(int(round(v)), 0), n - 1)) for v, n in zip(xyz, size))  # type: ignore[return-value]

    def value_at(self, xyz: tuple[int, int, int]) -> float | None:
        if self.volume is None:
            return None
        x, y, z = self.clamp(xyz)
        return float(self.volume.array[z, y, x])

    def label_at(self, xyz: tuple[int, int, int]) -> int | None:
        if self.label_map is None:
            return None
        x, y, z = self.clamp(xyz)
        return int(self.label_map.array[z, y, x])

    def physical_at(self, xyz: tuple[float, float, float]) -> np.ndarray | None:
        if self.volume is None:
            return None
        return self.volume.index_to_physical(xyz)
