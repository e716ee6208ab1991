"""117 structures in one DICOM SEG: written with TotalSegmentator's published codes, read back by
highdicom and by dcmqi's segimage2itkimage with every label, colour, code and voxel intact; a SEG
that TotalSegmentator's own writer made opens with its names and colours.

Oracles: TotalSegmentator 2.18.0's own mapping table and writer (the installed peer), highdicom's
reader, dcmqi 1.5.7's reader (a separate C++ implementation on DCMTK), SimpleITK's placement.
Data: TotalSegmentator's own result on its example series (31 labels), split to all 117
(tests/many_labels_data.py), on the real 512×512×20 series.
"""

from __future__ import annotations

import csv
import json
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from many_labels_data import all_117

from medseg.catalogue import load_catalogue
from medseg.core.labels import Code, Provenance
from medseg.io import load
from medseg.io.dicom_seg_read import read_dicom_seg
from medseg.io.dicom_seg_write import write_dicom_seg

TS_MAPPING = Path(__import__("totalsegmentator").__file__).parent / "resources" / "totalsegmentator_snomed_mapping.csv"


def _published() -> dict[str, dict[str, str]]:
    """TotalSegmentator's own table, read here with the csv module (not medseg's reader)."""
    with open(TS_MAPPING, newline="", encoding="utf-8") as handle:
        return {row["Structure"]: row for row in csv.DictReader(handle)}


def _code(row: dict[str, str], prefix: str) -> tuple[str, str, str] | None:
    if not row[f"{prefix}.CodeValue"]:
        return None
    return (row[f"{prefix}.CodeValue"], row[f"{prefix}.CodingSchemeDesignator"], row[f"{prefix}.CodeMeaning"])


def _rgb(row: dict[str, str]) -> tuple[int, int, int]:
    return tuple(int(c) for c in row["DicomRGBColor"].split(","))  # type: ignore[return-value]


def _on_grid(volume, path: Path) -> np.ndarray:
    """A label image placed on the volume's grid by SimpleITK from the two geometries (nearest)."""
    grid = sitk.Image([int(n) for n in volume.size_xyz], sitk.sitkUInt8)
    grid.SetSpacing([float(s) for s in volume.spacing_mm])
    grid.SetOrigin([float(o) for o in volume.origin_mm])
    grid.SetDirection([float(d) for d in np.asarray(volume.direction).ravel()])
    placed = sitk.Resample(sitk.ReadImage(str(path)), grid, sitk.Transform(), sitk.sitkNearestNeighbor, 0)
    return sitk.GetArrayFromImage(placed)


@pytest.fixture(scope="module")
def written(ct_dir: Path, tmp_path_factory):
    folder = ct_dir / "totalsegmentator"
    image = load(folder / "example_ct_dicom")
    array = all_117(_on_grid(image, folder / "example_seg_dicom.nii.gz"))
    labels = {v: label for v, label in load_catalogue().get("totalsegmentator/total").labels().items()}
    made_by = Provenance.model("TotalSegmentator", "2.18.0")
    segments = [replace(label, provenance=made_by) for label in labels.values()]
    out = tmp_path_factory.mktemp("seg117")
    label_map = image.with_array(array, modality="SEG")
    result = write_dicom_seg(label_map, image, out / "seg.dcm", segments)
    return image, array, labels, out / "seg.dcm", result


