"""De-identified research exports: the user's key, the de-identifier it makes, the re-identification mapping.

``medseg batch --deidentify`` and File ▸ Save as (de-identified) ask here; the rules (which tags,
how identifiers are replaced, the sealed mapping) are :mod:`medseg.io.deidentify`'s.
"""

from __future__ import annotations

import os
from typing import Iterable

from medseg.io.deidentify import (  # light: the rules and the key, no image library
    DeidentificationKeyError,
    Deidentifier,
    deidentified_series_folder,
    write_mapping,
)


def open_deidentifier(key_file: str | os.PathLike, forbidden_under: Iterable[str | os.PathLike] = ()
                      ) -> tuple[Deidentifier, bool]:
    """The de-identifier of the key in ``key_file`` (created there when the file does not exist yet: the
    bool says so); a key inside ``forbidden_under`` (e.g. the output folder) is refused."""
    from medseg.io.deidentify import load_or_create_key

    key, created = load_or_create_key(key_file, forbidden_under=list(forbidden_under))
    return Deidentifier(key), created


__all__ = ["Deidentifier", "DeidentificationKeyError", "deidentified_series_folder", "write_mapping",
           "open_deidentifier"]
