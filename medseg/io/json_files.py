"""The one way medseg reads a JSON file a user may have handed it (a sidecar, a model's or a
dataset's description, a session record): any failure is a MedsegError naming the file.

``json.loads`` raises JSONDecodeError on garbage, RecursionError on 100 000 nested brackets,
UnicodeDecodeError on binary; a list where an object belongs makes the caller's ``.get``
raise AttributeError. All of them become the caller's error type with the file's name, and
a file far larger than any such description is refused before it is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from medseg.errors import MedsegError

MAX_JSON_BYTES = 16 << 20  # descriptions are kilobytes; a training manifest of 10 000 cases is ~2 MB


def parse_json_object(data: bytes | str, path: str | os.PathLike | None, what: str,
                      error_type: type[MedsegError] = MedsegError) -> dict[str, Any]:
    try:
        value = json.loads(data)
    except (UnicodeDecodeError, ValueError) as error:  # JSONDecodeError is a ValueError
        raise error_type(f"the {what} is not valid JSON ({error})"[:300], path=path) from error
    except RecursionError:
        raise error_type(f"the {what} is nested too deeply to be valid", path=path) from None
    if not isinstance(value, dict):
        raise error_type(f"the {what} must be a JSON object, not {type(value).__name__}", path=path)
    return value


def read_json_object(path: str | os.PathLike, what: str, error_type: type[MedsegError] = MedsegError,
                     max_bytes: int = MAX_JSON_BYTES) -> dict[str, Any]:
    """The JSON object in ``path`` (``what`` names it in messages: "label-name sidecar", ...)."""
    path = Path(path)
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise error_type(f"the {what} is {size / 2**20:.0f} MiB, far larger than any valid one", path=path)
        data = path.read_bytes()
    except OSError as error:
        raise error_type(f"cannot read the {what} ({error.strerror or error})", path=path) from error
    return parse_json_object(data, path, what, error_type)
