"""Dataset panel, "Add DICOM + SEG…": a real GE 3-slice CT and DICOM SEGs drawn on it become training cases.

Oracles: the NRRD masks shipped beside the SEG (read by SimpleITK), the CT read by SimpleITK's own DICOM
series reader, and, for the multi-segment SEG, the masks it was written from by highdicom in the test.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import highdicom as hd
import numpy as np
import pydicom
import pytest
import SimpleITK as sitk
from pydicom.sr.codedict import codes
from pydicom.uid import generate_uid
from PySide6.QtWidgets import QFileDialog

from medseg.gui.train.dataset_panel import DatasetPanel

DCMQI = "dcmqi_ct3slice_masks"


def _nrrd(ct_dir: Path, name: str) -> np.ndarray:
    return sitk.GetArrayFromImage(sitk.ReadImage(str(ct_dir / DCMQI / "masks" / f"{name}_seg.nrrd")))


def _sources(ct_dir: Path) -> list:
    sources = sorted((pydicom.dcmread(str(p)) for p in (ct_dir / DCMQI / "image").glob("*.dcm")),
                     key=lambda ds: float(ds.ImagePositionPatient[2]))
    for ds in sources:
        if "SpecificCharacterSet" in ds and not ds.SpecificCharacterSet:
            del ds.SpecificCharacterSet  # the GE files carry an empty one, which highdicom refuses
    return sources


def _three_segment_seg(ct_dir: Path, path: Path) -> dict[str, np.ndarray]:
    """A SEG of liver, spine and heart (from the shipped NRRD masks) written by highdicom, plus an empty one."""
    sources = _sources(ct_dir)
    # The NRRD grid is the CT grid (same origin and spacing); its slice order follows z like `sources`.
    masks = {"LIVER": _nrrd(ct_dir, "liver") > 0, "Spine": _nrrd(ct_dir, "spine") > 0,
             "Heart": _nrrd(ct_dir, "heart") > 0}
    masks["Kidney"] = np.zeros_like(masks["LIVER"])
    pixels = np.stack(list(masks.values()), axis=-1).astype(np.uint8)
    descriptions = [hd.seg.SegmentDescription(
        segment_number=number, segment_label=name, segmented_property_category=codes.SCT.Organ,
        segmented_property_type=codes.SCT.Organ, algorithm_type=hd.seg.SegmentAlgorithmTypeValues.MANUAL)
        for number, name in enumerate(masks, start=1)]
    seg = hd.seg.Segmentation(
        source_images=sources, pixel_array=pixels, segmentation_type=hd.seg.SegmentationTypeValues.BINARY,
        segment_descriptions=descriptions, series_instance_uid=hd.UID(), series_number=99,
        sop_instance_uid=hd.UID(), instance_number=1, manufacturer="test", manufacturer_model_name="test",
        software_versions="1", device_serial_number="1", omit_empty_frames=True)
    seg.save_as(str(path))
    return masks


def _wait_added(qtbot, panel: DatasetPanel) -> None:
    qtbot.waitUntil(lambda: panel.convert_job is None and panel.job is None
                    and all(e.info is not None for e in panel.training_set.entries), timeout=120_000)


def test_add_dicom_seg_pairs_through_the_panel(qtbot, ct_dir, tmp_path, artifacts_dir, monkeypatch):
    panel = DatasetPanel(tmp_path / "workspace")
    qtbot.addWidget(panel)
    panel.resize(1300, 420)
    panel.show()
    errors: list = []
    panel.failed.connect(errors.append)
    image_folder = ct_dir / DCMQI / "image"
    liver_seg = ct_dir / DCMQI / "masks" / "liver_SEG.dcm"

    # 1. The shipped liver SEG, picked with the two dialogs (series folder, then the SEG file).
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(image_folder))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: (str(liver_seg), ""))
    panel.add_seg_button.click()
    _wait_added(qtbot, panel)
    assert not errors, errors
    (liver_case,) = panel.training_set.entries
    assert liver_case.source == "DICOM SEG: liver_SEG.dcm" and panel.training_set.label_names == ["Liver"]
    folder = liver_case.spec.image.parent
    assert folder.parent == tmp_path / "workspace" / "cases" and (folder / "case.json").is_file()
    label = sitk.GetArrayFromImage(sitk.ReadImage(str(liver_case.spec.label)))
    assert np.array_equal(label > 0, _nrrd(ct_dir, "liver") > 0)  # the 107,098 liver voxels, on the CT grid
    reader = sitk.ImageSeriesReader()
    reader.SetFileNames(reader.GetGDCMSeriesFileNames(str(image_folder)))
    ct = reader.Execute()
    saved = sitk.ReadImage(str(liver_case.spec.image))
    assert np.array_equal(sitk.GetArrayFromImage(saved), sitk.GetArrayFromImage(ct))  # HU, slice order
    assert saved.GetOrigin() == pytest.approx(ct.GetOrigin()) and saved.GetSpacing() == pytest.approx(ct.GetSpacing())
    assert liver_case.info.labels_present == ["Liver"] and panel.training_set.problems(liver_case) == []

    # 2. One folder holding the series and a 4-segment SEG (written here by highdicom): the SEG is found by
    #    its SOP Class; "LIVER" is the set's "Liver", Spine and Heart become labels, the empty Kidney is flagged.
    both = tmp_path / "series_and_seg"
    shutil.copytree(image_folder, both)
    masks = _three_segment_seg(ct_dir, both / "seg_4.dcm")
    monkeypatch.setattr(QFileDialog, "getExistingDirectory", lambda *a, **k: str(both))
    monkeypatch.setattr(QFileDialog, "getOpenFileName", lambda *a, **k: ("", ""))  # "find it in the folder"
    panel.add_seg_button.click()
    _wait_added(qtbot, panel)
    assert not errors, errors
    multi = panel.training_set.entries[1]
    assert panel.training_set.label_names == ["Liver", "Spine", "Heart", "Kidney"]
    written = sitk.GetArrayFromImage(sitk.ReadImage(str(multi.spec.label)))
    # The real masks overlap (liver and heart share voxels); one label per voxel: the later segment keeps them.
    shared = masks["LIVER"] & masks["Heart"]
    assert shared.sum() > 0
    expected = {"Liver": masks["LIVER"] & ~shared, "Spine": masks["Spine"], "Heart": masks["Heart"],
                "Kidney": masks["Kidney"]}
    for value, name in multi.spec.label_values.items():
        assert np.array_equal(written == value, expected[name]), name
    assert multi.info.labels_present == ["Liver", "Spine", "Heart"]
    overlap = (f"SEG: overlapping segments (one label per voxel: the later segment kept): LIVER/Heart "
               f"{int(shared.sum())} voxels")
    assert panel.training_set.problems(multi) == [overlap, "empty mask: Kidney", "missing: Kidney"]
    assert panel.training_set.problems(liver_case) == ["missing: Spine, Heart, Kidney"]
    assert panel.table.item(1, 6).text() == f"{overlap}; empty mask: Kidney; missing: Kidney"
    assert panel.table.item(0, 6).text() == "missing: Spine, Heart, Kidney"
    assert "2 case(s) with problems" in panel.status.text()

    # 3. A SEG that references another series is refused by name, and nothing is added or written.
    other = pydicom.dcmread(str(liver_seg))
    other_series = generate_uid()
    other.ReferencedSeriesSequence[0].SeriesInstanceUID = other_series
    for item in other.ReferencedSeriesSequence[0].ReferencedInstanceSequence:
        item.ReferencedSOPInstanceUID = generate_uid()
    for frame in other.PerFrameFunctionalGroupsSequence:
        for source in frame.DerivationImageSequence[0].SourceImageSequence:
            source.ReferencedSOPInstanceUID = generate_uid()
    foreign = tmp_path / "foreign_SEG.dcm"
    other.save_as(str(foreign))
    cases_before = sorted(p.name for p in (tmp_path / "workspace" / "cases").iterdir())
    panel.add_dicom_seg(str(image_folder), str(foreign))
    qtbot.waitUntil(lambda: panel.convert_job is None, timeout=60_000)
    (error,) = errors
    assert error.path == foreign and "does not reference the series" in error.message and other_series in error.message
    assert len(panel.training_set.entries) == 2
    assert sorted(p.name for p in (tmp_path / "workspace" / "cases").iterdir()) == cases_before

    # 4. A SEG with no segments: refused by name.
    empty = pydicom.dcmread(str(liver_seg))
    empty.SegmentSequence = pydicom.Sequence()
    hollow = tmp_path / "no_segments.dcm"
    empty.save_as(str(hollow))
    errors.clear()
    panel.add_dicom_seg(str(image_folder), str(hollow))
    qtbot.waitUntil(lambda: panel.convert_job is None, timeout=60_000)
    (error,) = errors
    assert error.path == hollow and "has no segments" in error.message and len(panel.training_set.entries) == 2
    assert panel.add_seg_button.isEnabled()

    # 5. Ugly picks: a CT slice given as the SEG, and a series folder with no SEG in it; refused by name.
    for series, seg, path, text in ((image_folder, image_folder / "01.dcm", image_folder / "01.dcm", "not a DICOM SEG"),
                                    (image_folder, None, image_folder, "no DICOM SEG")):
        errors.clear()
        panel.add_dicom_seg(str(series), str(seg) if seg else None)
        qtbot.waitUntil(lambda: panel.convert_job is None, timeout=60_000)
        (error,) = errors
        assert error.path == path and text in error.message
    assert len(panel.training_set.entries) == 2
    panel.grab().save(str(artifacts_dir / "gui_train_dataset_dicom_seg.png"))
