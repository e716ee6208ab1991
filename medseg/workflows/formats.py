"""The file formats a user names (by a file's suffix or a ``--format`` key), from the one table.

An interface offers these as choices and tells a format by a name here; the table itself, its
readers and writers are :mod:`medseg.io.formats`'s. Light: no image library is imported.
"""

from __future__ import annotations

import os

from medseg.io.formats import MESH_FORMATS, image_suffix, image_write_suffixes, segmentation_formats


def segmentation_format_keys() -> list[str]:
    """``--format``'s choices for a segmentation (nii.gz, nrrd, ..., dcm)."""
    return [f.key for f in segmentation_formats()]


def segmentation_suffixes() -> dict[str, str]:
    """A segmentation format's key -> the suffix its files are written with."""
    return {f.key: f.suffixes[0] for f in segmentation_formats()}


def is_image_file(path: str | os.PathLike) -> bool:
    """Named as an image file (not a DICOM folder or file)."""
    return image_suffix(path) is not None


__all__ = ["MESH_FORMATS", "image_suffix", "image_write_suffixes", "segmentation_formats", "segmentation_format_keys",
           "segmentation_suffixes", "is_image_file"]
