"""Segment a study through the one use case: real CT in, the model's labels (with the package's codes) out."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from pydicom.sr.codedict import codes

from medseg.core.labels import AUTOMATIC
from medseg.errors import DeviceError, ModalityMismatch
from medseg.model.backends import resolve_device
from medseg.workflows.models import open_model
from medseg.workflows.segment import Segmenter, SegmentRequest, SegmentSettings, segment_study
from medseg.workflows.studies import OpenStudyRequest, open_study


def test_a_real_ct_segmented_with_the_starter(three_slices: Path) -> None:
    progress = []
    result = segment_study(SegmentRequest(three_slices), progress=progress.append)
    image = open_study(OpenStudyRequest(three_slices)).volume  # the same series, opened on its own
    assert result.label_map.same_grid(image) and np.array_equal(result.image.array, image.array)
    starter = open_model("starter").card
    assert result.model == starter and result.notes == []
    present = sorted(int(v) for v in np.unique(result.label_map.array) if v)
    assert sorted(result.labels) == present and present  # the labels found, each as the model describes it
    expected_types = {"body": codes.SCT.EntireBody, "lungs": codes.SCT.Lung, "bones": codes.SCT.BoneTissue}
    for value, label in result.labels.items():
        assert label.name == starter.labels[value].name and label.color == starter.labels[value].color
        expected = expected_types[label.name]  # pydicom's DCMR tables are the oracle for the package's codes
        assert (label.type.value, label.type.scheme, label.type.meaning) == (
            expected.value, expected.scheme_designator, expected.meaning)
        assert label.provenance.algorithm_type == AUTOMATIC and label.provenance.algorithm_name == starter.name
        # the volume is the voxels counted on the map times the voxel volume
        count = np.count_nonzero(result.label_map.array == value)
        assert result.volumes_ml[label.name] == pytest.approx(count * image.voxel_volume_ml, rel=1e-6)
    # "auto" ran where the one resolver chose (the CPU after a fallback, which the result then lists)
    assert result.device == ("cpu" if result.fallbacks else resolve_device("auto"))
    assert progress[0].fraction == 0.0 and progress[-1].fraction == pytest.approx(1.0)
    assert all(b.fraction >= a.fraction for a, b in zip(progress, progress[1:]))  # it only moves forward


def test_an_mr_series_is_refused_unless_allowed_and_then_noted(three_slices_as_mr: Path) -> None:
    with pytest.raises(ModalityMismatch) as refused:
        segment_study(SegmentRequest(three_slices_as_mr))
    assert "this series is MR" in refused.value.message and refused.value.path is not None
    allowed = segment_study(SegmentRequest(three_slices_as_mr, settings=SegmentSettings(allow_modality=True)))
    assert len(allowed.notes) == 1 and "MR series (Modality MR)" in allowed.notes[0]


def test_an_absent_device_fails_before_any_model_or_image_is_read(fake_machine, monkeypatch, three_slices) -> None:
    import medseg.workflows.segment as segment

    fake_machine(cuda=0)

    def nothing_opened(*args, **kwargs):
        raise AssertionError("nothing may be opened for a device that is not there")

    monkeypatch.setattr(segment, "open_model", nothing_opened)
    monkeypatch.setattr(segment, "open_study", nothing_opened)
    with pytest.raises(DeviceError, match="CUDA was requested"):
        segment_study(SegmentRequest(three_slices, settings=SegmentSettings(device="cuda")))


def test_an_open_volume_is_checked_again(three_slices: Path) -> None:
    """The GUI hands over the image it shows: the spacing rule holds for it as for a file read here."""
    from medseg.errors import GeometryError

    image = open_study(OpenStudyRequest(three_slices)).volume
    image.spacing_mm = (1e-4, 1e-4, 1.0)  # what an absurd header would give
    with pytest.raises(GeometryError, match="outside the range of any CT"):
        Segmenter().segment(image)
