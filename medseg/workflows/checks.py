"""What an image must be before a model segments it: every interface asks here, so a rule found once holds in all.

- **Image kind**: a CT model must not be given a label map (a tumour mask opened as if it were
  the CT gave 0 ml of everything, status ``ok``). A label map is told from a CT by its voxels:
  whole numbers, none negative (a CT in Hounsfield units has air, about -1000), at most
  :data:`MAX_LABEL_CLASSES` distinct values, and background (0) the most frequent one. Every
  real CT in the test data has air; a CT stored without its rescale (0..4095) has thousands
  of distinct values. Refused with :class:`NotAnImageError`, whatever the modality says.
- **Modality**: a series whose DICOM Modality differs from the model's (MR for a CT model) is
  refused unless the user allows it; then the result carries a note (:mod:`medseg.model.modality`).
- **Spacing**: a spacing outside what any CT has is refused (:mod:`medseg.io.voxel_checks`); an image
  opened elsewhere (the GUI's, an already-open Volume) is checked again here.
"""

from __future__ import annotations

import os

import numpy as np

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.volume import Volume
from medseg.errors import NotAnImageError

MAX_LABEL_CLASSES = 256  # TotalSegmentator's whole-body map has 118 values; a CT has thousands


def label_map_reason(volume: Volume) -> str | None:
    """Why ``volume`` looks like a label map rather than an image in HU, or None when it does not.

    Slice by slice, with an early stop: a CT leaves at its first negative voxel (``min``), so the
    check costs one pass of ``min`` on a real CT."""
    array = volume.array
    if array.size == 0 or array.dtype.kind not in "iuf":
        return None
    if float(array.min()) < 0 or float(array.max()) > MAX_LABEL_VALUE:
        return None
    counts = np.zeros(MAX_LABEL_VALUE + 1, dtype=np.int64)
    for plane in array:
        if plane.dtype.kind == "f" and not np.array_equal(plane, np.rint(plane)):
            return None  # fractions: an image, not labels
        counts += np.bincount(plane.ravel().astype(np.intp), minlength=counts.size)[:counts.size]
        if np.count_nonzero(counts) > MAX_LABEL_CLASSES:
            return None
    values = np.nonzero(counts)[0]
    if int(np.argmax(counts)) != 0:
        return None  # a label map is mostly background
    shown = ", ".join(str(int(v)) for v in values[:8]) + (", ..." if len(values) > 8 else "")
    return (f"its voxels are {len(values)} whole numbers ({shown}), mostly 0, and none is below 0: a label map "
            f"(a CT in Hounsfield units has air at about -1000)")


def check_image_kind(volume: Volume, modality: str | None) -> None:
    """Refuse a label map given to a model that segments images in HU (``modality`` "CT")."""
    if modality != "CT":
        return
    reason = label_map_reason(volume)
    if reason is not None:
        raise NotAnImageError(f"this is not a CT image: {reason}", path=source_of(volume),
                              hint="open the CT image itself; a label map is opened onto its image "
                                   "(medseg gui IMAGE --labels MAP, or File ▸ Open segmentation)")


def check_spacing(volume: Volume) -> None:
    from medseg.io.voxel_checks import check_spacing as within_range

    within_range(volume)


def check_modality(volume: Volume, package: object, allow: bool) -> str | None:
    from medseg.model.modality import check_modality as against_model

    return against_model(volume, package, allow=allow)  # type: ignore[arg-type]


def check_input(volume: Volume, model: object, allow_modality: bool = False) -> list[str]:
    """Every check before a model runs on ``volume`` (an OpenedModel): notes for the result, or a refusal."""
    card = model.card  # type: ignore[attr-defined]
    check_spacing(volume)
    check_image_kind(volume, card.modality)
    from medseg.model.modality import check_modality_named

    # the card states the modality for every kind (a package's is model_modality(package))
    note = check_modality_named(volume, card.modality, card.name, allow_modality)
    return [note] if note else []


def source_of(volume: Volume) -> str | os.PathLike | None:
    files = volume.meta.source_files
    if not files:
        return None
    return files[0] if len(files) == 1 else os.path.dirname(str(files[0])) or files[0]


__all__ = ["NotAnImageError", "MAX_LABEL_CLASSES", "label_map_reason", "check_image_kind", "check_input"]
