"""DICOM Segmentation (SEG) objects, written and read with highdicom, exact in patient space.

Writing (:func:`medseg.io.dicom_seg_write.write_dicom_seg`): a BINARY SEG that references the source series, with
one segment per label (label, CIELab colour, the label's coded category/type with its modifier
and anatomic region — DCM "Unspecified" for a label nobody coded —, algorithm type and
identification). Which frames reference what depends on the grid the label map lives on:

- **acquired grid** (the usual case, and a raw stack kept as acquired): frame *k* is label
  slice *k*; it carries its source image's own Image Position/Orientation and references
  that image (Derivation Image Sequence). Exact by construction.
- **regularised grid** (medseg resampled a tilted / gapped / variably spaced series onto a
  regular grid, see :mod:`medseg.io.regularize`): the mask is *not* resampled back onto
  the acquired slices (that would be a second interpolation and lose voxels drawn
  between acquired planes). Frames are written on the regular grid, each with its own
  Plane Position, and reference the source series (Referenced Series Sequence) but no
  single source image. Image Comments record what was regularised and how. Any reader
  that places frames by their positions (highdicom, 3D Slicer, medseg) puts every voxel
  exactly where it was drawn.

Segment numbers must run 1..N in DICOM, so segment *n* holds the *n*-th label value in
ascending order; each segment's Segment Description (0062,0006, a standard attribute)
records its label value as ``medseg label value V``, and the reader gives the segments
those values back. Names, colours, codes and provenance travel as segment attributes
(:mod:`medseg.io.dicom_seg_segments`).

Reading (:func:`medseg.io.dicom_seg_read.read_dicom_seg`): every frame is placed by its own Image Position and
Orientation into the loaded image (never by array index). Frames that lie on an image
slice with the same pixel grid are pasted exactly; parallel frames elsewhere are
placed by nearest plane and nearest pixel; oblique SEGs are resampled (nearest). Label
values are the recorded ones when every segment records one (medseg's SEGs), else the
segment numbers, and a note says that the SEG was numbered by its segments.

This module recognises a SEG (and one medseg made by a model), and holds what writing and
reading share.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from medseg.core.volume import Volume

MANUFACTURER = "medseg"


def is_dicom_seg(path: str | os.PathLike) -> bool:
    path = Path(path)
    if not path.is_file():
        return False
    import pydicom

    try:
        dataset = pydicom.dcmread(str(path), stop_before_pixels=True, specific_tags=["Modality", "SOPClassUID"])
    except Exception:  # noqa: BLE001 - not DICOM at all
        return False
    return str(dataset.get("Modality", "")) == "SEG"


def is_automatic_medseg_seg(path: str | os.PathLike) -> bool:
    """A DICOM SEG medseg wrote whose every segment is a model's, untouched (SegmentAlgorithmType AUTOMATIC)."""
    path = Path(path)
    if not path.is_file():
        return False
    import pydicom

    try:
        dataset = pydicom.dcmread(str(path), stop_before_pixels=True)
        segments = list(dataset.get("SegmentSequence") or [])
        return (str(dataset.get("Modality", "")) == "SEG" and str(dataset.get("Manufacturer", "")) == MANUFACTURER
                and bool(segments) and all(str(s.get("SegmentAlgorithmType", "")) == "AUTOMATIC" for s in segments))
    except Exception:  # noqa: BLE001 - not a readable SEG: not one medseg may replace
        return False


def regularization_note(image: Volume) -> dict | None:
    """What medseg did to the acquired geometry (None when the grid is the acquired one)."""
    for finding in image.meta.findings:
        if finding.kind == "regularized":
            return {"message": finding.message, **{k: v for k, v in finding.details.items()}}
    return None


def first_item(sequence_holder: Any, keyword: str) -> Any:
    """The first item of a DICOM sequence attribute, or None when it is absent or empty."""
    if sequence_holder is None or keyword not in sequence_holder:
        return None
    sequence = sequence_holder[keyword].value
    return sequence[0] if sequence else None
