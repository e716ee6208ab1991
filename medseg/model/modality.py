"""A CT model on an MR or PET series: its labels and volumes would mean nothing, so the user decides.

A model is a CT model when a configuration normalises intensities as CT (nnU-Net's
``CTNormalization``: fixed Hounsfield percentiles, which an MR or PET image does not have).
A series whose DICOM Modality is known and differs is refused with
:class:`~medseg.errors.ModalityMismatch` unless the user allows it (``--allow-modality``;
the GUI asks), and then the result carries a note that says so. Image files (NIfTI, NRRD)
carry no modality and are taken as given.
"""

from __future__ import annotations

from medseg.core.volume import Volume
from medseg.errors import ModalityMismatch
from medseg.model.package_model import ModelPackage

_NAMES = {"CT": "CT", "MR": "MR", "PT": "PET", "NM": "nuclear medicine", "US": "ultrasound", "CR": "radiograph",
          "DX": "radiograph", "MG": "mammography", "XA": "angiography", "OT": "other"}


def model_modality(package: ModelPackage) -> str | None:
    """"CT" when the model normalises its input as CT, else None (unknown: no check)."""
    schemes = {str(plan.normalization.get("scheme")) for plan in package.configurations.values()}
    return "CT" if "CTNormalization" in schemes else None


def check_modality(volume: Volume, package: ModelPackage, allow: bool = False) -> str | None:
    """None when the series suits the model; a note for the result when the user allowed a mismatch."""
    return check_modality_named(volume, model_modality(package), package.name, allow)


def check_modality_named(volume: Volume, expected: str | None, name: str, allow: bool = False) -> str | None:
    """:func:`check_modality` for a model known by its modality (``expected``; None: no check) and name."""
    actual = (volume.meta.modality or "").strip().upper()
    if expected is None or not actual or actual == expected:
        return None
    shown = _NAMES.get(actual, actual)
    if not allow:
        raise ModalityMismatch(
            f"this series is {shown} (DICOM Modality {actual}); the model {name!r} was trained on "
            f"{expected} and its labels and volumes on {shown} would not mean anything",
            path=(volume.meta.source_files or [None])[0],
            hint="open a CT series, or segment anyway with --allow-modality (the GUI asks)")
    return (f"this {shown} series (Modality {actual}) was segmented with the {expected} model {name!r} at "
            "the user's request: check every label")
