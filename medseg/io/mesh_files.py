"""A label map's surfaces written as mesh files, one per label, in a format of the table (STL, OBJ).

Above the table of formats (:mod:`medseg.io.formats`, whose mesh rows name :mod:`medseg.io.mesh`'s
encoders) and the meshing itself, which know nothing of each other's callers.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import numpy as np
from scipy import ndimage

from medseg.core.label_arrays import label_values
from medseg.core.labels import Label
from medseg.core.volume import Volume
from medseg.errors import MedsegError, SaveError
from medseg.io.atomic import atomic_write_bytes
from medseg.io.formats import MESH_FORMATS, mesh_format
from medseg.io.mesh import MeshResult, label_surface, safe_name


def write_label_meshes(label_map: Volume, folder: str | os.PathLike, table: Mapping[int, Label] | None = None,
                       fmt: str = "stl", values: list[int] | None = None) -> list[MeshResult]:
    """One mesh file per label value, ``<value>_<name>.<fmt>`` in ``folder`` (written atomically), named by
    ``table`` (default: the label map's own)."""
    import trimesh

    file_format = mesh_format(fmt)
    if file_format is None:
        raise MedsegError(f"unknown mesh format {fmt.lower().lstrip('.')!r}",
                          hint="use " + " or ".join(f.key for f in MESH_FORMATS))
    folder = Path(folder)
    if not folder.is_dir():
        raise SaveError("the folder does not exist", path=folder, hint="create it or choose another folder")
    table = table or label_map.meta.labels
    present = label_values(label_map.array)
    labels = np.asarray(label_map.array)
    boxes = ndimage.find_objects(labels if labels.dtype.kind in "ui" else labels.astype(np.int32))
    results = []
    for value in values if values is not None else present:
        box = boxes[value - 1] if 0 < value <= len(boxes) else None
        if box is None:
            continue
        vertices, faces = label_surface(label_map, value, box)
        if len(faces) == 0:
            continue
        name = table[value].name if value in table else f"label_{value}"
        mesh = trimesh.Trimesh(vertices=vertices, faces=faces, process=False)
        path = folder / f"{value}_{safe_name(name)}{file_format.suffix}"
        atomic_write_bytes(path, file_format.encode(mesh, name, value))
        lo, hi = vertices.min(axis=0), vertices.max(axis=0)
        results.append(MeshResult(value, name, path, len(vertices), len(faces),
                                  tuple(float(v) for v in lo), tuple(float(v) for v in hi)))  # type: ignore[arg-type]
    return results
