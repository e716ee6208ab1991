"""Whether a model folder the user chose (Segmentation ▸ Choose model…, or "Use this model" after a
training run) can be a model at all — a cheap look, no model is read.

The window asks it when a folder is chosen (a folder holding no model is refused then, not at the
next Segment) and each time it reads the stored choice (a chosen folder that is no longer there — a
run folder cleaned up, a moved disk — is forgotten, and Segment runs the built-in model again). The
choice itself is kept by :mod:`medseg.gui.segment.model_chooser`.
"""

from __future__ import annotations

from pathlib import Path


def missing_reason(path: str | Path) -> str | None:
    """Why ``path`` cannot be a model (None when it can)."""
    folder = Path(path)
    if not folder.exists():
        return "it is no longer there"
    if folder.is_file():
        return None if folder.suffix.lower() == ".zip" else "it is a file, not a model folder"
    from medseg.model.kinds import kind_of

    if kind_of(folder) is not None:  # the table of model kinds recognises it (their cheap look: names, small JSON)
        return None
    return ("it holds no model (no model.json, nor an nnU-Net plans.json and dataset.json, nor an exported .onnx "
            "file with its .onnx.json)")
