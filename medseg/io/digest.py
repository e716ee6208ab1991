"""The SHA-256 of a file, read in blocks (hashlib's own ``file_digest``): one function for every record
that names a file by its content (model checkpoints, catalogue installs and packs, segmentation sidecars)."""

from __future__ import annotations

import hashlib
import os


def sha256_file(path: str | os.PathLike) -> str:
    with open(path, "rb") as stream:
        return hashlib.file_digest(stream, "sha256").hexdigest()


__all__ = ["sha256_file"]
