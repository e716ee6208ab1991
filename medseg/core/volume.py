"""The one image type that crosses every layer boundary.

Arrays are stored (z, y, x). Geometry follows ITK/DICOM conventions in LPS patient
coordinates and ITK axis order: ``spacing_mm``, ``origin_mm`` are (x, y, z) and
``direction`` is a 3x3 matrix whose *columns* are the unit vectors of the x (column),
y (row) and z (slice) index axes. A voxel index (i, j, k) = (x, y, z) maps to the
physical point ``origin + direction @ (spacing * (i, j, k))``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from medseg.core.labels import Label
from medseg.errors import GeometryError

if TYPE_CHECKING:  # SimpleITK is imported where it is used: it costs ~0.3 s, and a viewer needs none of it
    import SimpleITK as sitk


@dataclass(frozen=True)
class GeometryFinding:
    """Something about a series' geometry the user must be told (never silent)."""

    kind: str  # "gantry_tilt", "missing_slices", "variable_spacing", "duplicate_positions",
    #            "single_slice", "regularized", "localizer_excluded", "non_image_skipped", ...
    message: str  # one sentence for the user
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class VolumeMeta:
    """Source facts kept with the voxels (for display, DICOM SEG export and provenance)."""

    modality: str = ""
    study_uid: str = ""
    series_uid: str = ""
    frame_of_reference_uid: str = ""
    sop_class_uid: str = ""
    sop_instance_uids: list[str] = field(default_factory=list)  # in slice (z) order
    source_files: list[str] = field(default_factory=list)  # in slice (z) order
    patient_name: str = ""  # for display only: never logged
    patient_id: str = ""  # for display only: never logged
    study_description: str = ""
    series_description: str = ""
    series_number: str = ""
    study_date: str = ""
    manufacturer: str = ""
    window_center: float | None = None  # the DICOM header's default window, if any
    window_width: float | None = None
    transfer_syntaxes: list[str] = field(default_factory=list)
    findings: list[GeometryFinding] = field(default_factory=list)
    labels: dict[int, Label] = field(default_factory=dict)  # for label maps: value -> its label (names accepted)
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.labels = {int(value): label if isinstance(label, Label) else Label(int(value), str(label or ""))
                       for value, label in self.labels.items()}


def _as_direction(direction: Any) -> np.ndarray:
    matrix = np.asarray(direction, dtype=np.float64).reshape(3, 3)
    return matrix


@dataclass
class Volume:
    array: np.ndarray  # (z, y, x)
    spacing_mm: tuple[float, float, float] = (1.0, 1.0, 1.0)  # (x, y, z)
    origin_mm: tuple[float, float, float] = (0.0, 0.0, 0.0)  # (x, y, z), LPS
    direction: np.ndarray = field(default_factory=lambda: np.eye(3))  # columns = index axes in LPS
    meta: VolumeMeta = field(default_factory=VolumeMeta)

    def __post_init__(self) -> None:
        if self.array.ndim != 3:
            raise GeometryError(f"a Volume needs a 3D (z, y, x) array, got shape {self.array.shape}")
        self.spacing_mm = tuple(float(s) for s in self.spacing_mm)  # type: ignore[assignment]
        self.origin_mm = tuple(float(o) for o in self.origin_mm)  # type: ignore[assignment]
        self.direction = _as_direction(self.direction)
        if any(s <= 0 for s in self.spacing_mm):
            raise GeometryError(f"voxel spacing must be positive, got {self.spacing_mm}")

    # --- shape and spacing in both orders -------------------------------------------------
    @property
    def shape_zyx(self) -> tuple[int, int, int]:
        return tuple(int(n) for n in self.array.shape)  # type: ignore[return-value]

    @property
    def size_xyz(self) -> tuple[int, int, int]:
        return tuple(int(n) for n in self.array.shape[::-1])  # type: ignore[return-value]

    @property
    def spacing_zyx(self) -> tuple[float, float, float]:
        return tuple(self.spacing_mm[::-1])  # type: ignore[return-value]

    @property
    def voxel_volume_ml(self) -> float:
        sx, sy, sz = self.spacing_mm
        return sx * sy * sz / 1000.0

    # --- index <-> physical -----------------------------------------------------------------
    def index_to_physical(self, index_xyz: Any) -> np.ndarray:
        """Continuous (x, y, z) index (or an (N, 3) array of them) to LPS millimetres."""
        idx = np.asarray(index_xyz, dtype=np.float64)
        scaled = idx * np.asarray(self.spacing_mm)
        return np.asarray(np.asarray(self.origin_mm) + scaled @ self.direction.T)

    def physical_to_index(self, point_lps: Any) -> np.ndarray:
        """LPS millimetres (or an (N, 3) array) to continuous (x, y, z) index."""
        p = np.asarray(point_lps, dtype=np.float64) - np.asarray(self.origin_mm)
        return np.asarray((p @ np.linalg.inv(self.direction).T) / np.asarray(self.spacing_mm))

    def same_grid(self, other: "Volume", tol: float = 1e-3) -> bool:
        """True when both volumes have the same size, spacing, origin and direction."""
        return (
            self.shape_zyx == other.shape_zyx
            and np.allclose(self.spacing_mm, other.spacing_mm, atol=tol)
            and np.allclose(self.origin_mm, other.origin_mm, atol=tol)
            and np.allclose(self.direction, other.direction, atol=tol)
        )

    def with_array(self, array: np.ndarray, **meta_changes: Any) -> "Volume":
        """A new Volume on the same grid (e.g. a label map for this image)."""
        if tuple(array.shape) != self.shape_zyx:
            raise GeometryError(f"array shape {array.shape} does not match the volume's {self.shape_zyx}")
        meta = dataclasses.replace(self.meta, **meta_changes) if meta_changes else dataclasses.replace(self.meta)
        return Volume(array, self.spacing_mm, self.origin_mm, self.direction.copy(), meta)

    # --- SimpleITK ----------------------------------------------------------------------------
    def to_sitk(self) -> sitk.Image:
        import SimpleITK as sitk

        image = sitk.GetImageFromArray(np.ascontiguousarray(self.array))
        image.SetSpacing(self.spacing_mm)
        image.SetOrigin(self.origin_mm)
        image.SetDirection(tuple(self.direction.reshape(-1)))
        return image

    @classmethod
    def from_sitk(cls, image: sitk.Image, meta: VolumeMeta | None = None) -> "Volume":
        import SimpleITK as sitk

        if image.GetDimension() != 3:
            if image.GetDimension() == 2:
                image = sitk.JoinSeries(image)
            else:
                raise GeometryError(f"expected a 3D image, got {image.GetDimension()}D")
        if image.GetNumberOfComponentsPerPixel() != 1:
            raise GeometryError("colour/vector images are not CT volumes")
        return cls(
            sitk.GetArrayFromImage(image),
            image.GetSpacing(),
            image.GetOrigin(),
            np.asarray(image.GetDirection()).reshape(3, 3),
            meta or VolumeMeta(),
        )

    def __repr__(self) -> str:
        return (
            f"Volume(size_xyz={self.size_xyz}, spacing_mm={tuple(round(s, 4) for s in self.spacing_mm)}, "
            f"dtype={self.array.dtype}, modality={self.meta.modality!r})"
        )
