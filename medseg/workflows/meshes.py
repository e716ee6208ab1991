"""Write one surface mesh per label (marching cubes), in LPS millimetres: ``medseg mesh`` and File ▸ Save as.

The formats are the one table's (:data:`medseg.io.formats.MESH_FORMATS`); the folder is created
and checked writable before any surface is computed.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

from medseg.core.labels import Label
from medseg.io.formats import MESH_FORMATS

DEFAULT_MESH_FORMAT = MESH_FORMATS[0].key


def mesh_folder(folder: str | os.PathLike) -> Path:
    """The folder for the mesh files: created when its parent exists, checked writable."""
    from medseg.workflows.outputs import output_folder

    return output_folder(folder, probe="probe.stl")


def write_meshes(label_map: Any, folder: str | os.PathLike, table: Mapping[int, Label],
                 fmt: str = DEFAULT_MESH_FORMAT) -> list[Any]:
    """One ``<value>_<name>.<fmt>`` per label of ``label_map`` (a Volume) in ``folder`` (checked first);
    a list of :class:`medseg.io.mesh_files.MeshResult`."""
    from medseg.io.mesh_files import write_label_meshes

    return write_label_meshes(label_map, mesh_folder(folder), table, fmt)


@dataclass(frozen=True)
class MeshRequest:
    """``medseg mesh``: a segmentation file opened onto its CT, one surface per label into ``folder``."""

    segmentation: str | os.PathLike
    study: Any  # medseg.workflows.studies.OpenStudyRequest
    folder: str | os.PathLike
    format: str = DEFAULT_MESH_FORMAT


@dataclass
class MeshResult:
    opened: Any  # medseg.workflows.studies.SegmentedStudy
    meshes: list[Any] = field(default_factory=list)  # medseg.io.mesh_files.MeshResult, one per label


def mesh_segmentation(request: MeshRequest) -> MeshResult:
    """The folder checked before the CT is read, then the segmentation opened onto it and meshed."""
    from medseg.workflows.studies import open_segmented_study

    folder = mesh_folder(request.folder)
    opened = open_segmented_study(request.study, request.segmentation)
    return MeshResult(opened, write_meshes(opened.segmentation.label_map, folder, opened.segmentation.labels,
                                             request.format))


__all__ = ["MESH_FORMATS", "DEFAULT_MESH_FORMAT", "mesh_folder", "write_meshes", "MeshRequest", "MeshResult",
           "mesh_segmentation"]