def test_every_segment_carries_totalsegmentators_published_codes_and_colour(written) -> None:
    _image, _array, labels, path, result = written
    published = _published()
    seg = hd.seg.segread(path)
    assert len(seg.SegmentSequence) == 117 == len(result.segments)
    sides = {}
    for item in seg.SegmentSequence:
        name = str(item.SegmentLabel)
        row = published[name]
        assert labels[int(item.SegmentNumber)].name == name
        category = item.SegmentedPropertyCategoryCodeSequence[0]
        type_ = item.SegmentedPropertyTypeCodeSequence[0]
        assert (category.CodeValue, category.CodingSchemeDesignator, category.CodeMeaning) == \
            _code(row, "SegmentedPropertyCategoryCodeSequence")
        assert (type_.CodeValue, type_.CodingSchemeDesignator, type_.CodeMeaning) == \
            _code(row, "SegmentedPropertyTypeCodeSequence")
        modifier = _code(row, "SegmentedPropertyTypeModifierCodeSequence")
        written_modifier = type_.get("SegmentedPropertyTypeModifierCodeSequence")
        if modifier is None:
            assert not written_modifier, name
        else:
            m = written_modifier[0]
            assert (m.CodeValue, m.CodingSchemeDesignator, m.CodeMeaning) == modifier
        region, region_modifier = (_code(row, "AnatomicRegionSequence"), _code(row, "AnatomicRegionModifierSequence"))
        if modifier in (("7771000", "SCT", "Left"), ("24028007", "SCT", "Right")) and region is None:
            region, region_modifier = _code(row, "SegmentedPropertyTypeCodeSequence"), modifier  # laterality, also here
        if region is None:
            assert "AnatomicRegionSequence" not in item, name
        else:
            r = item.AnatomicRegionSequence[0]
            assert (r.CodeValue, r.CodingSchemeDesignator, r.CodeMeaning) == region
            rm = r.get("AnatomicRegionModifierSequence")
            assert ((rm[0].CodeValue, rm[0].CodingSchemeDesignator, rm[0].CodeMeaning) if rm else None) == region_modifier
        rgb = hd.color.CIELabColor.from_dicom_value(item.RecommendedDisplayCIELabValue).to_rgb()
        assert np.abs(np.array(rgb, int) - _rgb(row)).max() <= 1, name
        assert item.SegmentAlgorithmType == "AUTOMATIC" and item.SegmentAlgorithmName == "TotalSegmentator"
        regions = list(item.get("AnatomicRegionSequence") or [])
        full = [(c.CodeValue, c.CodingSchemeDesignator) for c in (
            type_, *(type_.get("SegmentedPropertyTypeModifierCodeSequence") or []),
            *regions, *(m for r in regions for m in (r.get("AnatomicRegionModifierSequence") or [])))]
        sides.setdefault(tuple(full), []).append(name)
    # every structure's full concept is its own: left and right are told apart by their codes
    assert all(len(names) == 1 for names in sides.values()), [n for n in sides.values() if len(n) > 1]


def test_highdicom_reads_back_every_voxel(written) -> None:
    image, array, _labels, path, _result = written
    seg = hd.seg.segread(path)
    volume = seg.get_volume(combine_segments=True, relabel=False)
    # place highdicom's volume by its own affine onto medseg's grid (both in LPS patient space)
    index = np.argwhere(np.ones(array.shape, bool))  # z, y, x of every voxel
    xyz = index[:, ::-1].astype(float)
    physical = image.index_to_physical(xyz)
    inverse = np.linalg.inv(volume.affine)
    ijk = np.rint((np.c_[physical, np.ones(len(physical))] @ inverse.T)[:, :3]).astype(int)
    inside = np.all((ijk >= 0) & (ijk < volume.array.shape), axis=1)
    assert inside.all()
    theirs = volume.array[ijk[:, 0], ijk[:, 1], ijk[:, 2]].reshape(array.shape)
    np.testing.assert_array_equal(theirs, array)


def _dcmqi(tool: str, *args: str) -> None:
    path = shutil.which(tool) or str(Path(sys.executable).parent / tool)
    run = subprocess.run([path, *args], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-1500:] + run.stderr[-1500:]


def _dcmqi_read(seg: Path, out: Path) -> tuple[dict[int, dict], Path]:
    """segimage2itkimage: the segments' attributes by label ID and the merged label image."""
    out.mkdir()
    _dcmqi("segimage2itkimage", "--inputDICOM", str(seg), "--outputDirectory", str(out), "--prefix", "seg",
           "-t", "nifti", "--mergeSegments")
    metas, images = sorted(out.glob("seg*.json")), sorted(out.glob("seg*.nii.gz"))
    assert len(metas) == len(images) == 1  # no overlaps: one merged label image
    attributes = [a for group in json.loads(metas[0].read_text())["segmentAttributes"] for a in group]
    return {a["labelID"]: a for a in attributes}, images[0]


