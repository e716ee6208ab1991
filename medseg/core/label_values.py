"""Label values: 0 is background, labels run from 1 to MAX_LABEL_VALUE.

65535 because label maps in the field are uint16 as often as uint8 (TotalSegmentator-style
multi-class maps, atlases, DICOM SEG's segment numbers, foreign NIfTI): every layer — the
label map, the document, the viewer, the CLI's recipes, the file readers — accepts the same
range. Arrays are stored uint8 while every value fits and uint16 beyond.
"""

from __future__ import annotations

import numpy as np

from medseg.errors import MedsegError

MAX_LABEL_VALUE = 65535
MAX_UINT8_LABEL = 255


def label_dtype(max_value: int) -> np.dtype:
    """The narrowest array type that holds label values up to ``max_value`` (uint8 or uint16)."""
    if max_value < 0 or max_value > MAX_LABEL_VALUE:
        raise MedsegError(f"label value {max_value} is outside 0…{MAX_LABEL_VALUE}")
    return np.dtype(np.uint8) if max_value <= MAX_UINT8_LABEL else np.dtype(np.uint16)
