"""Read a PyTorch ``.pth`` checkpoint without ever running code from it.

A ``.pth`` file is a pickle, and unpickling can call any importable function (the classic
``__reduce__`` -> ``os.system`` exploit). nnU-Net itself loads with
``weights_only=False``. medseg uses ``torch.load(weights_only=True)``, whose unpickler
only builds tensors and plain containers, plus a minimal allow-list for the numpy
scalars that nnU-Net's training log stores. Before loading, the file's globals are listed
without executing anything, so a refusal can name what the file wanted to import.
"""

from __future__ import annotations

import pickle
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from medseg.errors import ModelError, UnsafeModelError

# numpy scalars/dtypes in nnU-Net's 'logging' and '_best_ema' entries. Reconstructing them
# only interprets bytes as a number; they cannot call anything else.
_NUMPY_SCALAR = np._core.multiarray.scalar  # type: ignore[attr-defined]
_ALLOWED_EXTRA_GLOBALS: list[Any] = [
    (_NUMPY_SCALAR, "numpy.core.multiarray.scalar"),
    (_NUMPY_SCALAR, "numpy._core.multiarray.scalar"),
    np.dtype,
    *[(type(np.dtype(code)), f"numpy.dtypes.{type(np.dtype(code)).__name__}")
      for code in ("f8", "f4", "f2", "i8", "i4", "i2", "i1", "u1", "u2", "u4", "u8", "b1")],
]


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """The checkpoint dict, loaded with weights_only=True; refuses anything that could run code."""
    path = Path(path)
    if not path.is_file():
        raise ModelError("checkpoint file not found", path=path)
    if not zipfile.is_zipfile(path):
        # Legacy (pre-1.6) torch files are raw pickles; torch's weights_only loader reads
        # them too, but nnU-Net v2 never wrote them, so this is probably not a checkpoint.
        raise ModelError("not a PyTorch checkpoint (expected a torch.save zip archive)", path=path)
    try:
        requested = set(torch.serialization.get_unsafe_globals_in_checkpoint(str(path)))
    except Exception as error:  # a damaged archive, or pickle opcodes torch cannot scan
        raise UnsafeModelError(f"checkpoint cannot be checked safely: {error}", path=path) from error
    allowed_names = {name for entry in _ALLOWED_EXTRA_GLOBALS for name in _names(entry)}
    forbidden = sorted(requested - allowed_names)
    if forbidden:
        raise UnsafeModelError(
            f"checkpoint refers to code that loading would run or import: {', '.join(forbidden)}",
            path=path,
            hint="only plain weight files are accepted; if you trust its source, convert it with nnU-Net's tools",
        )
    try:
        with torch.serialization.safe_globals(_ALLOWED_EXTRA_GLOBALS):
            checkpoint = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as error:
        raise UnsafeModelError(f"checkpoint was refused by the safe loader: {_first_line(error)}", path=path) from error
    except (RuntimeError, EOFError, OSError, zipfile.BadZipFile) as error:
        raise ModelError(f"checkpoint cannot be read: {_first_line(error)}", path=path) from error
    if not isinstance(checkpoint, dict):
        raise ModelError(f"checkpoint holds a {type(checkpoint).__name__}, expected a dict", path=path)
    return checkpoint


def _names(entry: Any) -> list[str]:
    if isinstance(entry, tuple):
        return [entry[1]]
    return [f"{entry.__module__}.{entry.__qualname__}"]


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