def _complete_copy(series: Path, out: Path) -> Path:
    """The example series with the UIDs and SOP Class it leaves blank filled in (dcmqi's writer needs them)."""
    out.mkdir()
    uids = {k: pydicom.uid.generate_uid() for k in ("StudyInstanceUID", "SeriesInstanceUID", "FrameOfReferenceUID")}
    for path in sorted(series.iterdir()):
        dataset = pydicom.dcmread(path)
        for keyword, uid in uids.items():
            if not dataset.get(keyword):
                setattr(dataset, keyword, uid)
        dataset.SOPClassUID = dataset.file_meta.MediaStorageSOPClassUID
        if not dataset.get("SOPInstanceUID"):
            dataset.SOPInstanceUID = pydicom.uid.generate_uid()
        dataset.file_meta.MediaStorageSOPInstanceUID = dataset.SOPInstanceUID
        dataset.save_as(out / path.name)
    return out


def _dcmqi_metadata(labels) -> dict:
    """dcmqi's input JSON for the 117 structures from TotalSegmentator's table (what another tool would write)."""
    published = _published()
    segments = []
    for value, label in labels.items():
        row = published[label.name]
        attribute = {"labelID": value, "SegmentLabel": label.name, "SegmentAlgorithmType": "AUTOMATIC",
                     "SegmentAlgorithmName": "TotalSegmentator", "recommendedDisplayRGBValue": list(_rgb(row))}
        for key in ("SegmentedPropertyCategoryCodeSequence", "SegmentedPropertyTypeCodeSequence",
                    "SegmentedPropertyTypeModifierCodeSequence"):
            code = _code(row, key)
            if code is not None:
                attribute[key] = {"CodeValue": code[0], "CodingSchemeDesignator": code[1], "CodeMeaning": code[2]}
        segments.append(attribute)
    return {"ContentCreatorName": "test", "ClinicalTrialSeriesID": "1", "ClinicalTrialTimePointID": "1",
            "SeriesDescription": "dcmqi 117", "SeriesNumber": "300", "InstanceNumber": "1", "BodyPartExamined": "ABDOMEN",
            "ContentLabel": "SEG", "ContentDescription": "117 structures", "segmentAttributes": [segments]}


def test_dcmqi_reads_back_every_label_colour_code_and_voxel(written, ct_dir: Path, tmp_path: Path) -> None:
    image, array, labels, path, _result = written
    ours, merged = _dcmqi_read(path, tmp_path / "ours")
    assert sorted(ours) == list(range(1, 118))
    published = _published()
    for value, attribute in ours.items():
        name = attribute["SegmentLabel"]
        assert labels[value].name == name
        row = published[name]
        for key in ("SegmentedPropertyCategoryCodeSequence", "SegmentedPropertyTypeCodeSequence",
                    "SegmentedPropertyTypeModifierCodeSequence", "AnatomicRegionModifierSequence"):
            got = attribute.get(key)
            want = _code(row, key)
            if key == "AnatomicRegionModifierSequence" and want is None:
                want = _code(row, "SegmentedPropertyTypeModifierCodeSequence")  # laterality, also as the region's
            assert (None if got is None else (got["CodeValue"], got["CodingSchemeDesignator"], got["CodeMeaning"])) \
                == want, (name, key)
    np.testing.assert_array_equal(_on_grid(image, merged), array)

    # dcmqi's own SEG of the same structures, from the published colours: a SEG "from elsewhere"
    metadata = tmp_path / "meta.json"
    metadata.write_text(json.dumps(_dcmqi_metadata(labels)))
    theirs_path = tmp_path / "dcmqi.dcm"
    _dcmqi("itkimage2segimage", "--inputImageList", str(merged), "--inputDICOMDirectory",
           str(_complete_copy(ct_dir / "totalsegmentator" / "example_ct_dicom", tmp_path / "series")),
           "--outputDICOM", str(theirs_path), "--inputMetadata", str(metadata))
    theirs, _ = _dcmqi_read(theirs_path, tmp_path / "theirs")
    # dcmqi shows each of our segments in the colour it shows for the published one (its CIELab -> RGB reading
    # is its own: five dark colours come back shifted, for its own SEG as for ours)
    for value in ours:
        assert ours[value]["recommendedDisplayRGBValue"] == pytest.approx(
            theirs[value]["recommendedDisplayRGBValue"], abs=1), ours[value]["SegmentLabel"]
    # and medseg opens dcmqi's SEG with its names, the colours dcmqi was given and every voxel
    opened = read_dicom_seg(theirs_path, image)
    np.testing.assert_array_equal(opened.label_map.array, array)
    assert len(opened.segments) == 117
    for segment in opened.segments:
        assert segment.name == theirs[segment.value]["SegmentLabel"]
        assert segment.color == pytest.approx(_rgb(published[segment.name]), abs=1), segment.name
        assert segment.modifier == labels[segment.value].modifier


