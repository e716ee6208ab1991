"""The one label description: what a label value means, how it is drawn, and who made it.

Every layer speaks it: the editor's label table (``medseg.edit.label_map``), the autosave
journal, the ``.labels.json`` sidecar, the DICOM SEG writer and reader, the model package
(its labels as produced by the model) and the command line. A :class:`Label` is frozen:
the document changes a label by putting a new record in its table, so a snapshot of a
table never changes under its holder.

A label's coded concept (DICOM Segmented Property Category and Type) is what its source says:
a model package's ``model.json`` (``"codes"``), a DICOM SEG, a sidecar, a person. It is never
guessed from the name. A label without a code is written to a DICOM SEG as the explicit
generic concept :data:`UNSPECIFIED` (DCM 111176 "Unspecified", category and type) with its
own name as the Segment Label, and reads back as a label without a code.

Beside category and type a label may carry what DICOM's Segment Description adds: a type modifier
(laterality: "Kidney" + "Right"), the anatomic region it lies in and that region's modifier (a cyst
in the left kidney), as the model's published coding gives them (:mod:`medseg.core.structure_codes`).
``group`` is where the label table shows it (TotalSegmentator's organs, vertebrae, ribs…): the
model's own grouping, not a DICOM attribute.

Provenance follows DICOM's Segment Algorithm Type: AUTOMATIC (a model's output,
untouched), SEMIAUTOMATIC (a model's output a person edited), MANUAL (drawn by a person,
or nobody said). The first two name the algorithm (the model's name and version).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from medseg.core.label_colors import color_for

AUTOMATIC, SEMIAUTOMATIC, MANUAL = "AUTOMATIC", "SEMIAUTOMATIC", "MANUAL"
ALGORITHM_TYPES = (AUTOMATIC, SEMIAUTOMATIC, MANUAL)


@dataclass(frozen=True)
class Code:
    """A coded concept (a DICOM code sequence item): value, scheme designator, meaning."""

    value: str
    scheme: str
    meaning: str

    def as_dict(self) -> dict[str, str]:
        return {"value": self.value, "scheme": self.scheme, "meaning": self.meaning}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "Code":
        return cls(str(data["value"]), str(data["scheme"]), str(data["meaning"]))


# CID 7150 (Segmentation Property Categories), as pydicom's DCMR tables spell them.
ANATOMICAL_STRUCTURE = Code("91723000", "SCT", "Anatomical Structure")
TISSUE = Code("85756007", "SCT", "Tissue")
# What a SEG says for a label nobody coded: DICOM's own "Unspecified" (DCM 111176), for the category
# and the type. Not "Tissue" (which a reader takes as a statement about the voxels) nor a private
# "99..." code (which no other reader knows): a standard concept that claims nothing, beside the
# label's own name in the Segment Label. CIDs 7150/7151 are extensible, and highdicom takes any code.
UNSPECIFIED = Code("111176", "DCM", "Unspecified")


@dataclass(frozen=True)
class Provenance:
    """Who made a label: a person (MANUAL), a model (AUTOMATIC), or a model then a person (SEMIAUTOMATIC)."""

    algorithm_type: str = MANUAL
    algorithm_name: str = ""  # the model's name (AUTOMATIC / SEMIAUTOMATIC only)
    algorithm_version: str = ""

    def __post_init__(self) -> None:
        kind = str(self.algorithm_type or MANUAL).upper()
        if kind not in ALGORITHM_TYPES or (kind != MANUAL and not self.algorithm_name):
            kind = MANUAL  # DICOM needs the algorithm's name for the other two
        object.__setattr__(self, "algorithm_type", kind)
        if kind == MANUAL:
            object.__setattr__(self, "algorithm_name", "")
            object.__setattr__(self, "algorithm_version", "")

    @classmethod
    def model(cls, name: str, version: str = "") -> "Provenance":
        return cls(AUTOMATIC, str(name), str(version or ""))

    def edited(self) -> "Provenance":
        """After a person changed the label's voxels: a model's label becomes SEMIAUTOMATIC."""
        return replace(self, algorithm_type=SEMIAUTOMATIC) if self.algorithm_type == AUTOMATIC else self

    def made_by(self, name: str, version: str = "") -> bool:
        """True when this is the untouched output of exactly this model (name and version)."""
        return (self.algorithm_type == AUTOMATIC and self.algorithm_name == name
                and self.algorithm_version == (version or ""))

    def describe(self) -> str:
        if self.algorithm_type == AUTOMATIC:
            return f"made by {self.algorithm_name}"
        if self.algorithm_type == SEMIAUTOMATIC:
            return f"made by {self.algorithm_name}, edited"
        return "drawn or opened"


HAND = Provenance()


@dataclass(frozen=True)
class Label:
    """One label value of a segmentation: name, colour, codes, who made it, and how it is shown.

    ``color`` None becomes the one colour table's colour (by name, else by value);
    ``category``/``type`` None mean "nobody coded it" (a SEG states :data:`UNSPECIFIED`).
    """

    value: int
    name: str = ""
    color: tuple[int, int, int] | None = None
    category: Code | None = None  # DICOM Segmented Property Category (CID 7150)
    type: Code | None = None  # DICOM Segmented Property Type (CID 7151)
    provenance: Provenance = field(default=HAND)
    locked: bool = False  # no tool, Segment or batch operation changes a locked label
    visible: bool = True
    opacity: float | None = None  # of its surface in the 3D view, 0…1 (None: the view's default for it)
    group: str = ""  # the label table's group (the model's grouping: "organs", "ribs"…; "" none)
    modifier: Code | None = None  # DICOM Segmented Property Type Modifier (laterality)
    region: Code | None = None  # DICOM Anatomic Region (where a lesion or cyst lies)
    region_modifier: Code | None = None  # DICOM Anatomic Region Modifier (the region's side)
    # the value the model gave it, when a merge had to move it off a value a user's label holds (the
    # sidecar records it: scripts that rely on the model's numbers can map them back)
    model_value: int | None = None

    def __post_init__(self) -> None:
        value = int(self.value)
        object.__setattr__(self, "value", value)
        name = str(self.name or "").strip() or f"label {value}"
        object.__setattr__(self, "name", name)
        color = self.color if self.color is not None else color_for(value, name)
        object.__setattr__(self, "color", tuple(min(255, max(0, int(c))) for c in color))
        object.__setattr__(self, "locked", bool(self.locked))
        object.__setattr__(self, "visible", bool(self.visible))
        if self.opacity is not None:
            object.__setattr__(self, "opacity", min(1.0, max(0.0, float(self.opacity))))
        object.__setattr__(self, "group", str(self.group or "").strip())
        if self.model_value is not None:
            object.__setattr__(self, "model_value", int(self.model_value))

    # --- derived -----------------------------------------------------------------------
    @property
    def coded(self) -> bool:
        """True when the label carries its coded concept (category and type)."""
        return self.category is not None and self.type is not None

    def concept(self) -> tuple[Code, Code]:
        """(category, type) as a DICOM SEG must state them: the label's own, else :data:`UNSPECIFIED`."""
        return self.category or UNSPECIFIED, self.type or UNSPECIFIED

    def edited(self) -> "Label":
        return self if self.provenance.edited() is self.provenance else replace(self, provenance=self.provenance.edited())

    # --- the sidecar's / journal's row --------------------------------------------------
    def as_dict(self) -> dict[str, Any]:
        """The row as JSON data (codes as given: None stays None)."""
        row = {
            "value": self.value, "name": self.name, "color": list(self.color),  # type: ignore[arg-type]
            "category": self.category.as_dict() if self.category else None,
            "type": self.type.as_dict() if self.type else None,
            "algorithm_type": self.provenance.algorithm_type, "algorithm_name": self.provenance.algorithm_name,
            "algorithm_version": self.provenance.algorithm_version,
            "locked": self.locked, "visible": self.visible, "opacity": self.opacity,
            "group": self.group,
            "modifier": self.modifier.as_dict() if self.modifier else None,
            "region": self.region.as_dict() if self.region else None,
            "region_modifier": self.region_modifier.as_dict() if self.region_modifier else None,
        }
        if self.model_value is not None:  # only a moved label says so
            row["model_value"] = self.model_value
        return row

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], value: int | None = None) -> "Label":
        """A row of the sidecar (structured or the old flat one) or of the journal; ``value`` for flat rows."""
        color = data.get("color")

        def code(key: str) -> Code | None:
            return Code.from_dict(data[key]) if data.get(key) else None

        return cls(
            int(data["value"] if value is None else value), str(data.get("name") or ""),
            (int(color[0]), int(color[1]), int(color[2])) if color is not None and len(color) == 3 else None,
            code("category"), code("type"),
            Provenance(str(data.get("algorithm_type") or MANUAL), str(data.get("algorithm_name") or ""),
                       str(data.get("algorithm_version") or "")),
            bool(data.get("locked", False)), bool(data.get("visible", True)),
            float(data["opacity"]) if data.get("opacity") is not None else None,
            str(data.get("group") or ""),
            modifier=code("modifier"), region=code("region"), region_modifier=code("region_modifier"),
            model_value=int(data["model_value"]) if data.get("model_value") is not None else None)


def label_table(values: Iterable[int], names: Mapping[int, str] | None = None,
                provenance: Provenance = HAND) -> dict[int, Label]:
    """One label per value (0 excluded, sorted), named from ``names`` (else "label N")."""
    names = names or {}
    return {v: Label(v, names.get(v) or "", provenance=provenance) for v in sorted({int(v) for v in values}) if v}


def uncoded(category: Code | None, type_: Code | None) -> tuple[Code | None, Code | None]:
    """A concept read from a file, with :data:`UNSPECIFIED` (what medseg writes for "no code") as None."""
    return (None if category == UNSPECIFIED else category), (None if type_ == UNSPECIFIED else type_)


__all__ = ["Label", "Code", "Provenance", "HAND", "label_table", "uncoded", "ALGORITHM_TYPES",
           "AUTOMATIC", "SEMIAUTOMATIC", "MANUAL", "ANATOMICAL_STRUCTURE", "TISSUE", "UNSPECIFIED"]
