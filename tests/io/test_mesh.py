"""STL/OBJ surfaces lie where the mask lies in the patient (LPS), also on a tilted series."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from medseg.core.labels import Label
from medseg.io import load
from medseg.io.mesh_files import write_label_meshes


def read_binary_stl(path: Path) -> tuple[bytes, np.ndarray]:
    """(header, triangles (N, 3, 3)) parsed by the STL spec, independently of the writer."""
    data = path.read_bytes()
    (count,) = struct.unpack("<I", data[80:84])
    assert len(data) == 84 + 50 * count
    records = np.frombuffer(data[84:], dtype=np.dtype([("normal", "<f4", 3), ("v", "<f4", (3, 3)), ("attr", "<u2")]))
    return data[:80], records["v"].astype(np.float64)


@pytest.mark.parametrize("series", ["dcm_qa_ct/GE_HiSpeedDual_head_tilt_varspacing", "dcmqi_ct3slice_masks/image"])
def test_stl_bounding_box_is_the_masks_physical_box(ct_dir: Path, tmp_path: Path, series: str) -> None:
    image = load(ct_dir / series)
    labels = np.zeros(image.shape_zyx, dtype=np.uint8)
    labels[image.array > 300] = 1
    nz, ny, nx = image.shape_zyx
    labels[: max(1, nz // 2), ny // 3: ny // 2, nx // 4: nx // 2] = 4
    label_map = image.with_array(labels, labels={1: "bones", 4: "block"})
    results = write_label_meshes(label_map, tmp_path, fmt="stl")
    assert [r.value for r in results] == [1, 4]
    voxel = max(image.spacing_mm)
    enclosed_ml = {}
    for result in results:
        header, triangles = read_binary_stl(result.path)
        assert b"SPACE=LPS" in header
        z, y, x = np.nonzero(labels == result.value)
        centres = image.index_to_physical(np.column_stack([x, y, z]).astype(float))
        points = triangles.reshape(-1, 3)
        # The 0.5 iso-surface lies half a voxel outside the outermost voxel centres.
        assert np.all(np.abs(points.min(axis=0) - centres.min(axis=0)) <= voxel)
        assert np.all(np.abs(points.max(axis=0) - centres.max(axis=0)) <= voxel)
        # Outward faces: the enclosed volume is positive and close to the voxel volume.
        a, b, c = triangles[:, 0], triangles[:, 1], triangles[:, 2]
        enclosed_ml[result.value] = np.einsum("ij,ij->i", a, np.cross(b, c)).sum() / 6000.0
    assert enclosed_ml[1] > 0  # thin bone: only the sign (outward faces) is checked
    # the block is solid, so its surface encloses about its voxels' volume
    assert enclosed_ml[4] == pytest.approx(np.count_nonzero(labels == 4) * image.voxel_volume_ml, rel=0.1)


def test_obj_has_every_vertex_in_lps(ct_dir: Path, tmp_path: Path) -> None:
    image = load(ct_dir / "dcmqi_ct3slice_masks" / "image")
    labels = np.zeros(image.shape_zyx, dtype=np.uint8)
    labels[:, 100:200, 150:260] = 2
    (result,) = write_label_meshes(image.with_array(labels), tmp_path, {2: Label(2, "liver dome")}, fmt="obj")
    assert result.path.name == "2_liver_dome.obj"
    lines = result.path.read_text().splitlines()
    assert "LPS" in lines[0]
    vertices = np.array([[float(v) for v in line.split()[1:4]] for line in lines if line.startswith("v ")])
    low = image.index_to_physical([150, 100, 0]) - np.asarray(image.spacing_mm) / 2
    high = image.index_to_physical([259, 199, 2]) + np.asarray(image.spacing_mm) / 2
    assert np.allclose(vertices.min(axis=0), low, atol=1e-3) and np.allclose(vertices.max(axis=0), high, atol=1e-3)
