"""Published codings of a model's structures: DICOM coded concepts and colours, as data.

TotalSegmentator publishes how each of its structures is coded in a DICOM SEG
(``resources/labels/totalsegmentator_snomed_mapping.csv``, from TotalSegmentator 2.18.0,
Apache-2.0, credited in ``resources/labels/README.md``): SNOMED CT category and type, the
type's modifier (Left / Right), an anatomic region and its modifier (a kidney cyst lies in
the left or right kidney), and a display colour. This module reads that table; it never
guesses a code from a name. Whoever knows that a label *is* a TotalSegmentator structure
(the catalogue's model card, the "TotalSegmentator" name set a user picks for a file that
TotalSegmentator wrote) applies it with :func:`coded`.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass, replace
from functools import lru_cache
from importlib import resources

from medseg.core.labels import Code, Label

TOTALSEGMENTATOR_MAPPING = "labels/totalsegmentator_snomed_mapping.csv"


@dataclass(frozen=True)
class StructureCoding:
    """How one structure is coded and drawn (None: the table leaves it out)."""

    category: Code
    type: Code
    modifier: Code | None
    region: Code | None
    region_modifier: Code | None
    color: tuple[int, int, int] | None


def _code(row: dict[str, str], prefix: str) -> Code | None:
    value = (row.get(f"{prefix}.CodeValue") or "").strip()
    if not value:
        return None
    return Code(value, row[f"{prefix}.CodingSchemeDesignator"].strip(), row[f"{prefix}.CodeMeaning"].strip())


@lru_cache(maxsize=1)
def totalsegmentator_codings() -> dict[str, StructureCoding]:
    """TotalSegmentator's published coding of every structure it names (170 names, all of ``total``'s 117)."""
    text = (resources.files("medseg.resources") / TOTALSEGMENTATOR_MAPPING).read_text(encoding="utf-8")
    table = {}
    for row in csv.DictReader(io.StringIO(text)):
        color = tuple(int(c) for c in row["DicomRGBColor"].split(",")) if row.get("DicomRGBColor") else None
        category = _code(row, "SegmentedPropertyCategoryCodeSequence")
        type_ = _code(row, "SegmentedPropertyTypeCodeSequence")
        if category is None or type_ is None:
            continue
        table[row["Structure"].strip()] = StructureCoding(
            category, type_, _code(row, "SegmentedPropertyTypeModifierCodeSequence"),
            _code(row, "AnatomicRegionSequence"), _code(row, "AnatomicRegionModifierSequence"),
            color if color is not None and len(color) == 3 else None)
    return table


def totalsegmentator_coding(name: str) -> StructureCoding | None:
    """The published coding of a TotalSegmentator structure name (exactly as TotalSegmentator spells it)."""
    return totalsegmentator_codings().get(name)


def coded(label: Label, coding: StructureCoding | None, color: bool = True) -> Label:
    """``label`` with the coding's concepts (and its colour unless ``color`` is False); unchanged without one."""
    if coding is None:
        return label
    return replace(label, category=coding.category, type=coding.type, modifier=coding.modifier,
                   region=coding.region, region_modifier=coding.region_modifier,
                   color=coding.color if color and coding.color is not None else label.color)


__all__ = ["StructureCoding", "totalsegmentator_codings", "totalsegmentator_coding", "coded"]
