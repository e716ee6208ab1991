"""One label type end to end, loss-free: model package -> segment result -> DICOM SEG / label map + sidecar ->
reopened; and into a training case and back. A label nobody coded stays uncoded (DICOM "Unspecified" in a SEG)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from medseg.core.labels import Label
from medseg.io.segmentations import open_segmentation
from medseg.workflows.models import open_model
from medseg.workflows.save import plan_save, save_segmentation
from medseg.workflows.segment import SegmentRequest, segment_study


@pytest.fixture(scope="module")
def segmented(ct_dir: Path):
    """The starter's result on the real 3-slice CT, plus a label drawn by hand (no code)."""
    result = segment_study(SegmentRequest(ct_dir / "dcmqi_ct3slice_masks" / "image"))
    array = np.array(result.label_map.array, copy=True)
    array[0, 10:40, 10:40] = 9
    drawn = Label(9, "my lesion", (250, 20, 20))
    labels = {**result.labels, 9: drawn}
    return result, result.label_map.with_array(array), labels


def kept(label: Label) -> tuple:
    """What a DICOM SEG carries of a label (lock, visibility and opacity are the editor's, in the sidecar only)."""
    return label.value, label.name, label.category, label.type, label.provenance


@pytest.mark.parametrize("suffix", [".dcm", ".nii.gz"])
def test_labels_travel_whole_through_a_saved_segmentation(segmented, tmp_path: Path, suffix: str) -> None:
    result, label_map, labels = segmented
    starter = open_model("starter").card
    assert all(result.labels[v].type == starter.labels[v].type for v in result.labels)  # as model.json says
    target = plan_save(tmp_path / f"seg{suffix}")
    target.check_image(result.image)
    save_segmentation(target, label_map, result.image, labels)
    reopened = open_segmentation(target.path, result.image)
    assert np.array_equal(reopened.label_map.array, label_map.array)
    if suffix == ".nii.gz":
        assert reopened.labels == labels  # the sidecar keeps every field
    else:
        assert {v: kept(label) for v, label in reopened.labels.items()} == {v: kept(label) for v, label in labels.items()}
        for value, label in reopened.labels.items():  # CIELab in the SEG: the colour comes back within rounding
            assert np.abs(np.subtract(label.color, labels[value].color)).max() <= 1
    assert not reopened.labels[9].coded and reopened.labels[9].name == "my lesion"


def test_highdicom_reads_the_package_codes_and_unspecified_for_the_drawn_label(segmented, tmp_path: Path) -> None:
    import highdicom as hd

    result, label_map, labels = segmented
    target = plan_save(tmp_path / "seg.dcm")
    save_segmentation(target, label_map, result.image, labels)
    seg = hd.seg.segread(str(target.path))
    described = {seg.get_segment_description(n).segment_label: seg.get_segment_description(n)
                 for n in seg.get_segment_numbers()}
    for label in labels.values():
        description = described[label.name]
        category, type_ = label.concept()
        assert (description.segmented_property_category.value, description.segmented_property_type.value) == (
            category.value, type_.value)
    lesion = described["my lesion"]
    assert (lesion.segmented_property_type.value, lesion.segmented_property_type.scheme_designator) == ("111176", "DCM")
    assert lesion.algorithm_type.value == "MANUAL"
    body = described["body"]
    assert (body.segmented_property_type.value, body.segmented_property_type.meaning) == ("38266002", "Entire body")
    assert body.algorithm_type.value == "AUTOMATIC"


def test_labels_travel_into_a_training_case_and_a_trained_models_dataset(segmented, tmp_path: Path) -> None:
    from medseg.model.datasets import open_dataset
    from medseg.workflows.training_cases import add_training_case

    result, label_map, labels = segmented
    entry = add_training_case(tmp_path / "workspace", result.image, label_map, labels, name="ge3")
    case_json = open_dataset(Path(entry.spec.image).parent)  # the case folder: its case.json alone
    by_name = {label.name: label for label in case_json.label_table().values()}
    for label in labels.values():
        assert (by_name[label.name].category, by_name[label.name].type) == (label.category, label.type)
    manifest = open_dataset(tmp_path / "workspace" / "medseg-dataset.json")  # what `medseg train` reads
    coded = {label.name: (label.category, label.type) for label in manifest.label_table().values() if label.value}
    assert coded == {label.name: (label.category, label.type) for label in labels.values()}


def test_a_training_case_needs_every_label_named(segmented, tmp_path: Path) -> None:
    from medseg.errors import DatasetError
    from medseg.workflows.training_cases import add_training_case

    result, label_map, labels = segmented
    unnamed = {v: label for v, label in labels.items() if v != 9}
    with pytest.raises(DatasetError, match=r"label values \[9\]"):
        add_training_case(tmp_path / "workspace", result.image, label_map, unnamed, name="ge3")