def test_medseg_reads_its_own_seg_with_every_code(written) -> None:
    image, array, labels, path, _result = written
    opened = read_dicom_seg(path, image)
    np.testing.assert_array_equal(opened.label_map.array, array)
    for segment in opened.segments:
        want = labels[segment.value]
        assert (segment.name, segment.category, segment.type, segment.modifier, segment.region,
                segment.region_modifier) == (want.name, want.category, want.type, want.modifier, want.region,
                                             want.region_modifier)
        assert np.abs(np.array(segment.color) - want.color).max() <= 1
    assert opened.segments[1].modifier == Code("24028007", "SCT", "Right")  # kidney_right


def test_a_seg_written_by_totalsegmentator_opens_with_its_names_and_colours(ct_dir: Path, tmp_path: Path) -> None:
    """TotalSegmentator's own --output_type dicom writer (save_mask_as_dicomseg) on its own result."""
    import nibabel as nib
    from totalsegmentator.dicom_io import save_mask_as_dicomseg
    from totalsegmentator.map_to_binary import class_map

    folder = ct_dir / "totalsegmentator"
    nifti = nib.load(folder / "example_seg_dicom.nii.gz")
    save_mask_as_dicomseg(np.asarray(nifti.dataobj).astype(np.uint8), class_map["total"], folder / "example_ct_dicom",
                          tmp_path / "ts.dcm", nifti.affine)
    image = load(folder / "example_ct_dicom")
    opened = read_dicom_seg(tmp_path / "ts.dcm", image)
    expected = _on_grid(image, folder / "example_seg_dicom.nii.gz")
    published = _published()
    names = {}
    for segment in opened.segments:
        names[segment.value] = segment.name
        assert np.abs(np.array(segment.color) - _rgb(published[segment.name])).max() <= 1, segment.name
    assert len(names) == len(np.unique(expected)) - 1 == 31
    # TotalSegmentator numbers its segments 1..N over the classes present: names say which class each is
    by_name = {name: value for value, name in class_map["total"].items()}
    relabelled = np.zeros_like(opened.label_map.array)
    for value, name in names.items():
        relabelled[opened.label_map.array == value] = by_name[name]
    np.testing.assert_array_equal(relabelled, expected)
    # and its left and right structures carry the same codes (the mapping's modifier column is not written)
    dataset = pydicom.dcmread(tmp_path / "ts.dcm", stop_before_pixels=True)
    by_label = {str(item.SegmentLabel): item for item in dataset.SegmentSequence}
    pairs = [(name, name[:-4] + "right") for name in by_label if name.endswith("_left") and name[:-4] + "right" in by_label]
    assert pairs
    for left, right in pairs:
        concepts = [(item.SegmentedPropertyTypeCodeSequence[0].CodeValue,
                     "SegmentedPropertyTypeModifierCodeSequence" in item.SegmentedPropertyTypeCodeSequence[0],
                     "AnatomicRegionSequence" in item) for item in (by_label[left], by_label[right])]
        assert concepts[0] == concepts[1] and concepts[0][1:] == (False, False), (left, right)
