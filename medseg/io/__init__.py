"""Image input/output: the Volume type, DICOM discovery and loading, NIfTI/NRRD/MHA."""

from medseg.io.volume import GeometryFinding, Volume, VolumeMeta

__all__ = ["GeometryFinding", "Volume", "VolumeMeta"]
