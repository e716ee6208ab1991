"""What a saved segment is: name, colour, coded concept, and who or what drew it.

A plain record the writers (DICOM SEG, the label-map sidecar) take and the readers give
back, so ``io`` never needs the editor's label table. Coded concepts come from pydicom's
SNOMED CT dictionary (``pydicom.sr.codedict``), looked up by the label's name; a name it
does not know is coded as the generic SNOMED "Tissue" and keeps its own text as the
segment label.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import lru_cache

import numpy as np

from medseg.core.label_colors import color_for

ALGORITHM_TYPES = ("AUTOMATIC", "SEMIAUTOMATIC", "MANUAL")


@dataclass(frozen=True)
class Coded:
    """A coded concept (DICOM code sequence item): value, scheme designator, meaning."""

    value: str
    scheme: str
    meaning: str

    def as_dict(self) -> dict[str, str]:
        return {"value": self.value, "scheme": self.scheme, "meaning": self.meaning}

    @classmethod
    def from_dict(cls, data: dict) -> "Coded":
        return cls(str(data["value"]), str(data["scheme"]), str(data["meaning"]))


ANATOMICAL_STRUCTURE = Coded("123037004", "SCT", "Anatomical Structure")
TISSUE = Coded("85756007", "SCT", "Tissue")


@dataclass
class SegmentInfo:
    """One label of a label map as it is saved.

    ``algorithm_type``: AUTOMATIC (model output, untouched), SEMIAUTOMATIC (model output a
    person edited), MANUAL (drawn by a person). AUTOMATIC and SEMIAUTOMATIC name the
    algorithm (``algorithm_name`` / ``algorithm_version``: the model's name and version).
    """

    value: int
    name: str
    color: tuple[int, int, int] | None = None  # RGB 0..255; None: the one colour table's
    category: Coded | None = None  # None: looked up by name
    type: Coded | None = None
    algorithm_type: str = "MANUAL"
    algorithm_name: str = ""
    algorithm_version: str = ""
    extra: dict = field(default_factory=dict)

    def resolved(self) -> "SegmentInfo":
        """A copy with colour and codes filled in (by the name) where they were left empty."""
        category, type_ = coded_for_name(self.name)
        algorithm_type = self.algorithm_type.upper()
        if algorithm_type not in ALGORITHM_TYPES:
            algorithm_type = "MANUAL"
        if algorithm_type != "MANUAL" and not self.algorithm_name:
            algorithm_type = "MANUAL"  # DICOM needs the algorithm's name for the other two
        return SegmentInfo(
            self.value, self.name or f"label {self.value}",
            tuple(int(c) for c in self.color) if self.color is not None else color_for(self.value, self.name),
            self.category or category, self.type or type_, algorithm_type,
            self.algorithm_name, self.algorithm_version, dict(self.extra))

    def as_dict(self) -> dict:
        info = self.resolved()
        return {
            "value": info.value, "name": info.name, "color": list(info.color or ()),
            "category": info.category.as_dict() if info.category else None,
            "type": info.type.as_dict() if info.type else None,
            "algorithm_type": info.algorithm_type, "algorithm_name": info.algorithm_name,
            "algorithm_version": info.algorithm_version,
            **{k: v for k, v in info.extra.items() if k in ("locked", "visible")},
        }

    @classmethod
    def from_dict(cls, data: dict) -> "SegmentInfo":
        color = data.get("color")
        return cls(
            int(data["value"]), str(data.get("name") or f"label {data['value']}"),
            tuple(int(c) for c in color) if color and len(color) == 3 else None,  # type: ignore[arg-type]
            Coded.from_dict(data["category"]) if data.get("category") else None,
            Coded.from_dict(data["type"]) if data.get("type") else None,
            str(data.get("algorithm_type") or "MANUAL"), str(data.get("algorithm_name") or ""),
            str(data.get("algorithm_version") or ""),
            {k: bool(data[k]) for k in ("locked", "visible") if k in data})


# Names people and models use that the SNOMED dictionary spells differently.
_ALIASES = {
    "body": "EntireBody", "lungs": "Lung", "bones": "Bone", "skeleton": "Bone", "spine": "Spine",
    "vertebrae": "Spine", "kidneys": "Kidney", "heart": "Heart", "lesion": "Lesion", "tumor": "Neoplasm",
    "tumour": "Neoplasm", "nodule": "Nodule", "lung_nodule": "Nodule",
}
_LESIONS = {"Lesion", "Neoplasm", "Nodule", "Mass"}
_MORPHOLOGICALLY_ABNORMAL = Coded("49755003", "SCT", "Morphologically Altered Structure")


def _camel(words: list[str]) -> str:
    return "".join(w[:1].upper() + w[1:] for w in words if w)


@lru_cache(maxsize=512)
def coded_for_name(name: str) -> tuple[Coded, Coded]:
    """(category, type) for a label name: SNOMED CT by name where pydicom knows it, else Tissue."""
    from pydicom.sr.codedict import codes

    normal = re.sub(r"[^a-z0-9]+", "_", (name or "").strip().lower()).strip("_")
    words = normal.split("_")
    candidates = [_ALIASES.get(normal, "")]
    side = [w for w in words if w in ("left", "right")]
    rest = [w for w in words if w not in ("left", "right")]
    if side:
        candidates.append(_camel(side + rest))  # kidney_right -> RightKidney
    candidates += [_camel(rest), _camel([w[:-1] if w.endswith("s") and len(w) > 3 else w for w in rest])]
    for candidate in candidates:
        if not candidate:
            continue
        code = getattr(codes.SCT, candidate, None)
        if code is not None:
            found = Coded(str(code.value), str(code.scheme_designator), str(code.meaning))
            category = _MORPHOLOGICALLY_ABNORMAL if candidate in _LESIONS else ANATOMICAL_STRUCTURE
            return category, found
    return TISSUE, TISSUE


def default_segments(values: list[int], names: dict[int, str] | None = None,
                     algorithm_type: str = "MANUAL", algorithm_name: str = "",
                     algorithm_version: str = "") -> list[SegmentInfo]:
    """Segment records for label values, named from ``names`` (else "label N")."""
    names = names or {}
    return [SegmentInfo(int(v), names.get(int(v)) or f"label {int(v)}", None, None, None,
                        algorithm_type, algorithm_name, algorithm_version).resolved()
            for v in sorted(set(int(v) for v in values)) if v != 0]


def label_values(array: np.ndarray) -> list[int]:
    """The non-zero values present in a label array, slice by slice (np.unique sorts all voxels and
    fancy indexing makes an 8-byte index per voxel: both cost seconds and gigabytes on a large CT)."""
    array = np.asarray(array)
    if array.dtype.kind not in "ui" or array.dtype.itemsize > 2 or array.ndim == 0:
        return [int(v) for v in np.unique(array) if v != 0]
    counts = np.zeros(int(array.max(initial=0)) + 1, dtype=np.int64)
    for plane in array.reshape(array.shape[0], -1) if array.ndim > 1 else [array]:
        found = np.bincount(plane, minlength=counts.size)
        counts += found[: counts.size]
    return [int(v) for v in np.nonzero(counts)[0] if v != 0]


def remap_values(array: np.ndarray, lut: np.ndarray) -> np.ndarray:
    """``lut[array]`` slice by slice (no full-volume 8-byte index), or ``array`` itself when ``lut`` is identity."""
    if np.array_equal(lut, np.arange(lut.size)) and array.dtype == lut.dtype:
        return array
    out = np.empty(array.shape, dtype=lut.dtype)
    for k in range(array.shape[0]):
        out[k] = lut[array[k]]
    return out
