"""What is at a path, before anything is opened: the series (or image file) there, with their geometry.

``medseg info`` lists these; an image file is described from its header alone (no voxel read), a
DICOM folder, files, a .zip or a DICOMDIR are scanned (:func:`medseg.io.scan`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from medseg.errors import DicomError


def _image_file_entry(path: str) -> dict[str, Any]:
    from medseg.io.image_files import describe_image

    header = describe_image(path)  # the header only: no voxel is read
    return {
        "key": str(path),
        "series_uid": "",
        "modality": "",
        "series_description": Path(path).name,
        "kind": "image_file",
        "loadable": header["components"] == 1,
        "n_files": 1,
        "n_slices": header["size_xyz"][2],
        "size_xyz": list(header["size_xyz"]),
        "spacing_mm": [round(v, 6) for v in header["spacing_mm"]],
        "origin_mm": [round(v, 6) for v in header["origin_mm"]],
        "direction": [round(float(v), 6) for v in header["direction"].reshape(-1)],
        "transfer_syntaxes": [],
        "dtype": header["dtype"],
        "findings": [{"kind": f.kind, "message": f.message, "details": f.details} for f in header["findings"]],
    }


def describe_sources(paths: list[str]) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """(series entries, skipped files) for the given paths; no series at all is refused, with why."""
    from medseg.io import scan
    from medseg.io.image_files import image_suffix

    if len(paths) == 1 and image_suffix(paths[0]) is not None and Path(paths[0]).exists() \
            and not Path(paths[0]).is_dir():
        return [_image_file_entry(paths[0])], []
    result = scan(paths if len(paths) > 1 else paths[0])
    if not result.series:
        reasons = "; ".join(f"{Path(k.path).name}: {k.reason}" for k in result.skipped[:5])
        raise DicomError("no DICOM image series found" + (f" ({reasons})" if reasons else " (no files)"),
                         path=paths[0] if len(paths) == 1 else None,
                         hint="give a folder with DICOM files, a .zip, a DICOMDIR or a NIfTI/NRRD/MHA file")
    skipped = [{"path": k.path, "reason": k.reason} for k in result.skipped]
    return [s.to_dict() for s in result.series], skipped


def transfer_syntax_name(uid: str) -> str:
    """A transfer syntax UID in words (e.g. "JPEG 2000 Lossless")."""
    from medseg.io.dicom_decode import syntax_name

    return syntax_name(uid)


__all__ = ["describe_sources", "transfer_syntax_name"]
