"""A DICOM SEG's Segment Sequence <-> medseg's labels: names, colours, codes, provenance, values.

Segment numbers must run 1..N in DICOM; each segment's Segment Description (0062,0006) records
its label value as ``medseg label value V`` so that reading gives the labels their values back.
A laterality that modifies the type is also written as the anatomic region's modifier, and
folded back on reading.
"""

from __future__ import annotations

import re
from typing import Any

from medseg.core.label_values import MAX_LABEL_VALUE
from medseg.core.labels import Code, Label, Provenance, uncoded
from medseg.io.dicom_seg import first_item

# A segment's Segment Description names its label value, so a round trip keeps the value scheme.
LABEL_VALUE_PREFIX = "medseg label value "
_LABEL_VALUE = re.compile(r"^\s*medseg label value (\d+)\s*$")


def segment_descriptions(segments: list[Label]) -> list[Any]:
    import highdicom as hd
    from pydicom.sr.codedict import codes
    from pydicom.sr.coding import Code as DicomCode

    descriptions = []
    for number, label in enumerate(segments, start=1):
        made_by = label.provenance
        algorithm = None
        if made_by.algorithm_type != "MANUAL":
            algorithm = hd.AlgorithmIdentificationSequence(
                name=made_by.algorithm_name[:64], family=codes.cid7162.ArtificialIntelligence,
                version=(made_by.algorithm_version or "unknown")[:64])
        r, g, b = label.color or (128, 128, 128)
        category, type_ = label.concept()
        description = hd.seg.SegmentDescription(
            segment_number=number,
            segment_label=label.name[:64],
            segmented_property_category=DicomCode(category.value, category.scheme, category.meaning),
            segmented_property_type=DicomCode(type_.value, type_.scheme, type_.meaning),
            algorithm_type=made_by.algorithm_type,
            algorithm_identification=algorithm,
            display_color=hd.color.CIELabColor.from_rgb(r, g, b),
        )
        description.SegmentDescription = f"{LABEL_VALUE_PREFIX}{label.value}"
        _add_modifiers(description, label, type_)
        descriptions.append(description)
    return descriptions


# SNOMED CT laterality qualifiers (CID 244 "Laterality"): a type modifier from this set is also written as
# the anatomic region's modifier, so readers that look there (rather than at the type) see the side too.
LATERALITY = {"7771000": "Left", "24028007": "Right", "51440002": "Bilateral"}


def _concept(code: Code) -> Any:
    from highdicom.sr.coding import CodedConcept

    return CodedConcept(code.value, code.scheme, code.meaning)


def _add_modifiers(description: Any, label: Label, type_: Code) -> None:
    """The label's type modifier, anatomic region and region modifier, nested as PS3.3 C.8.20.4 nests them.

    A laterality that modifies the type (TotalSegmentator's "Kidney" + "Right") is also stated as the
    modifier of an anatomic region that is the type itself; :func:`read_segments` folds that back.
    """
    modifier, region, region_modifier = label.modifier, label.region, label.region_modifier
    if modifier is not None:
        description.SegmentedPropertyTypeCodeSequence[0].SegmentedPropertyTypeModifierCodeSequence = \
            [_concept(modifier)]
        if region is None and modifier.scheme == "SCT" and modifier.value in LATERALITY:
            region, region_modifier = type_, modifier
    if region is not None:
        item = _concept(region)
        if region_modifier is not None:
            item.AnatomicRegionModifierSequence = [_concept(region_modifier)]
        description.AnatomicRegionSequence = [item]


def recorded_values(seg: Any, numbers: list[int]) -> dict[int, int] | None:
    """Segment number -> label value, when every segment records a distinct value (medseg's SEGs)."""
    values = {}
    for item in seg.SegmentSequence:
        match = _LABEL_VALUE.match(str(item.get("SegmentDescription", "") or ""))
        if match is None:
            return None
        values[int(item.SegmentNumber)] = int(match.group(1))
    if sorted(values) != sorted(numbers) or len(set(values.values())) != len(values) \
            or not all(1 <= v <= MAX_LABEL_VALUE for v in values.values()):
        return None
    return values


def read_segments(seg: Any) -> list[Label]:
    import highdicom as hd

    infos = []
    for item in seg.SegmentSequence:
        number = int(item.SegmentNumber)
        color = None
        if "RecommendedDisplayCIELabValue" in item:
            try:
                color = hd.color.CIELabColor.from_dicom_value(item.RecommendedDisplayCIELabValue).to_rgb(clip=True)
            except Exception:  # noqa: BLE001 - an odd colour is not worth refusing the segment
                color = None

        def coded(keyword: str) -> Code | None:
            code = first_item(item, keyword)
            return Code(str(code.CodeValue), str(code.CodingSchemeDesignator), str(code.CodeMeaning)) if code else None

        type_item = first_item(item, "SegmentedPropertyTypeCodeSequence")
        modifier = _code(first_item(type_item, "SegmentedPropertyTypeModifierCodeSequence")) if type_item else None
        region_item = first_item(item, "AnatomicRegionSequence")
        region = _code(region_item)
        region_modifier = _code(first_item(region_item, "AnatomicRegionModifierSequence")) if region_item else None
        if modifier is not None and region == _code(type_item) and region_modifier == modifier:
            region = region_modifier = None  # the laterality medseg also writes as the region's (_add_modifiers)
        algorithm = first_item(item, "SegmentationAlgorithmIdentificationSequence")
        made_by = Provenance(
            str(item.get("SegmentAlgorithmType", "MANUAL")),
            str(item.get("SegmentAlgorithmName", "") or (algorithm.get("AlgorithmName", "") if algorithm else "")),
            str(algorithm.get("AlgorithmVersion", "") if algorithm else ""))
        category, type_ = uncoded(coded("SegmentedPropertyCategoryCodeSequence"),
                                  coded("SegmentedPropertyTypeCodeSequence"))
        infos.append(Label(
            number, str(item.get("SegmentLabel", "") or f"segment {number}"),
            tuple(int(c) for c in color) if color is not None else None,  # type: ignore[arg-type]
            category, type_, made_by,
            modifier=modifier, region=region, region_modifier=region_modifier))
    return infos


def _code(item: Any) -> Code | None:
    if item is None or "CodeValue" not in item:
        return None
    return Code(str(item.CodeValue), str(item.CodingSchemeDesignator), str(item.get("CodeMeaning", "")))
